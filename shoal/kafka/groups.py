"""Deleting consumer groups in a process of its own (DESIGN.md section 1: one Kafka layer).

Kafka deletes a group with DeleteGroups, sent to the group's coordinator, and confluent-kafka
offers it only as the AdminClient's ``delete_consumer_groups``. librdkafka 2.16 sends every such
coordinator-routed admin request through ``rd_kafka_admin_coord_request``, which aborts the whole
process on its ``eonce->refcnt > 0`` assertion when the request meets a coordinator change, as
during a broker loss (confluentinc/librdkafka#4605). A storage node deletes a removed replica's
groups (UNLOAD_FINAL), so the request runs in a short-lived child process (a fresh interpreter,
nothing inherited from the node's threads): an abort there ends only the child, and
the caller is told which groups were not deleted and why. A group left behind holds only committed
offsets of a placement id that is never reused; Kafka expires them after
``offsets.retention.minutes``.

The settings reach the child on its stdin (pickled), never its command line, so secrets stay out
of the process list.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections.abc import Callable, Sequence

from shoal.kafka.settings import KafkaSettings

Outcome = dict[str, str | None]
"""{group: None when deleted (or already gone), else why not}."""

_CHILD = (
    "import pickle, sys\n"
    "sys.path[:] = pickle.load(sys.stdin.buffer)\n"
    "work, args = pickle.load(sys.stdin.buffer)\n"
    "answer = work(*args)\n"
    "sys.stdout.buffer.write(pickle.dumps(answer))\n"
)
"""The child: the parent's import path, then the work and its arguments, all from stdin (pickled by
this process); the answer, pickled, on stdout. Not ``multiprocessing``: its ``spawn`` imports the
parent's main module in the child (the whole CLI, seconds on a busy node)."""


def delete_groups(
    settings: KafkaSettings,
    groups: Sequence[str],
    *,
    timeout_s: float = 20.0,
    work: Callable[[KafkaSettings, list[str], float], Outcome] | None = None,
) -> Outcome:
    """Delete ``groups`` from a child process; never raises for Kafka's or the child's failures.

    ``work`` replaces the child's work, a module-level function (tests: one that aborts)."""
    names = sorted(set(groups))
    if not names:
        return {}
    payload = pickle.dumps(list(sys.path)) + pickle.dumps((work or _delete, (settings, names, timeout_s)))
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=payload,
            capture_output=True,
            timeout=timeout_s + 30,  # the child's start (imports) and every request's own bound
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {g: f"the process deleting them did not end within {timeout_s + 30:.0f} s" for g in names}
    except OSError as exc:
        return {g: f"cannot start the process that deletes groups: {exc}" for g in names}
    answer: object = None
    if done.returncode == 0:
        try:
            answer = pickle.loads(done.stdout)
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError):
            answer = None  # something the child printed that is not its answer
    if isinstance(answer, dict) and set(answer) == set(names):
        return {g: (None if answer[g] is None else str(answer[g])) for g in names}
    code = done.returncode
    why = (
        f"the process deleting them ended with signal {-code}"
        if code < 0
        else f"the process deleting them exited {code} without an answer"
    )
    last = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
    return {g: why + (f" ({last[0][:200]})" if last else "") for g in names}


def _delete(settings: KafkaSettings, groups: list[str], timeout_s: float) -> Outcome:
    """In the child: one ``delete_consumer_groups`` request for every group."""
    from confluent_kafka import KafkaError, KafkaException

    from shoal.kafka import clients
    from shoal.kafka.errors import error_code

    out: Outcome = {}
    try:
        admin = clients.admin(settings)
        futures = admin.delete_consumer_groups(groups, request_timeout=timeout_s)
        for group, fut in futures.items():
            try:
                fut.result(timeout=timeout_s + 5)
                out[group] = None
            except KafkaException as exc:
                out[group] = None if error_code(exc) == KafkaError.GROUP_ID_NOT_FOUND else str(exc)
            except TimeoutError:
                out[group] = f"no answer within {timeout_s + 5:.0f} s"
    except (KafkaException, ValueError) as exc:
        return {g: out.get(g, str(exc)) for g in groups}
    return {g: out.get(g, "no answer") for g in groups}
