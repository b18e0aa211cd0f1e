"""Helpers for the monitor integration tests: a table in real metadata with an elected leader, a
transactional writer on a channel (as the leader writes its WAL), and consumer groups that stand in
for followers (they consume a channel and commit as ``replica_group`` would)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from metadata.client import MetadataClient, MetadataConfig
from metadata.election import LeaderState, PartitionElection
from metadata.metadata_file import Placement
from metadata.table import Column, ColumnType, TableDefinition
from monitor.collector import Collector
from monitor.config import MonitorConfig
from monitor.topology import read_topology
from shoal.kafka import clients
from shoal.kafka.admin import create_topic
from shoal.kafka.settings import KafkaSettings, TopicPolicy
from shoal.topics import TopicNames
from shoal.wire.records import ManifestRecord, SegmentChunk, WalOffsetRange
from shoal_app.schemas import validate


@dataclass
class Env:
    client: MetadataClient
    election: PartitionElection
    topics: TopicNames
    bootstrap: str
    table: str
    pid: str
    leader: Placement
    follower: Placement

    @property
    def wal(self) -> str:
        return self.topics.wal(self.pid, self.leader.placement_id)

    @property
    def segments(self) -> str:
        return self.topics.segments(self.pid, self.leader.placement_id)

    @property
    def ingest(self) -> str:
        return self.topics.ingest(self.pid)

    def close(self) -> None:
        self.election.close()
        self.client.close()


def make_env(bootstrap: str, zk_hosts: str, prefix: str, table: str = "events") -> Env:
    """Table ``table`` (RF 2 on node-1, node-2), node-1's placement elected leader, topics created."""
    client = MetadataClient(MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bootstrap, topic_prefix=prefix))
    definition = TableDefinition(
        table, (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 2
    )
    file = client.coordinator.create_table(definition, ["node-1", "node-2"])
    entry = file.partitions[0]
    leader, follower = entry.servers
    election = PartitionElection.for_file(client.zk, file, entry.partition_id, leader.server_id, leader.placement_id)
    election.start()
    assert election.wait_for(LeaderState.LEADER, timeout=30)
    env = Env(client, election, TopicNames(prefix), bootstrap, table, entry.partition_id, leader, follower)
    a = clients.admin(KafkaSettings(bootstrap))
    for topic in (env.ingest, env.wal, env.segments):
        create_topic(a, topic, policy=TopicPolicy())
    return env


def make_collector(env: Env, history_dir: Path | None = None, **overrides: Any) -> Collector:
    settings: dict[str, Any] = {
        "interval_s": 0.5,
        "window_samples": 6,
        "warn_samples": 3,
        "fetch_timeout_s": 5.0,
        "history_dir": history_dir,
        **overrides,
    }
    config = MonitorConfig(env.bootstrap, topic_prefix=env.topics.prefix, **settings)
    return Collector(config, lambda: read_topology(env.topics, env.client.coordinator, env.table))


class ChannelWriter:
    """Writes records to a channel in Kafka transactions, as a leader writes its WAL."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.last_offset = -1
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-{os.getpid()}-{time.time_ns()}"}
        )
        self.producer.init_transactions(30)

    def _delivered(self, err: Any, msg: Any) -> None:
        assert err is None, err
        self.last_offset = max(self.last_offset, int(msg.offset()))

    def write(self, n: int = 2, value: bytes = b"x" * 100) -> int:
        """``n`` records in one transaction; returns the offset of the last one."""
        self.producer.begin_transaction()
        for _ in range(n):
            self.producer.produce(self.topic, value, on_delivery=self._delivered)
        self.producer.commit_transaction(30)
        self.producer.poll(0)
        return self.last_offset

    def write_raw(self, values: list[bytes]) -> int:
        self.producer.begin_transaction()
        for v in values:
            self.producer.produce(self.topic, v, on_delivery=self._delivered)
        self.producer.commit_transaction(30)
        self.producer.poll(0)
        return self.last_offset

    def close(self) -> None:
        if hasattr(self, "producer"):
            self.producer.flush(10)
            del self.producer  # the last reference: librdkafka's handle is destroyed now, not at exit


class StandInFollower:
    """A consumer group reading a channel with assign() and committing what it read, as a
    follower's ``replica_group`` does."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.topic = topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self.seen = -1

    def catch_up(self, until_offset: int, timeout: float = 30.0) -> int:
        """Consume up to the record at ``until_offset`` and commit past it; returns the committed offset."""
        deadline = time.monotonic() + timeout
        while self.seen < until_offset:
            assert time.monotonic() < deadline, f"follower did not reach {until_offset} (at {self.seen})"
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                continue
            self.seen = max(self.seen, int(msg.offset() or 0))
        return self.commit(self.seen + 1)

    def commit(self, offset: int) -> int:
        self.consumer.commit(offsets=[TopicPartition(self.topic, 0, offset)], asynchronous=False)
        return offset

    def close(self) -> None:
        self.consumer.close()


def manifest(
    pid: str,
    table: str,
    placement: int,
    segment_id: str,
    *,
    major: bool,
    base: str | None,
    covered: tuple[WalOffsetRange, ...] = (),
) -> bytes:
    return ManifestRecord(
        table=table,
        partition_id=pid,
        segment_id=segment_id,
        base_segment_id=base,
        included_segment_ids=(),
        is_major=major,
        placement_id=placement,
        epoch=1,
        checksum="0" * 64,
        size_bytes=3,
        row_count=1,
        chunk_count=1,
        covered_wal_offsets=covered,
        latest_major_offset=None,
        created_at_ms=int(time.time() * 1000),
    ).to_bytes()


def chunk(segment_id: str) -> bytes:
    return SegmentChunk(segment_id, 0, 1, b"abc").to_bytes()


def replica(snap: dict[str, Any], kind: str = "wal", table: int = 0) -> dict[str, Any]:
    """The only replica row of the leader's channel of ``kind`` in a one-partition snapshot."""
    part = snap["tables"][table]["partitions"][0]
    (channel,) = [c for c in part[kind] if c["is_leader_channel"]]
    (row,) = channel["replicas"]
    return dict(row)


def poll_json(col: Collector) -> dict[str, Any]:
    """One poll of ``col`` as the JSON ``/api/snapshot`` serves, checked against its committed schema."""
    snap = col.poll().to_json()
    validate("monitor-snapshot", snap)
    return snap
