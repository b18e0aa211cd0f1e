"""Helpers for the storage node integration tests: tables, ingest messages, waiting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, Producer, TopicPartition

from metadata.client import MetadataConfig
from metadata.table import Column, ColumnType, TableDefinition
from shoal.ids import new_partition_id
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames
from shoal.wire.arrow_ipc import encode_batch
from shoal.wire.ingest import TABLE_HEADER, ingest_schema
from storage_node.config import FlushPolicy, LeaderConfig, NodeConfig
from storage_node.node import StorageNode
from storage_node.replica import PartitionReplica
from storage_node.roles.leader import PartitionLeader


def make_table(name: str = "events", replication_factor: int = 1) -> TableDefinition:
    return TableDefinition(
        name, (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", replication_factor
    )


def rows(table: TableDefinition, keys: Sequence[int], values: Sequence[str | None], deleted: bool = False) -> pa.Table:
    schema = ingest_schema(table.arrow_schema())
    return pa.table(
        {"k": pa.array(keys, pa.uint64()), "v": pa.array(values, pa.string()), "_shoal_deleted": [deleted] * len(keys)},
        schema=schema,
    )


def produce(bootstrap: str, topic: str, payloads: Sequence[bytes | None], table: str = "events") -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "message.max.bytes": 16 * 1024 * 1024,
        }
    )
    for value in payloads:
        p.produce(topic, value, partition=0, headers=[(TABLE_HEADER, table.encode())])
    assert p.flush(30) == 0


def produce_rows(bootstrap: str, topic: str, *tables: pa.Table) -> None:
    produce(bootstrap, topic, [encode_batch(t) for t in tables])


def read_all(bootstrap: str, topic: str, timeout: float = 10.0) -> list[Any]:
    """Every committed message of partition 0 of ``topic`` (up to its end now)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "it-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        c.assign([TopicPartition(topic, 0, low)])
        out = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                pos = c.position([TopicPartition(topic, 0)])[0].offset
                if pos >= high:
                    break
                continue
            if m.error() is None:
                out.append(m)
            offset = m.offset()
            if offset is not None and offset + 1 >= high:
                break
        return out
    finally:
        c.close()


def committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return int(c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)
    finally:
        c.close()


class LeaderFixture:
    """Builds (replica, leader) pairs for one partition, as a node would."""

    def __init__(self, bootstrap: str, prefix: str, data_dir: Path, **flush: Any) -> None:
        self.bootstrap = bootstrap
        self.topics = TopicNames(prefix)
        self.table = make_table()
        self.partition_id = new_partition_id()
        self.data_dir = data_dir
        self.flush = FlushPolicy(**flush) if flush else FlushPolicy(max_age_s=3600)

    @property
    def ingest(self) -> str:
        return self.topics.ingest(self.partition_id)

    def wal(self, placement_id: int = 1) -> str:
        return self.topics.wal(self.partition_id, placement_id)

    def start(
        self, epoch: int | Callable[[], int] = 1, placement_id: int = 1, data_dir: Path | None = None, **cfg: Any
    ) -> PartitionLeader:
        replica = PartitionReplica(self.table, self.partition_id, placement_id, data_dir or self.data_dir)
        config = LeaderConfig(KafkaSettings(self.bootstrap), self.topics, self.flush, **cfg)
        fn = epoch if callable(epoch) else (lambda: epoch)
        leader = PartitionLeader(replica, config, fn).start()
        leader.wait_ready(60)
        return leader


class NodeProcesses:
    """Storage nodes as separate processes (``shoal -v node``), for replication and fault tests.

    Each node logs to ``<base>/<id>.log``; ``kill``/``stop``/``pause``/``resume`` act by pid only.
    """

    def __init__(
        self, base: Path, zk_hosts: str, bootstrap: str, prefix: str, *, flush_rows: int = 20, flush_age: float = 1.0
    ) -> None:
        self.base = base
        self.env = {
            **os.environ,
            "SHOAL_ZK_CONNECT": zk_hosts,
            "SHOAL_BOOTSTRAP_SERVERS": bootstrap,
            "SHOAL_TOPIC_PREFIX": prefix,
            "PYTHONPATH": os.getcwd(),
        }
        self.flush_rows, self.flush_age = flush_rows, flush_age
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def data_dir(self, server_id: str) -> Path:
        return self.base / server_id

    def start(self, server_id: str, *extra: str) -> None:
        """Start ``shoal -v node --id server_id`` (``extra``: more ``shoal node`` options)."""
        code = "from shoal_app.cli.main import main; main()"
        data = str(self.data_dir(server_id))
        args = [
            sys.executable,
            "-c",
            code,
            "-v",
            "node",
            "--id",
            server_id,
            "--data-dir",
            data,
            "--flush-rows",
            str(self.flush_rows),
            "--flush-age",
            str(self.flush_age),
            *extra,
        ]
        log = open(self.base / f"{server_id}.log", "ab")  # noqa: SIM115 (closed with the process)
        self.procs[server_id] = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def kill(self, server_id: str) -> None:
        proc = self.procs.pop(server_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def stop(self, server_id: str) -> None:
        proc = self.procs.pop(server_id)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)

    def signal(self, server_id: str, sig: int) -> None:
        self.procs[server_id].send_signal(sig)

    def close(self) -> None:
        for server_id in list(self.procs):
            proc = self.procs[server_id]
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
            self.kill(server_id)

    def __enter__(self) -> NodeProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_node(meta: MetadataConfig, server_id: str, base: Path, **config: Any) -> StorageNode:
    """A storage node on a thread of this process (flush every 20 rows or 1 s unless ``config`` says
    otherwise: more :class:`NodeConfig` fields), ready; stop it with :func:`stop_node`."""
    settings: dict[str, Any] = {"flush": FlushPolicy(max_rows=20, max_age_s=1.0), "table_poll_s": 0.2, **config}
    node = StorageNode(NodeConfig(server_id, base / server_id, meta.connection, **settings), metadata=meta)
    thread = threading.Thread(target=node.run, daemon=True, name=f"node-{server_id}")
    thread.start()
    node._test_thread = thread  # type: ignore[attr-defined]
    assert node.ready.wait(60)
    return node


def stop_node(node: StorageNode) -> None:
    node.stop()
    node._test_thread.join(60)  # type: ignore[attr-defined]


@contextmanager
def in_process_nodes(
    meta: MetadataConfig, base: Path, ids: Sequence[str], **config: Any
) -> Iterator[dict[str, StorageNode]]:
    """Storage nodes on threads of this process (:func:`run_node`), stopped on exit (also those the
    test added to or removed from the dict it yields)."""
    nodes: dict[str, StorageNode] = {}
    started: list[StorageNode] = []
    try:
        for n in ids:
            nodes[n] = run_node(meta, n, base, **config)
            started.append(nodes[n])
        yield nodes
    finally:
        every = {id(x): x for x in [*started, *nodes.values()]}.values()
        for node in every:
            node.stop()
        for node in every:
            node._test_thread.join(60)  # type: ignore[attr-defined]
