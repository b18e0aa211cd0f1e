"""Helpers for the Spark integration tests: a table on running storage nodes, scans, options."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from metadata.client import MetadataClient, MetadataConfig
from metadata.election import read_epoch
from metadata.metadata_file import MetadataFile
from metadata.node_registry import lookup_node
from metadata.table import Column, ColumnType, TableDefinition
from shoal.scan import ScanRequest, scan_remote
from shoal_app.testing.wait import wait_until
from storage_node.config import FlushPolicy, NodeConfig
from storage_node.node import StorageNode


def events_table(name: str = "events") -> TableDefinition:
    return TableDefinition(
        name,
        (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING), Column("n", ColumnType.INT64)),
        ("k",),
        "k",
        1,
    )


@dataclass
class SparkCluster:
    """A table on ``nodes`` running storage nodes (threads), with what a Spark job needs to reach it."""

    meta: MetadataConfig
    table: TableDefinition
    file: MetadataFile
    nodes: dict[str, StorageNode]

    @property
    def options(self) -> dict[str, str]:
        return {
            "table": self.table.name,
            "zk": self.meta.zk_hosts,
            "bootstrapServers": self.meta.bootstrap_servers,
            "topicPrefix": self.meta.topic_prefix,
        }

    @property
    def env(self) -> dict[str, str]:
        return {
            "SHOAL_ZK_CONNECT": self.meta.zk_hosts,
            "SHOAL_BOOTSTRAP_SERVERS": self.meta.bootstrap_servers,
            "SHOAL_TOPIC_PREFIX": self.meta.topic_prefix,
        }

    def scan(self) -> pa.Table:
        """What `shoal scan` returns: every partition from its leader, sorted by key."""
        with MetadataClient(self.meta) as client:
            parts = []
            for entry in self.file.partitions:
                leader = read_epoch(client.zk, client.layout, entry.partition_id).server_id
                assert leader is not None
                location = lookup_node(client.zk, client.layout, leader)
                parts.append(scan_remote(location, ScanRequest(self.table.name, entry.partition_id)))
        return pa.concat_tables(parts).sort_by("k")

    def rows(self) -> dict[int, Any]:
        t = self.scan()
        return {r["k"]: (r["v"], r["n"]) for r in t.to_pylist()}


def start_node(meta: MetadataConfig, server_id: str, data_dir: Path, flush: FlushPolicy) -> StorageNode:
    config = NodeConfig(server_id, data_dir / server_id, meta.connection, flush=flush, table_poll_s=0.2)
    node = StorageNode(config, metadata=meta)
    thread = threading.Thread(target=node.run, daemon=True, name=f"node-{server_id}")
    thread.start()
    node._test_thread = thread  # type: ignore[attr-defined]
    assert node.ready.wait(60)
    return node


@contextlib.contextmanager
def spark_cluster(
    bootstrap: str,
    zk_hosts: str,
    prefix: str,
    data_dir: Path,
    *,
    nodes: Sequence[str] = ("node-1",),
    splits: Sequence[int] = (1000,),
    flush: FlushPolicy | None = None,
    start: bool = True,
    table: TableDefinition | None = None,
) -> Iterator[SparkCluster]:
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bootstrap, topic_prefix=prefix)
    definition = table or events_table()
    flush = flush or FlushPolicy(max_rows=100_000, max_age_s=1.0)
    with MetadataClient(meta) as client:
        file = client.coordinator.create_table(definition, list(nodes), [s.to_bytes(8, "big") for s in splits])
    sc = SparkCluster(meta, definition, file, {})
    try:
        if start:
            for server in nodes:
                sc.nodes[server] = start_node(meta, server, data_dir, flush)
            wait_for_leaders(sc)
        yield sc
    finally:
        for node in sc.nodes.values():
            node.stop()
        for node in sc.nodes.values():
            node._test_thread.join(30)  # type: ignore[attr-defined]


def wait_for_leaders(sc: SparkCluster) -> None:
    def leading() -> bool:
        held = [h for n in sc.nodes.values() for h in n.partitions().values()]
        return sum(1 for h in held if h.leader is not None and h.leader.ready.is_set()) >= len(sc.file.partitions)

    assert wait_until(leading, 90)
