"""The write path (DESIGN.md section 4).

100k rows with unique values through the producer into a node-led table; every one readable; sync waits.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from producer_it_support import events_table

from metadata.client import MetadataClient, MetadataConfig
from metadata.keyspace import Keyspace
from metadata.node_registry import lookup_node
from producer import Producer, ProducerConfig
from shoal.kafka.settings import ConnectionSettings
from shoal.scan import ScanRequest, scan_remote
from shoal.topics import TopicNames
from shoal_app.testing.wait import wait_until
from storage_node.config import FlushPolicy, NodeConfig
from storage_node.node import StorageNode

pytestmark = pytest.mark.integration

ROWS = 100_000
STEP = (2**64 - 1) // ROWS  # keys spread over the whole key space, so both partitions get about half


def _committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return int(c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)
    finally:
        c.close()


def _leading(node: StorageNode) -> int:
    return sum(1 for h in node.partitions().values() if h.leader is not None and h.leader.ready.is_set())


def _segments(node: StorageNode) -> int:
    return sum(h.leader.stats.segments for h in node.partitions().values() if h.leader is not None)


def test_100k_unique_rows_are_all_readable_and_sync_waits(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    topics = TopicNames(topic_prefix)
    with MetadataClient(meta) as client:
        file = client.coordinator.create_table(events_table(), ["node-1"], [Keyspace.UINT64.encode(2**63)])
        partition_ids = [p.partition_id for p in file.partitions]
        # Segments are written during the run (40k rows each), so reads combine segments and the memtable.
        connection = ConnectionSettings.plain(bs, zk_hosts, topic_prefix=topic_prefix)
        config = NodeConfig("node-1", tmp_path / "n1", connection, flush=FlushPolicy(max_rows=40_000), table_poll_s=0.2)
        node = StorageNode(config, metadata=meta)
        thread = threading.Thread(target=node.run, daemon=True, name="node-1")
        thread.start()
        try:
            assert node.ready.wait(60)
            assert wait_until(lambda: _leading(node) == 2, 90), node.partitions()

            keys = pa.array([i * STEP for i in range(ROWS)], pa.uint64())
            values = pa.array([f"value-{i:06d}" for i in range(ROWS)], pa.string())
            rows = pa.table({"k": keys, "v": values, "n": pa.array(range(ROWS), pa.int64())})
            with Producer(
                ProducerConfig(ConnectionSettings.plain(bs, zk_hosts, topic_prefix=topic_prefix))
            ) as producer:
                result = producer.write("events", rows)
                assert sum(r.rows for r in result.wait(120)) == ROWS
                producer.sync(timeout=120)
                # sync() returned: the leaders have committed every ingest offset produced so far, right now.
                written = producer.written()
                assert sorted(pid for pid, _ in written.values()) == sorted(partition_ids)
                for topic, (pid, last) in written.items():
                    assert _committed(bs, topics.leader_group(pid), topic) == last + 1, topic

            # a leader flushes right after the transaction that filled its memtable, which may be the
            # last one sync() waited for: the read waits for that segment, so it combines both
            assert wait_until(lambda: _segments(node) >= 1, 30), node.partitions()
            location = lookup_node(client.zk, client.layout, "node-1")
            got = scan_remote(location, ScanRequest("events")).sort_by("k")
            assert got.num_rows == ROWS
            assert got.column("k").to_pylist() == keys.to_pylist()
            assert got.column("v").to_pylist() == values.to_pylist()
            assert got.column("n").to_pylist() == list(range(ROWS))
        finally:
            node.stop()
            thread.join(60)
        assert not thread.is_alive()
