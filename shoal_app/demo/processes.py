"""The processes the full demo starts, kills and stops, and the commands it runs as a user would.

Orchestration only, on top of the runtime's public pieces: the cluster is :func:`launcher.up` /
``down`` (in :mod:`shoal_app.demo.full`); a node is killed with ``kill -9`` by the pid in the cluster
file (:func:`shoal_app.runtime.process.kill`) and restarted by :func:`shoal_app.runtime.restart.restart_process`
(the launcher's node spec, same port and data dir; the new pid goes to the cluster file).
``shoal monitor`` and ``shoal spark ingest`` run in their own sessions and are stopped by pid;
``shoal spark compact --once`` and ``shoal verify`` run to completion.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shoal import cluster_file, jsonio
from shoal.cluster_file import ClusterInfo, ProcessRecord
from shoal.errors import RuntimeLaunchError, ShoalError
from shoal.worker import Deadline, poll_until
from shoal_app.runtime.process import is_running, kill, spawn, stop, tail

if TYPE_CHECKING:
    from shoal.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)

DEMO_MARKER = "shoal-demo.json"
"""The file that says a directory is a demo data dir (and what a kept demo left running)."""


class DemoError(ShoalError):
    """The full demo could not do one of its steps (names the step and why)."""


def check_data_dir(data_dir: Path) -> None:
    """A demo data dir is new, empty, or one a previous demo made; anything else is refused untouched."""
    if not data_dir.exists():
        return
    if not data_dir.is_dir():
        raise DemoError(f"--data-dir {data_dir} is not a directory")
    if any(data_dir.iterdir()) and not (data_dir / DEMO_MARKER).exists():
        raise DemoError(
            f"--data-dir {data_dir} is not empty and was not made by `shoal demo` (no {DEMO_MARKER}); "
            "the demo starts from a fresh directory and will not delete it: choose a new or empty one"
        )
    cf = data_dir / "cluster.json"
    if cf.exists():
        try:
            previous = cluster_file.read(cf)
        except ShoalError:
            return
        if any(is_running(p) for p in previous.processes):
            raise DemoError(
                f"a demo cluster is still running from {data_dir} (left by --keep-running); "
                f"stop it with `shoal demo --stop --data-dir {data_dir}`"
            )


def write_state(data_dir: Path, state: dict[str, Any]) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / DEMO_MARKER).write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def read_state(data_dir: Path) -> dict[str, Any]:
    path = data_dir / DEMO_MARKER
    try:
        data = jsonio.read_checked(path)
    except FileNotFoundError as exc:
        raise DemoError(f"{data_dir} holds no demo ({path} is missing)") from exc
    except OSError as exc:
        raise DemoError(f"cannot read {path}: {exc.strerror}") from exc
    except jsonio.BadJson as exc:
        raise DemoError(f"{path} is {exc.reason}") from exc
    if not isinstance(data, dict):
        raise DemoError(f"{path} must hold a JSON object")
    return data


def kill_node(info: ClusterInfo, server_id: str, timeout_s: float = 30.0) -> ProcessRecord:
    """``kill -9`` the process of ``server_id`` (pid from the cluster file) and wait until it is gone."""
    record = info.process(server_id)
    if record is None or not is_running(record):
        raise DemoError(f"cannot kill {server_id}: the cluster file names no running process for it")
    kill(record)
    if not poll_until(lambda: not is_running(record), timeout_s):
        raise DemoError(f"{server_id} pid {record.pid} still runs {timeout_s:.0f}s after SIGKILL")
    return record


@dataclass(frozen=True)
class MonitorProcess:
    record: ProcessRecord
    url: str


def start_monitor(
    cluster_path: Path, history_dir: Path, table: str, port: int, *, interval_s: float = 2.0, timeout_s: float = 60.0
) -> MonitorProcess:
    """Run ``shoal monitor TABLE --port PORT`` in its own session; return once it answers /healthz."""
    argv = [
        sys.executable,
        "-m",
        "shoal_app.cli.main",
        "--cluster-file",
        str(cluster_path.resolve()),
        "monitor",
        table,
        "--port",
        str(port),
        "--interval",
        f"{interval_s:g}",
        "--window",
        "10",
        "--history-dir",
        str(history_dir.resolve()),
    ]
    record = spawn("monitor", argv, log_path=history_dir / "monitor.log", marker=str(history_dir.resolve()), port=port)
    url = f"http://127.0.0.1:{port}"
    deadline = Deadline(timeout_s)
    while True:
        if not is_running(record):
            raise RuntimeLaunchError(f"`shoal monitor` exited during start:\n{tail(record.log_path)}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as resp:
                if resp.status == 200:
                    return MonitorProcess(record, url)
        except (urllib.error.URLError, OSError):
            pass
        if deadline.expired():
            stop(record)
            raise RuntimeLaunchError(
                f"`shoal monitor` did not answer within {timeout_s:.0f}s:\n{tail(record.log_path)}"
            )
        time.sleep(0.5)


def monitor_snapshot(url: str, timeout_s: float = 3.0) -> dict[str, Any] | None:
    """The monitor's latest snapshot (``/api/snapshot``), or None if it has none (yet)."""
    try:
        with urllib.request.urlopen(f"{url}/api/snapshot", timeout=timeout_s) as resp:
            data = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "tables" in data else None


def stop_process(record: ProcessRecord) -> bool:
    return stop(record, timeout_s=15)


def shoal_argv(cluster_path: Path, *args: str) -> list[str]:
    """The command line of ``shoal --cluster-file CLUSTER ARGS...`` with this Python."""
    return [sys.executable, "-m", "shoal_app.cli.main", "--cluster-file", str(cluster_path.resolve()), *args]


def start_ingest(
    cluster_path: Path, *, topic: str, table: str, checkpoint: Path, query_name: str, master: str, log_path: Path
) -> ProcessRecord:
    """Run ``shoal spark ingest`` as a user would, in its own session (stopped by pid with SIGTERM)."""
    argv = shoal_argv(
        cluster_path,
        "spark",
        "ingest",
        "--topic",
        topic,
        "--table",
        table,
        "--checkpoint",
        str(checkpoint.resolve()),
        "--query-name",
        query_name,
        "--trigger-interval",
        "2 seconds",
        "--max-offsets-per-trigger",
        "5000",
        "--master",
        master,
        "--output",
        "json",
    )
    return spawn("spark-ingest", argv, log_path=log_path, marker=str(checkpoint.resolve()))


def last_line(text: str) -> str:
    """The last non-empty line of a command's stderr (where Python and click put the error)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:500] if lines else "(no output)"


def run_compaction(
    cluster_path: Path, *, table: str, master: str, timeout_s: float, log_path: Path
) -> list[dict[str, Any]]:
    """``shoal spark compact --once --table TABLE --min-minors 1 --local-max-bytes 0``: its outcomes (one per
    major computed, always by a Spark job: the demo shows Spark compacting, however small its minors).

    Its stderr (Spark's log) goes to ``log_path``; an error names the command, its last line and the log.
    """
    import subprocess

    argv = shoal_argv(
        cluster_path,
        "spark",
        "compact",
        "--once",
        "--table",
        table,
        "--min-minors",
        "1",
        "--local-max-bytes",
        "0",
        "--master",
        master,
        "--output",
        "json",
    )
    what = "`shoal spark compact --once`"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise DemoError(f"{what} did not finish within {timeout_s:.0f}s") from exc
    log_path.write_text(proc.stderr, encoding="utf-8")
    if proc.returncode != 0:
        raise DemoError(f"{what} exited {proc.returncode}: {last_line(proc.stderr)} (full log {log_path})")
    try:
        outcomes = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise DemoError(f"{what} printed no JSON: {proc.stdout[-300:]!r} (log {log_path})") from exc
    if not isinstance(outcomes, list):
        raise DemoError(f"{what} printed a {type(outcomes).__name__}, expected a list of outcomes")
    return outcomes


def topic_records(kafka: KafkaSettings, topic: str) -> int:
    """Records a (one-partition) topic holds now, 0 if it does not exist."""
    from shoal.kafka.admin import log_start_and_end

    try:
        low, high = log_start_and_end(kafka, topic)
    except ShoalError:
        return 0
    return max(0, high - low)
