"""Start and stop local server processes by pid, never by name.

A process is started in its own session (so its pid is its process group id) with stdout and
stderr going to a log file. A record of it (name, pid, a marker string that must appear in its
command line, log path) is what the cluster file keeps; stopping checks the marker first, so a
recycled pid that now belongs to somebody else is never signalled.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from shoal.cluster_file import ProcessRecord
from shoal.errors import RuntimeLaunchError

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
    if marker not in " ".join(argv):
        raise RuntimeLaunchError(f"marker {marker!r} must appear in the command line of {name}")
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
    return ProcessRecord(name=name, pid=proc.pid, marker=marker, log_path=str(log_path), port=port,
                         metrics_port=metrics_port)  # fmt: skip


_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
"""Children started by this Python process, so they can be reaped (no zombies)."""


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        _CHILDREN.pop(pid, None)


def is_running(record: ProcessRecord) -> bool:
    """True if ``record.pid`` is alive, not a zombie, and still the process we started."""
    _reap(record.pid)
    try:
        cmdline = Path(f"/proc/{record.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        stat = Path(f"/proc/{record.pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
    if state in ("Z", "X"):
        return False
    # Right after fork/exec /proc/PID/cmdline can be empty for a moment: alive, not yet checkable.
    return not cmdline.strip() or record.marker in cmdline


def stop(record: ProcessRecord, *, timeout_s: float = 20.0) -> bool:
    """SIGTERM the process group, then SIGKILL after ``timeout_s``. Returns True if it had been running."""
    if not is_running(record):
        return False
    log.info("stopping %s pid=%d", record.name, record.pid)
    _signal_group(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_running(record):
            return True
        time.sleep(0.1)
    log.warning("%s pid=%d did not stop within %.0fs; killing it", record.name, record.pid, timeout_s)
    _signal_group(record.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not is_running(record):
            return True
        time.sleep(0.1)
    raise RuntimeLaunchError(f"{record.name} pid={record.pid} survived SIGKILL")


def kill(record: ProcessRecord) -> None:
    """kill -9, for fault tests: no chance to clean up."""
    if is_running(record):
        _signal_group(record.pid, signal.SIGKILL)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, sig)


def tail(path: str | Path, lines: int = 30) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
