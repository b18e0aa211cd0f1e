"""Restart one process of a local cluster (``shoal up``) in place: same config, data dir, ports.

For fault tests and operators: after a broker, ZooKeeper or a storage node was killed (or crashed),
:func:`restart_process` starts it again exactly as :func:`shoal_app.runtime.launcher.up` did (the
``server.properties`` / ``zoo.cfg`` / node spec it wrote, the same data directory and ports), waits
until it serves, and records the new pid in the cluster file so ``shoal status`` and ``shoal down``
see it. Refused (RuntimeLaunchError, nothing changed) while the process still runs. The fault tests
use it (e.g. "restart the Kafka broker under writes").

:func:`start_missing` does the same for every process of the cluster file that does not run (what
``shoal up`` does on a partly running cluster, as ``docker compose up`` does), and
:func:`stop_process` stops one by pid but keeps it in the cluster file (``shoal stop NAME``), so
``shoal start NAME`` or ``shoal up`` start it again with the same command line, ports and data.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from shoal import cluster_file
from shoal.cluster_file import ClusterInfo, ProcessRecord
from shoal.errors import RuntimeLaunchError
from shoal_app.runtime import kafka, secure, storage_nodes, zookeeper
from shoal_app.runtime.launcher import CLUSTER_FILE_NAME
from shoal_app.runtime.node_spec import local_target, node_spec
from shoal_app.runtime.process import is_running, stop, tail

log = logging.getLogger(__name__)

_INDEXED = re.compile(r"^(kafka|node)-([1-9][0-9]*)$")


def restart_process(
    info: ClusterInfo,
    name: str,
    *,
    cache_dir: Path,
    kafka_heap_mb: int = 768,
    zookeeper_heap_mb: int = 256,
    timeout_s: float = 120.0,
) -> ClusterInfo:
    """Start process ``name`` (``zookeeper``, ``kafka-N`` or ``node-N``) of ``info`` again; return the new info.

    The cluster file in ``info.data_dir`` is rewritten with the new pid. Waits until the process
    serves: ZooKeeper answers, the broker answers metadata on its own port and sees all brokers, the
    node registered in ZooKeeper.
    """
    old = _record(info, name)
    if is_running(old):
        raise RuntimeLaunchError(f"{name} (pid {old.pid}) is still running; stop or kill it before restarting")
    new_info, record = _start(info, old, cache_dir, kafka_heap_mb, zookeeper_heap_mb)
    _wait_serving(new_info, record, timeout_s)
    return new_info


def start_missing(
    info: ClusterInfo,
    *,
    cache_dir: Path,
    kafka_heap_mb: int = 768,
    zookeeper_heap_mb: int = 256,
    timeout_s: float = 120.0,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[ClusterInfo, list[str]]:
    """Start every process of ``info`` that does not run, in place (ZooKeeper first, then the
    brokers together, then the storage nodes), and wait until each serves; (the new info, the names
    started). The brokers start before any is waited for: a broker serves once it sees all brokers."""
    started: list[str] = []
    for tier in ("zookeeper", "kafka-", "node-"):
        missing = [p for p in info.processes if p.name.startswith(tier) and not is_running(p)]
        records: list[ProcessRecord] = []
        for old in missing:
            progress(f"starting {old.name} (port {old.port}, as `shoal up` started it)")
            info, record = _start(info, old, cache_dir, kafka_heap_mb, zookeeper_heap_mb)
            records.append(record)
        for record in records:
            _wait_serving(info, record, timeout_s)
            progress(f"{record.name} serves (pid {record.pid})")
        started += [r.name for r in records]
    return info, started


def stop_process(info: ClusterInfo, name: str, *, timeout_s: float = 20.0) -> bool:
    """Stop process ``name`` of ``info`` by pid (SIGTERM, SIGKILL after ``timeout_s``); it stays in
    the cluster file, to be started again in place. False if it was not running."""
    return stop(_record(info, name), timeout_s=timeout_s)


def _record(info: ClusterInfo, name: str) -> ProcessRecord:
    record = info.process(name)
    if record is None:
        known = ", ".join(p.name for p in info.processes) or "none"
        raise RuntimeLaunchError(f"no process named {name!r} in the cluster file (known: {known})")
    return record


def _start(
    info: ClusterInfo, old: ProcessRecord, cache_dir: Path, kafka_heap_mb: int, zookeeper_heap_mb: int
) -> tuple[ClusterInfo, ProcessRecord]:
    """Start ``old`` again as the launcher did and record the new pid in the cluster file."""
    name = old.name
    if old.port is None:
        raise RuntimeLaunchError(f"the cluster file records no port for {name}; cannot restart it in place")
    data_dir = Path(info.data_dir)
    match = _INDEXED.match(name)
    if name == "zookeeper":
        record = zookeeper.start(data_dir / "zookeeper", old.port, cache_dir, zookeeper_heap_mb)
    elif match and match.group(1) == "kafka":
        node = kafka.BrokerPorts(int(match.group(2)), old.port, _controller_port(data_dir / name))
        record = kafka.start(data_dir / name, node, cache_dir, kafka_heap_mb)
    elif match and match.group(1) == "node":
        target = local_target(
            str(data_dir),
            str(data_dir / CLUSTER_FILE_NAME),
            info.zk_connect,
            info.bootstrap_servers,
            info.topic_prefix,
            str(info.extra.get("zk_root", "/shoal")),
        )
        target = replace(target, extra_env=secure.node_env(info))
        record = storage_nodes.start(node_spec(int(match.group(2)), target, old.port, old.metrics_port))
    else:
        raise RuntimeLaunchError(f"cannot restart {name!r}: not zookeeper, kafka-N or node-N")
    new_info = replace(info, processes=tuple(record if p.name == name else p for p in info.processes))
    cluster_file.write(data_dir / CLUSTER_FILE_NAME, new_info)
    log.info("restarted %s: pid %d -> %d", name, old.pid, record.pid)
    return new_info, record


def _controller_port(directory: Path) -> int:
    """The controller port the launcher wrote into this broker's server.properties."""
    config = directory / "server.properties"
    try:
        text = config.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise RuntimeLaunchError(f"no {config}: this broker was never started by `shoal up`") from exc
    found = re.search(r"CONTROLLER://[^:,\s]+:(\d+)", text)
    if not found:
        raise RuntimeLaunchError(f"{config} names no CONTROLLER listener")
    return int(found.group(1))


def _wait_serving(info: ClusterInfo, record: ProcessRecord, timeout_s: float) -> None:
    assert record.port is not None
    deadline = time.monotonic() + timeout_s
    if record.name == "zookeeper":
        if not zookeeper.wait_ready(record.port, timeout_s):
            raise RuntimeLaunchError(f"ZooKeeper did not become ready after restart:\n{tail(record.log_path)}")
        return
    if record.name.startswith("node-"):
        storage_nodes.wait_registered(
            [record],
            info.zk_connect,
            str(info.extra.get("zk_root", "/shoal")),
            timeout_s,
            security=secure.zk_security(secure.connection_of(info)),
        )
        return
    own = f"127.0.0.1:{record.port}"  # ask this broker itself: the others may still list it while fenced
    while time.monotonic() < deadline:
        if not is_running(record):
            raise RuntimeLaunchError(f"{record.name} exited during restart:\n{tail(record.log_path)}")
        if (
            kafka.broker_count(replace(secure.connection_of(info).kafka, bootstrap_servers=own), timeout_s=3.0)
            >= info.brokers
        ):
            return
        time.sleep(0.5)
    raise RuntimeLaunchError(f"{record.name} did not serve within {timeout_s:.0f}s:\n{tail(record.log_path)}")
