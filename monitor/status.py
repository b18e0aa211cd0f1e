"""Burrow's consumer lag evaluation over a sliding window of committed offsets, false alarms fixed.

Source: LinkedIn Burrow, "Consumer Lag Evaluation Rules" (wiki) and its evaluator
(``calculatePartitionStatus``). Burrow keeps, per partition a group consumes, a window of the
last N committed offsets with the lag at each, and says:

1. if the lag was zero at any point in the window, the partition is OK;
2. if the committed offset went down between two entries, REWIND;
3. if the time since the last commit is longer than the window's span, STOP (the group stopped
   committing);
4. if the committed offset did not change over the window (and there is lag), STALL;
5. if the offsets move but the lag never decreases, WARN (the consumer is too slow);
6. otherwise OK.

Here a window entry is one *poll* of the monitor (a sample: committed offset, log start and end,
lag, live group members), not one commit: the groups of shoal's followers commit only when there
is something to acknowledge, so commit-driven windows would freeze. Adapted and fixed, in order:

- **ERR** first, for what Burrow cannot see: the topic was recreated under the group or the
  cluster changed (``events``); the committed offset is beyond the log end (Ack past Append);
  the log end moved backwards; the log start passed the committed offset (truncated past an
  Ack: records the group never acknowledged were deleted; the caller chooses the status, because
  on a segments channel that only means "replay from the latest major" and is a REWIND).
- **REWIND** when the committed offset went down inside the window and has not yet come back to
  where it was. Checked even when the lag was zero (Burrow PR #716: rule 1 hid rewinds).
- **OK** when the current lag is zero, whatever the commit timestamps say. Burrow's rule 3
  reports an idle channel whose consumer is caught up (lag 0, nothing to commit for a long time)
  as STOP as soon as one record arrives (Burrow issue #303); here an idle channel with zero lag
  is OK, and lag must persist for ``warn_samples`` polls before anything else is said (the
  fix Burrow shipped as its broker-offset ring, PR #338). The lag is counted in data records:
  a transaction's commit marker past the committed offset is not lag (a caught-up reader of a
  transactional channel is one offset short of the log end forever).
- **STOP / STALL** when the lag was non-zero in *every* sample of a full window (rule 1) and the
  committed offset did not move over it (rules 3 and 4): STALL if the group has live members
  (a consumer is there but its offset is stuck), STOP if it has none (nobody is committing).
  shoal's own readers commit with ``assign()`` and have no members in Kafka: the collector counts
  a reader whose placement campaigns in the partition's election (or a live elected leader, for
  the ingest index) as a member, so a stuck follower on a live node is STALL, not STOP.
- **WARN** when the lag has lasted ``warn_samples`` or more polls (default half the window) and
  never decreased over them (rule 5). Unlike Burrow this also covers a consumer whose offset
  stopped moving but whose window is not yet full, so a stopped follower shows WARN before STOP
  instead of OK (Burrow's rule 1 hides a consumer that stops right after catching up for a whole
  window). Half a window, not two polls, because a follower's Ack on a WAL channel moves only
  when a segment is flushed and replicated: its lag grows between flushes by design.
- **OK** otherwise (the lag is going down somewhere).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence
from dataclasses import dataclass


class Status(enum.Enum):
    OK = "OK"
    WARN = "WARN"
    STALL = "STALL"
    STOP = "STOP"
    REWIND = "REWIND"
    ERR = "ERR"

    @property
    def code(self) -> int:
        """The value of the ``*_status_code`` metrics: 0 OK, 1 WARN, 2 STALL, 3 STOP, 4 REWIND, 5 ERR."""
        return _CODES[self]

    @property
    def severity(self) -> int:
        return _CODES[self]


_CODES = {Status.OK: 0, Status.WARN: 1, Status.STALL: 2, Status.STOP: 3, Status.REWIND: 4, Status.ERR: 5}


def worst(statuses: Sequence[Status]) -> Status:
    return max(statuses, key=lambda s: s.severity, default=Status.OK)


@dataclass(frozen=True)
class Sample:
    """One poll of one (channel, group): what Burrow stores per commit, plus the log bounds."""

    ts: float
    """Seconds since the epoch when the sample was taken."""
    committed: int | None
    """The group's committed offset (None: never committed)."""
    log_start: int
    log_end: int
    lag: int
    """Data records past the committed offset (transaction markers excluded)."""
    members: int = 0
    """1 if the group has live members, else 0 (a group that commits with assign() has no membership)."""
    stable_end: int | None = None
    """The last stable offset (below ``log_end`` while a transaction is open; None: not read)."""


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str


def evaluate(
    window: Sequence[Sample],
    *,
    window_samples: int,
    warn_samples: int | None = None,
    events: Sequence[str] = (),
    truncated_status: Status = Status.ERR,
    open_transaction_s: float | None = None,
) -> Verdict:
    """The status of one (channel, group) from its newest samples (oldest first; at most the last
    ``window_samples`` are used). ``events``: explanations of recreations seen inside the window.
    ``open_transaction_s``: how long the last stable offset may stay at one offset below the log
    end before an otherwise OK verdict is WARN (:func:`held_by_transaction`; None: not judged)."""
    if not window:
        return Verdict(Status.OK, "no samples yet")
    warn_after = max(2, window_samples // 2) if warn_samples is None else warn_samples
    window = list(window)[-window_samples:]
    verdict = _lag_verdict(window, window_samples, warn_after, events, truncated_status)
    if verdict.status is Status.OK and open_transaction_s is not None:
        held = held_by_transaction(window, warn_after, open_transaction_s)
        if held is not None:
            return Verdict(Status.WARN, held)
    return verdict


def held_by_transaction(window: Sequence[Sample], polls: int, min_s: float) -> str | None:
    """Why the newest samples show a transaction holding records back, or None.

    A reader's lag counts data records a ``read_committed`` consumer can read; the records of an
    open transaction are not among them, so a transaction left open (a producer that died or hangs
    mid-transaction, until Kafka's transaction timeout aborts it; a hanging transaction, KIP-664)
    holds every reader of the partition at its first offset while the lag reads 0. It shows as the
    last stable offset staying at one offset below the log end: here for ``polls`` polls in a row
    and ``min_s`` seconds (so a window shorter than ``min_s`` never says it: a transaction of a few
    seconds under load is no fault). Under steady transactional writes the last stable offset is
    below the log end at most polls too, but it moves with every commit. A reader whose committed
    offset is past the last stable offset reads uncommitted records (Spark's Kafka source by
    default): nothing holds it."""
    cur = window[-1]
    if cur.stable_end is None or cur.stable_end >= cur.log_end:
        return None
    held = []
    for s in reversed(window):
        if s.stable_end != cur.stable_end or s.stable_end >= s.log_end:
            break
        if s.committed is not None and s.committed > s.stable_end:  # reads uncommitted: not held (Spark's Kafka source)
            return None
        held.append(s)
    span = cur.ts - held[-1].ts
    if len(held) < polls or span < min_s:
        return None
    return (
        f"a transaction open for {span:.0f}s or more holds {cur.log_end - cur.stable_end} offsets back: the last "
        f"stable offset stays at {cur.stable_end} below the log end {cur.log_end}, and read_committed readers see "
        "nothing past it until it commits or Kafka's transaction timeout aborts it "
        "(`kafka-transactions.sh find-hanging` names it)"
    )


def _lag_verdict(
    window: list[Sample],
    window_samples: int,
    warn_after: int,
    events: Sequence[str],
    truncated_status: Status,
) -> Verdict:
    cur = window[-1]
    if events:
        return Verdict(Status.ERR, "; ".join(events))
    if cur.committed is not None and cur.committed > cur.log_end:
        return Verdict(
            Status.ERR,
            f"committed offset {cur.committed} is beyond the log end {cur.log_end}: the topic was recreated "
            "or truncated under the group",
        )
    for prev, nxt in itertools.pairwise(window):
        if nxt.log_end < prev.log_end:
            return Verdict(
                Status.ERR,
                f"log end moved back from {prev.log_end} to {nxt.log_end}: the topic was recreated or lost "
                "acknowledged records (unclean leader election)",
            )
    if cur.committed is not None and cur.committed < cur.log_start:
        return Verdict(
            truncated_status,
            f"truncated past the committed offset: log start {cur.log_start} > committed {cur.committed}; "
            f"{cur.log_start - cur.committed} offsets the group never acknowledged were deleted",
        )
    rewind = _unrecovered_rewind(window)
    if rewind is not None:
        return Verdict(Status.REWIND, rewind)
    if cur.lag == 0:
        return Verdict(Status.OK, "caught up (lag 0)")
    episode = _lag_episode(window)
    span = cur.ts - episode[0].ts
    if len(episode) >= window_samples and len({s.committed for s in episode}) == 1:
        if cur.members > 0:
            return Verdict(
                Status.STALL,
                f"committed offset stuck at {_fmt(cur.committed)} for {span:.0f}s with lag {cur.lag} "
                "while the group has live members",
            )
        return Verdict(
            Status.STOP,
            f"no commit for {span:.0f}s (a full window) with lag {cur.lag}; the group has no live member",
        )
    if len(episode) < warn_after:
        return Verdict(Status.OK, f"lag {cur.lag}, for {len(episode)} poll(s)")
    if all(b.lag >= a.lag for a, b in itertools.pairwise(episode)):
        moved = "advancing" if len({s.committed for s in episode}) > 1 else "not moving"
        return Verdict(
            Status.WARN,
            f"lag not decreasing for {len(episode)} polls ({episode[0].lag} -> {cur.lag}), committed offset {moved}",
        )
    return Verdict(Status.OK, f"lag {cur.lag}, decreasing")


def _fmt(offset: int | None) -> str:
    return "none" if offset is None else str(offset)


def _lag_episode(window: Sequence[Sample]) -> list[Sample]:
    """The trailing samples with non-zero lag."""
    out: list[Sample] = []
    for s in reversed(window):
        if s.lag == 0:
            break
        out.append(s)
    out.reverse()
    return out


def _unrecovered_rewind(window: Sequence[Sample]) -> str | None:
    peak: int | None = None
    found: str | None = None
    for prev, nxt in itertools.pairwise(window):
        if prev.committed is not None:
            peak = prev.committed if peak is None else max(peak, prev.committed)
        if prev.committed is not None and (nxt.committed is None or nxt.committed < prev.committed):
            found = f"committed offset moved back from {prev.committed} to {_fmt(nxt.committed)}"
    cur = window[-1].committed
    if found is None or peak is None:
        return None
    if cur is not None and cur >= peak:
        return None
    return f"{found} and has not come back to {peak} (now {_fmt(cur)})"
