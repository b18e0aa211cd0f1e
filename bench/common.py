"""Shared parts of the benchmarks: the argparse CLI, timing, the results table / JSON, a throwaway cluster.

Benchmarks are not tests: they measure, print, and never assert on speed. A benchmark that needs
Kafka and ZooKeeper either uses the ones named by ``--bootstrap-servers``/``--zk`` or starts a
throwaway local cluster (``shoal_app.runtime.launcher``) in a temporary directory and stops it at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any


def parser(description: str, *, cluster: bool) -> argparse.ArgumentParser:
    """An argument parser with --output (and, for cluster benchmarks, the connection options)."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--output", "-o", choices=("table", "json"), default="table", help="for people or for scripts")
    if cluster:
        p.add_argument(
            "--bootstrap-servers", default=None, help="Kafka to use (default: start a throwaway local cluster)"
        )
        p.add_argument("--zk", default=None, help="ZooKeeper connect string (needed with --bootstrap-servers)")
    return p


def positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from exc
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def int_list(text: str) -> list[int]:
    """``1000,10000,1e5`` -> [1000, 10000, 100000]."""
    try:
        values = [int(float(part)) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from exc
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r} must list positive integers")
    return values


@contextlib.contextmanager
def timer() -> Iterator[Callable[[], float]]:
    """``with timer() as elapsed: ...``; ``elapsed()`` is the seconds so far (frozen at exit)."""
    start = time.perf_counter()
    end: list[float] = []
    yield lambda: (end[0] if end else time.perf_counter()) - start
    end.append(time.perf_counter())


@contextlib.contextmanager
def profiled(path: str | None) -> Iterator[None]:
    """``with profiled(path): ...`` writes a cProfile of the block to ``path`` (pstats format); None = no profile."""
    if path is None:
        yield
        return
    import cProfile

    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        profile.dump_stats(path)


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    """The median wall time of ``repeat`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def wait_for(pred: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.01) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"benchmark: {what} did not happen within {timeout_s:.0f}s")
        time.sleep(poll_s)


def cache_dir() -> Path:
    """The jar cache (``SHOAL_CACHE_DIR`` or ``~/.cache/shoal``)."""
    from shoal.jvm import jars

    return jars.cache_dir_from(os.environ)


def ready_leaders(node: Any) -> list[Any]:
    """The partition leaders of an in-process StorageNode that finished recovery."""
    return [h.leader for h in node.partitions().values() if h.leader is not None and h.leader.ready.is_set()]


@contextlib.contextmanager
def leading_node(
    ep: Endpoints,
    meta: Any,
    table: Any,
    data_dir: Path,
    *,
    flush: Any,
    split_points: Sequence[bytes] = (),
    server_id: str = "bench-1",
) -> Iterator[Any]:
    """Create ``table`` on one in-process storage node, wait until it leads every partition, stop it at the end."""
    import threading

    from metadata.client import MetadataClient
    from shoal.kafka.settings import ConnectionSettings
    from storage_node.config import NodeConfig
    from storage_node.node import StorageNode

    with MetadataClient(meta) as client:
        client.coordinator.create_table(table, [server_id], list(split_points))
    connection = ConnectionSettings.plain(
        ep.bootstrap_servers, ep.zk_connect, topic_prefix=meta.topic_prefix, zk_root=meta.zk_root
    )
    config = NodeConfig(server_id, data_dir, connection, flush=flush, table_poll_s=0.2)
    node = StorageNode(config, metadata=meta)
    thread = threading.Thread(target=node.run, daemon=True, name="bench-node")
    thread.start()
    try:
        wait_for(node.ready.is_set, 60, "node start")
        wait_for(lambda: len(ready_leaders(node)) == len(split_points) + 1, 120, "leaders ready", 0.1)
        yield node
    finally:
        node.stop()
        thread.join(60)


@dataclass(frozen=True)
class Endpoints:
    bootstrap_servers: str
    zk_connect: str
    started_here: bool


@contextlib.contextmanager
def cluster(args: argparse.Namespace, progress: Callable[[str], None]) -> Iterator[Endpoints]:
    """The cluster named by the options, or a throwaway local one (1 broker) stopped and deleted at the end."""
    if args.bootstrap_servers:
        if not args.zk:
            raise SystemExit("--bootstrap-servers needs --zk as well")
        yield Endpoints(args.bootstrap_servers, args.zk, False)
        return
    from shoal_app.runtime import launcher

    data_dir = Path(tempfile.mkdtemp(prefix="shoal-bench-"))
    cache = cache_dir()
    config = launcher.LocalClusterConfig(data_dir=data_dir, cache_dir=cache, fresh=True)
    progress(f"starting a throwaway local cluster in {data_dir}")
    try:
        info = launcher.up(config)
        try:
            yield Endpoints(info.bootstrap_servers, info.zk_connect, True)
        finally:
            progress("stopping the throwaway cluster")
            launcher.down(config.cluster_file)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


@dataclass(frozen=True)
class NodeCluster:
    """A throwaway cluster with storage node processes (:func:`node_cluster`)."""

    bootstrap_servers: str
    zk_connect: str
    topic_prefix: str
    zk_root: str
    nodes: tuple[Any, ...] = ()
    """The storage nodes' :class:`~shoal.cluster_file.ProcessRecord` (server id as ``name``, ``pid``)."""
    data_dir: Path | None = None
    """Where the cluster keeps its data and logs (deleted when the cluster stops)."""

    def metadata_config(self) -> Any:
        from metadata.client import MetadataConfig

        return MetadataConfig(
            zk_hosts=self.zk_connect,
            bootstrap_servers=self.bootstrap_servers,
            topic_prefix=self.topic_prefix,
            zk_root=self.zk_root,
        )

    def connection(self) -> Any:
        from shoal.kafka.settings import ConnectionSettings

        return ConnectionSettings.plain(
            self.bootstrap_servers, self.zk_connect, topic_prefix=self.topic_prefix, zk_root=self.zk_root
        )


@contextlib.contextmanager
def node_cluster(
    say: Callable[[str], None],
    *,
    brokers: int,
    nodes: int,
    kafka_heap_mb: int,
    flush_age: float | None = None,
    prefix: str = "shoal-bench-",
    node_args: Sequence[str] = (),
    kafka_request_log: bool = False,
) -> Iterator[NodeCluster]:
    """ZooKeeper + ``brokers`` brokers + ``nodes`` storage node processes (node-1, node-2, ...; memtable
    flush age ``flush_age`` s, None = the node's default; ``node_args`` appended to each ``shoal node``
    command line; ``kafka_request_log``: the brokers log every request, :mod:`bench.broker_requests`),
    every process stopped by pid at the end
    (nodes, brokers, ZooKeeper: ``launcher.down`` on the cluster file), the data deleted."""
    from shoal import cluster_file
    from shoal_app.runtime import launcher, storage_nodes
    from shoal_app.runtime.node_spec import local_target, node_spec
    from shoal_app.runtime.ports import free_ports

    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    config = launcher.LocalClusterConfig(
        data_dir=data_dir,
        cache_dir=cache_dir(),
        brokers=brokers,
        nodes=0,
        kafka_heap_mb=kafka_heap_mb,
        start_timeout_s=180,
        fresh=True,
        kafka_request_log=kafka_request_log,
    )
    say(f"starting ZooKeeper and {brokers} broker(s) in {data_dir}")
    try:
        info = launcher.up(config)
        try:
            target = local_target(
                str(data_dir),
                str(config.cluster_file.resolve()),
                info.zk_connect,
                info.bootstrap_servers,
                config.topic_prefix,
                config.zk_root,
            )
            ports = free_ports(nodes)
            records = []
            for i in range(1, nodes + 1):
                spec = node_spec(i, target, ports[i - 1], metrics_port=None)
                if flush_age is not None:
                    spec = replace(spec, argv=(*spec.argv, "--flush-age", str(flush_age)))
                spec = replace(spec, argv=(*spec.argv, *node_args))
                say(f"starting storage node {spec.server_id}" + (f" (flush age {flush_age}s)" if flush_age else ""))
                records.append(storage_nodes.start(spec))
                # in the cluster file at once, so launcher.down stops it even if a later start fails
                info = replace(info, processes=(*info.processes, records[-1]))
                cluster_file.write(config.cluster_file, info)
            storage_nodes.wait_registered(records, info.zk_connect, config.zk_root, 180)
            yield NodeCluster(
                info.bootstrap_servers,
                info.zk_connect,
                config.topic_prefix,
                config.zk_root,
                tuple(records),
                data_dir,
            )
        finally:
            say("stopping the cluster (every process by pid)")
            launcher.down(config.cluster_file, timeout_s=15)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def stop_seconds(record: Any, timeout_s: float) -> float | None:
    """SIGTERM the process group of ``record`` (as ``shoal stop`` and the launcher do) and return the
    seconds until its process exited; None if it still runs after ``timeout_s`` (the cluster's own
    cleanup kills it then)."""
    import signal

    import psutil

    from shoal_app.runtime.process import is_running

    proc = psutil.Process(record.pid)
    start = time.perf_counter()
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except psutil.TimeoutExpired:
        return None if is_running(record) else time.perf_counter() - start
    return time.perf_counter() - start


def table_definition(name: str, replication_factor: int) -> Any:
    """The benchmarks' table: ``k`` uint64 (primary and partition key), ``v`` string, ``n`` int64."""
    from metadata.table import Column, ColumnType, TableDefinition

    cols = (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING), Column("n", ColumnType.INT64))
    return TableDefinition(name, cols, ("k",), "k", replication_factor)


def create_table(c: NodeCluster, definition: Any, servers: Sequence[str], partitions: int) -> None:
    """Create ``definition`` on ``servers`` in ``partitions`` partitions of equal uint64 key ranges."""
    from metadata.client import MetadataClient
    from metadata.keyspace import Keyspace

    splits = [Keyspace.UINT64.encode((2**64 // partitions) * i) for i in range(1, partitions)]
    with MetadataClient(c.metadata_config()) as client:
        client.coordinator.create_table(definition, list(servers), splits)


def unwind_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C, so every ``finally`` stops the processes its block started."""
    import signal

    def _terminate(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _terminate)


def raw_producer_config(bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    """The raw baseline's producer: plain confluent-kafka, acks=all + idempotence, the same linger,
    batch size and message bound as shoal's producer (``--linger-ms``, ``--batch-bytes``,
    ``--max-message-bytes``), no Kafka compression."""
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": args.linger_ms,
        "compression.type": "none",
        "batch.size": args.batch_bytes,
        "message.max.bytes": max(args.max_message_bytes + 64 * 1024, 1_000_000),
    }


def raw_consumer(bootstrap: str, topic: str, partitions: int) -> Any:
    """A raw baseline consumer of every partition of ``topic`` from the beginning, connected."""
    import uuid

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-raw-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
        }
    )
    consumer.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(partitions)])
    consumer.poll(0.5)  # connected before the clock starts
    return consumer


def progress_printer(output: str) -> Callable[[str], None]:
    def say(message: str) -> None:
        print(f"  .. {message}", file=sys.stderr, flush=True)

    return say if output == "table" else (lambda _m: None)


def report(
    title: str,
    columns: Sequence[str],
    rows: Sequence[dict[str, Any]],
    settings: dict[str, Any],
    output: str,
    notes: Sequence[str] = (),
    *,
    ratio: float | None = None,
    ratio_meaning: str = "",
    extra: dict[str, Any] | None = None,
) -> None:
    """Print the results: an aligned table with the settings under it, or one JSON document.

    ``ratio`` is the benchmark's one number against its baseline (top-level ``ratio`` in JSON, with
    ``ratio_meaning`` saying which way it points); ``extra`` adds top-level JSON fields."""
    if output == "json":
        print(
            json.dumps(json_document(title, settings, rows, notes, ratio, ratio_meaning, extra), indent=2, default=str)
        )
        return
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print(title)
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))
    print("settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    for note in notes:
        print(note)
    if ratio is not None or ratio_meaning:
        print(f"ratio: {_fmt(ratio)}" + (f" ({ratio_meaning})" if ratio_meaning else ""))


def json_document(
    title: str,
    settings: dict[str, Any],
    rows: Sequence[dict[str, Any]],
    notes: Sequence[str] = (),
    ratio: float | None = None,
    ratio_meaning: str = "",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON shape every benchmark prints with ``--output json``: a top-level ``ratio`` and the details."""
    return {
        "benchmark": title,
        "ratio": ratio,
        "ratio_meaning": ratio_meaning,
        "settings": settings,
        "results": list(rows),
        "notes": list(notes),
        **(extra or {}),
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def random_strings(n: int, value_bytes: int, seed: int) -> Any:
    """``n`` random lowercase strings of ``value_bytes`` bytes each, as one Arrow string array."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    data = alphabet[rng.integers(0, len(alphabet), size=n * value_bytes)].tobytes()
    offsets = pa.array(np.arange(0, (n + 1) * value_bytes, value_bytes, dtype=np.int32), pa.int32())
    return pa.StringArray.from_buffers(n, offsets.buffers()[1], pa.py_buffer(data))
