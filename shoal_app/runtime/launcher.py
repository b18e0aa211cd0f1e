"""The embedded local cluster: ZooKeeper + a KRaft Kafka cluster + N storage nodes.

``up`` starts everything on 127.0.0.1 with free ports, waits until each part is ready, and
writes the cluster file; ``status`` probes each part; ``down`` stops everything by pid. Storage
nodes are started from :func:`shoal_app.runtime.node_spec.node_spec` (the same spec as the compose
cluster) and are ready once registered in ZooKeeper.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from shoal import cluster_file
from shoal.cluster_file import ClusterInfo, ProcessRecord
from shoal.errors import ConfigError, RuntimeLaunchError
from shoal.jvm import jars
from shoal.security.acls import cluster_plan
from shoal.topics import TopicNames
from shoal_app.runtime import kafka, secure, storage_nodes, zookeeper
from shoal_app.runtime.node_spec import local_target, node_spec
from shoal_app.runtime.ports import free_ports
from shoal_app.runtime.process import find_by_marker, is_running, stop, tail

log = logging.getLogger(__name__)

CLUSTER_FILE_NAME = "cluster.json"


@dataclass(frozen=True)
class LocalClusterConfig:
    data_dir: Path
    cache_dir: Path
    brokers: int = 1
    nodes: int = 0
    topic_prefix: str = "shoal"
    zk_root: str = "/shoal"
    kafka_heap_mb: int = 768
    zookeeper_heap_mb: int = 256
    start_timeout_s: float = 120.0
    fresh: bool = False
    secure: bool = False
    """SASL_SSL (SCRAM-SHA-512) Kafka with ACLs, digest-authenticated ZooKeeper, TLS and
    authenticated scan servers (:mod:`shoal_app.runtime.secure`)."""
    kafka_request_log: bool = False
    """Each broker logs every request it completes (``shoal_app.runtime.kafka.log4j2_properties``):
    for profiling the brokers (``python -m bench.replicated --broker-requests``); slows them."""

    def __post_init__(self) -> None:
        if not 1 <= self.brokers <= 9:
            raise ConfigError(f"brokers must be between 1 and 9, got {self.brokers}")
        if not 0 <= self.nodes <= 16:
            raise ConfigError(f"nodes must be between 0 and 16, got {self.nodes}")
        if self.kafka_heap_mb < 128 or self.zookeeper_heap_mb < 64:
            raise ConfigError("heap sizes are too small (kafka >= 128 MiB, zookeeper >= 64 MiB)")
        if self.start_timeout_s <= 0:
            raise ConfigError("start_timeout_s must be positive")

    @property
    def cluster_file(self) -> Path:
        return self.data_dir / CLUSTER_FILE_NAME


Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def up(config: LocalClusterConfig, progress: Progress = _quiet) -> ClusterInfo:
    """Start the local cluster; return what the cluster file now says."""
    data_dir = config.data_dir.resolve()
    if config.cluster_file.exists():
        previous = cluster_file.read(config.cluster_file)
        if any(is_running(p) for p in previous.processes):
            raise RuntimeLaunchError(
                f"a local cluster is already running from {data_dir} (see `shoal status`; stop it with `shoal down`)"
            )
    if config.fresh and data_dir.exists():
        if not data_dir.is_dir() or (any(data_dir.iterdir()) and not config.cluster_file.exists()):
            # a typo (``--data-dir ~``) must not wipe a directory shoal did not make
            raise RuntimeLaunchError(
                f"--fresh: {data_dir} is not a shoal data dir (no {CLUSTER_FILE_NAME} in it); refusing to delete it"
            )
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)

    progress("fetching jars (cached after the first run)")
    jars.ensure_bundle(jars.zookeeper_bundle(), config.cache_dir)
    jars.ensure_bundle(jars.kafka_bundle(), config.cache_dir)

    cluster_id_file = data_dir / "kafka-cluster-id"
    if cluster_id_file.exists():
        cluster_id = cluster_id_file.read_text().strip()
    else:
        cluster_id = kafka.new_cluster_id()
        cluster_id_file.write_text(cluster_id + "\n")

    ports = free_ports(1 + 2 * config.brokers + 2 * config.nodes)  # ZooKeeper, brokers, node scans + metrics
    zk_port = ports[0]
    nodes = [
        kafka.BrokerPorts(node_id=i + 1, broker_port=ports[1 + 2 * i], controller_port=ports[2 + 2 * i])
        for i in range(config.brokers)
    ]
    bootstrap = ",".join(f"127.0.0.1:{n.broker_port}" for n in nodes)
    sec = secure.prepare(data_dir / "security") if config.secure else None
    if sec is not None:
        progress(f"secured: a local CA, certificates and one SCRAM user per role in {sec.directory}")
    started: list[ProcessRecord] = []
    info = ClusterInfo(
        data_dir=str(data_dir),
        bootstrap_servers=bootstrap,
        zk_connect=f"127.0.0.1:{zk_port}",
        kafka_cluster_id=cluster_id,
        brokers=config.brokers,
        topic_prefix=config.topic_prefix,
        started_at=time.time(),
        extra={"zk_root": config.zk_root, "nodes": config.nodes, **(sec.cluster_extra() if sec else {})},
    )
    connection = secure.connection_of(info)
    zk_security = secure.zk_security(connection)
    try:
        progress(f"starting ZooKeeper on 127.0.0.1:{zk_port}")
        zk = zookeeper.start(data_dir / "zookeeper", zk_port, config.cache_dir, config.zookeeper_heap_mb)
        started.append(zk)
        cluster_file.write(config.cluster_file, replace(info, processes=tuple(started)))

        progress(f"formatting Kafka storage for {config.brokers} broker(s) (cluster id {cluster_id})")
        with ThreadPoolExecutor(max_workers=config.brokers) as pool:
            list(
                pool.map(
                    lambda n: kafka.format_storage(
                        data_dir / f"kafka-{n.node_id}",
                        n,
                        nodes,
                        cluster_id,
                        config.cache_dir,
                        sec.broker_security() if sec else None,
                    ),
                    nodes,
                )
            )
        for n in nodes:
            progress(f"starting Kafka broker {n.node_id} on 127.0.0.1:{n.broker_port}")
            started.append(
                kafka.start(
                    data_dir / f"kafka-{n.node_id}",
                    n,
                    config.cache_dir,
                    config.kafka_heap_mb,
                    request_log=config.kafka_request_log,
                )
            )
            cluster_file.write(config.cluster_file, replace(info, processes=tuple(started)))

        if not zookeeper.wait_ready(zk_port, config.start_timeout_s):
            raise RuntimeLaunchError(f"ZooKeeper did not become ready:\n{tail(zk.log_path)}")
        progress("ZooKeeper is ready")
        if not kafka.wait_ready(connection.kafka, config.brokers, config.start_timeout_s):
            logs = "\n".join(f"--- {p.name}\n{tail(p.log_path)}" for p in started[1:])
            raise RuntimeLaunchError(
                f"Kafka did not report {config.brokers} broker(s), each group coordinator answering, in time:\n{logs}"
            )
        progress(f"Kafka is ready: {config.brokers} broker(s) at {bootstrap}")
        if sec is not None:
            created = secure.apply_acls(connection.kafka, cluster_plan(TopicNames(config.topic_prefix)))
            progress(f"applied {created} ACLs (shoal acl plan shows them)")

        if config.nodes:
            target = local_target(
                str(data_dir),
                str(config.cluster_file.resolve()),
                info.zk_connect,
                bootstrap,
                config.topic_prefix,
                config.zk_root,
            )
            target = replace(target, extra_env=secure.node_env(info))
            node_ports = ports[1 + 2 * config.brokers : 1 + 2 * config.brokers + config.nodes]
            metrics_ports = ports[1 + 2 * config.brokers + config.nodes :]
            records = []
            for i in range(1, config.nodes + 1):
                spec = node_spec(i, target, node_ports[i - 1], metrics_ports[i - 1])
                progress(
                    f"starting storage node {spec.server_id} (scans on {spec.flight_host}:{spec.flight_port}, "
                    f"metrics on :{spec.metrics_port})"
                )
                records.append(storage_nodes.start(spec))
                started.append(records[-1])
            cluster_file.write(config.cluster_file, replace(info, processes=tuple(started)))
            storage_nodes.wait_registered(
                records, info.zk_connect, config.zk_root, config.start_timeout_s, security=zk_security
            )
            progress(f"{config.nodes} storage node(s) registered in ZooKeeper")
    except BaseException:
        for rec in reversed(started):
            stop(rec, timeout_s=10)
        if config.cluster_file.exists():
            cluster_file.write(config.cluster_file, replace(info, processes=()))
        raise
    info = replace(info, processes=tuple(started))
    cluster_file.write(config.cluster_file, info)
    return info


def status(info: ClusterInfo) -> dict[str, Any]:
    """What runs and whether it is healthy, as a JSON-ready dict."""
    procs: list[dict[str, Any]] = []
    for p in info.processes:
        running = is_running(p)
        pid = p.pid
        if not running and p.name.startswith("node-"):  # restarted by hand: same data dir, another pid
            found = find_by_marker(p)
            running, pid = found is not None, found if found is not None else p.pid
        if p.name == "zookeeper":
            healthy = running and p.port is not None and zookeeper.is_healthy(p.port)
        else:
            healthy = running
        entry: dict[str, Any] = {
            "name": p.name,
            "pid": pid,
            "port": p.port,
            "running": running,
            "healthy": healthy,
            "log": p.log_path,
        }
        if p.metrics_port is not None:
            entry["metrics_url"] = f"http://127.0.0.1:{p.metrics_port}/metrics"
        procs.append(entry)
    connection = secure.connection_of(info)
    brokers_seen = kafka.broker_count(connection.kafka, timeout_s=3.0) if procs else 0
    kafka_ok = brokers_seen >= info.brokers
    node_names = [p["name"] for p in procs if p["name"].startswith("node-")]
    nodes_registered = (
        storage_nodes.registered(
            info.zk_connect,
            str(info.extra.get("zk_root", "/shoal")),
            node_names,
            3.0,
            security=secure.zk_security(connection),
        )
        if node_names
        else set()
    )
    for entry in procs:
        if entry["name"].startswith("kafka-"):
            entry["healthy"] = entry["running"] and kafka_ok
        elif entry["name"].startswith("node-"):
            # a registration is a live ZooKeeper session of that node, wherever it was started from
            entry["running"] = entry["running"] or entry["name"] in nodes_registered
            entry["healthy"] = entry["running"] and entry["name"] in nodes_registered
    return {
        "data_dir": info.data_dir,
        "bootstrap_servers": info.bootstrap_servers,
        "zk_connect": info.zk_connect,
        "kafka_cluster_id": info.kafka_cluster_id,
        "brokers_expected": info.brokers,
        "brokers_seen": brokers_seen,
        "nodes_expected": int(info.extra.get("nodes", 0)),
        "nodes_registered": sorted(nodes_registered),
        "processes": procs,
        "running": bool(procs) and all(p["running"] for p in procs),
        "healthy": bool(procs) and all(p["healthy"] for p in procs),
    }


def down(cluster_path: Path, progress: Progress = _quiet, timeout_s: float = 20.0) -> list[str]:
    """Stop every process the cluster file names (storage nodes, brokers, then ZooKeeper), by pid.

    Each tier gets SIGTERM at once and ``timeout_s`` to exit before SIGKILL. The brokers of a tier
    stop together: the KRaft quorum leader that is left without a successor waits for its raft
    client's graceful shutdown, which Kafka bounds at a fixed 5 s (KafkaRaftClientDriver), so a clean
    broker stop takes about 6 s; stopping them one by one would not avoid it (a resigned voter does
    not vote, so the last leader never gets a successor) and would add the others' time.
    """
    info = cluster_file.read(cluster_path)
    stopped: list[str] = []

    def tier(prefix: str) -> list[ProcessRecord]:
        return [p for p in info.processes if p.name.startswith(prefix)]

    for group in (tier("node-"), tier("kafka-"), tier("zookeeper")):
        if not group:
            continue
        progress("stopping " + ", ".join(p.name for p in group))
        with ThreadPoolExecutor(max_workers=len(group)) as pool:
            results = list(pool.map(lambda p: stop(p, timeout_s=timeout_s), group))
        stopped += [p.name for p, was in zip(group, results, strict=True) if was]
    leftover = [p.name for p in info.processes if is_running(p)]
    if leftover:
        raise RuntimeLaunchError(f"still running after shutdown: {', '.join(leftover)}")
    cluster_file.write(cluster_path, replace(info, processes=()))
    return stopped
