"""Restart one process of a local cluster (``shoal up``) in place: same config, data dir, ports.

For fault tests and operators: after a broker, ZooKeeper or a storage node was killed (or crashed),
:func:`restart_process` starts it again exactly as :func:`shoal_app.runtime.launcher.up` did (the
``server.properties`` / ``zoo.cfg`` / node spec it wrote, the same data directory and ports), waits
until it serves, and records the new pid in the cluster file so ``shoal status`` and ``shoal down``
see it. Refused (RuntimeLaunchError, nothing changed) while the process still runs. The fault tests
use it (e.g. "restart the Kafka broker under writes").
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import replace
from pathlib import Path

from shoal import cluster_file
from shoal.cluster_file import ClusterInfo, ProcessRecord
from shoal.errors import RuntimeLaunchError
from shoal_app.runtime import kafka, storage_nodes, zookeeper
from shoal_app.runtime.launcher import CLUSTER_FILE_NAME
from shoal_app.runtime.node_spec import local_target, node_spec
from shoal_app.runtime.process import is_running, tail

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
    old = info.process(name)
    if old is None:
        known = ", ".join(p.name for p in info.processes) or "none"
        raise RuntimeLaunchError(f"no process named {name!r} in the cluster file (known: {known})")
    if is_running(old):
        raise RuntimeLaunchError(f"{name} (pid {old.pid}) is still running; stop or kill it before restarting")
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
        record = storage_nodes.start(node_spec(int(match.group(2)), target, old.port, old.metrics_port))
    else:
        raise RuntimeLaunchError(f"cannot restart {name!r}: not zookeeper, kafka-N or node-N")
    new_info = replace(info, processes=tuple(record if p.name == name else p for p in info.processes))
    cluster_file.write(data_dir / CLUSTER_FILE_NAME, new_info)
    log.info("restarted %s: pid %d -> %d", name, old.pid, record.pid)
    _wait_serving(new_info, record, timeout_s)
    return new_info


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
        storage_nodes.wait_registered([record], info.zk_connect, str(info.extra.get("zk_root", "/shoal")), timeout_s)
        return
    own = f"127.0.0.1:{record.port}"  # ask this broker itself: the others may still list it while fenced
    while time.monotonic() < deadline:
        if not is_running(record):
            raise RuntimeLaunchError(f"{record.name} exited during restart:\n{tail(record.log_path)}")
        if kafka.broker_count(own, timeout_s=3.0) >= info.brokers:
            return
        time.sleep(0.5)
    raise RuntimeLaunchError(f"{record.name} did not serve within {timeout_s:.0f}s:\n{tail(record.log_path)}")
