"""Start and stop local server processes by pid, never by name.

A process is started in its own session (so its pid is its process group id) with stdout and
stderr going to a log file. A record of it (name, pid, a marker string that must appear in its
command line, log path) is what the cluster file keeps. Identity is psutil's: a process is the
record's if its command line carries the marker when first seen, and afterwards only while psutil
finds the same pid with the same create time, so a recycled pid that now belongs to somebody else
is never signalled.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from shoal.cluster_file import ProcessRecord
from shoal.errors import RuntimeLaunchError
from shoal.worker import Deadline, poll_until

log = logging.getLogger(__name__)


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    log_path: Path,
    marker: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    port: int | None = None,
    metrics_port: int | None = None,
) -> ProcessRecord:
    """Start ``argv`` detached in its own session, logging to ``log_path``."""
    if not carries(argv, marker):
        raise RuntimeLaunchError(f"marker {marker!r} must be an argument (or follow '=') of the command line of {name}")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=str(cwd) if cwd else None,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise RuntimeLaunchError(f"cannot start {name}: {exc}") from exc
    _CHILDREN[proc.pid] = proc
    log.info("started %s pid=%d log=%s", name, proc.pid, log_path)
    return ProcessRecord(
        name=name, pid=proc.pid, marker=marker, log_path=str(log_path), port=port, metrics_port=metrics_port
    )


_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
"""Children started by this Python process: reaped here (no zombies), and while unreaped their pid
cannot be reused, so for them ``Popen.poll`` alone says whether they run."""

_KNOWN: dict[tuple[int, str], psutil.Process] = {}
"""Processes whose identity was checked (pid plus marker): psutil keeps each one's create time, so a
later check of the same pid is a check of the same process."""


def _process(record: ProcessRecord) -> psutil.Process | None:
    """The live process ``record`` names, or None: gone, a zombie, or a recycled pid (another process)."""
    key = (record.pid, record.marker)
    child = _CHILDREN.get(record.pid)
    known = _KNOWN.get(key)
    try:
        if child is not None:
            if child.poll() is not None:
                _CHILDREN.pop(record.pid, None)
                _KNOWN.pop(key, None)
                return None
            # Our own unreaped child: spawn checked the marker in its argv, and Popen returns after exec.
            proc = known or psutil.Process(record.pid)
        else:
            if known is not None and known.is_running():  # is_running compares the create time too
                proc = known
            else:
                _KNOWN.pop(key, None)
                proc = psutil.Process(record.pid)
                if not carries(_settled_cmdline(proc), record.marker):
                    return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
    except psutil.Error:  # NoSuchProcess, ZombieProcess, AccessDenied
        _KNOWN.pop(key, None)
        return None
    _KNOWN[key] = proc
    return proc


def carries(args: Sequence[str], marker: str) -> bool:
    """Whether ``marker`` is one whole argument of ``args``, or the value of one (``--opt=MARKER``):
    never a substring, so a marker such as ``sleep`` or ``""`` does not match somebody's shell job."""
    return bool(marker) and (marker in args or any(a.endswith(f"={marker}") for a in args))


def _settled_cmdline(proc: psutil.Process, wait_s: float = 1.0) -> list[str]:
    """``proc``'s command line, waiting briefly while it is empty.

    Linux closes the close-on-exec fds (which is when ``subprocess.Popen`` returns) before the new
    program's arguments are in place, so for a moment right after exec ``/proc/PID/cmdline`` is empty.
    A live process with an empty command line is either in that moment or a kernel thread; waiting a
    little tells the two apart.
    """
    args = proc.cmdline()
    deadline = Deadline(wait_s)
    while not args and deadline.sleep(0.01):
        args = proc.cmdline()
    return args


def find_by_marker(record: ProcessRecord) -> int | None:
    """The pid of a live process with ``record``'s marker as one whole argument (``--data-dir DIR``
    or ``--data-dir=DIR``), or None: the same server started again by hand, e.g. a storage node
    restarted with the README's node command line after ``shoal up`` recorded another pid."""
    wanted = {record.marker, f"--data-dir={record.marker}"}
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            args = proc.info.get("cmdline") or []
            if proc.info.get("status") != psutil.STATUS_ZOMBIE and wanted & set(args) and "node" in args:
                return int(proc.info["pid"])
        except psutil.Error:
            continue
    return None


def is_running(record: ProcessRecord) -> bool:
    """True if ``record.pid`` is alive, not a zombie, and still the process we started."""
    return _process(record) is not None


def cmdline(record: ProcessRecord) -> tuple[str, ...] | None:
    """The command line of the process ``record`` names, or None if it does not run."""
    proc = _process(record)
    try:
        return tuple(_settled_cmdline(proc)) if proc is not None else None
    except psutil.Error:
        return None


def stop(record: ProcessRecord, *, timeout_s: float = 20.0) -> bool:
    """SIGTERM the process group, then SIGKILL after ``timeout_s``. Returns True if it had been running."""
    proc = _process(record)
    if proc is None:
        return False
    log.info("stopping %s pid=%d", record.name, record.pid)
    _signal_group(proc, signal.SIGTERM)
    if poll_until(lambda: not is_running(record), timeout_s):
        return True
    log.warning("%s pid=%d did not stop within %.0fs; killing it", record.name, record.pid, timeout_s)
    _signal_group(proc, signal.SIGKILL)
    if poll_until(lambda: not is_running(record), 10.0):
        return True
    raise RuntimeLaunchError(f"{record.name} pid={record.pid} survived SIGKILL")


def kill(record: ProcessRecord) -> None:
    """kill -9, for fault tests: no chance to clean up."""
    proc = _process(record)
    if proc is not None:
        _signal_group(proc, signal.SIGKILL)


def _signal_group(proc: psutil.Process, sig: signal.Signals) -> None:
    """Signal the process group ``proc`` leads (spawn starts each process in its own session), once
    more checking that ``proc`` is still the process it was (psutil compares pid and create time)."""
    if not proc.is_running():
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def tail(path: str | Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file (its last 16 KiB at most)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
