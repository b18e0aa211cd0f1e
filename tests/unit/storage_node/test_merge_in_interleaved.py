"""The leader's receiver of pushed segments with two peers' chunk streams interleaved (DESIGN.md section 7)."""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

import pyarrow as pa

from metadata.table import Column, ColumnType, TableDefinition
from shoal.ids import new_partition_id
from shoal.kafka.settings import KafkaSettings
from shoal.segments import SegmentRecord
from shoal.segments.channel import KIND_CHUNK, KIND_HEADER, KIND_MANIFEST, to_wire
from shoal.segments.parquet_io import segment_path
from shoal.topics import TopicNames
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import Gtid, SegmentChunk
from storage_node.replica import PartitionReplica, versioned_rows
from storage_node.replication.merge_in import MergeJob, PeerSegmentReceiver, drain_merges

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 3
)
TOPICS = TopicNames("t")
CHUNK = 512


class FakeMessage:
    def __init__(self, topic: str, offset: int, kind: bytes, value: bytes) -> None:
        self._topic, self._offset, self._kind, self._value = topic, offset, kind, value

    def topic(self) -> str:
        return self._topic

    def offset(self) -> int:
        return self._offset

    def headers(self) -> list[tuple[str, bytes]]:
        return [(KIND_HEADER, self._kind)]

    def value(self) -> bytes:
        return self._value

    def error(self) -> None:
        return None


class FakeConsumer:
    """Hands out the queued messages in order; records commits."""

    def __init__(self, messages: list[FakeMessage]) -> None:
        self.messages = list(messages)
        self.commits: list[tuple[str, int]] = []

    def poll(self, _timeout: float) -> FakeMessage | None:
        return self.messages.pop(0) if self.messages else None

    def commit(self, *, offsets: list[Any], asynchronous: bool) -> None:
        self.commits += [(tp.topic, tp.offset) for tp in offsets]


def _segment(tmp: Path, pid: str, placement: int, keys: range, epoch: int) -> tuple[PartitionReplica, SegmentRecord]:
    replica = PartitionReplica(TABLE, pid, placement, tmp / f"p{placement}")
    rows = pa.table(
        {
            "k": pa.array(list(keys), pa.uint64()),
            "v": [f"p{placement}-{k}-" + "x" * 40 for k in keys],
            "_shoal_deleted": [False] * len(keys),
        },
        schema=ingest_schema(TABLE.arrow_schema()),
    )
    replica.append(versioned_rows(rows, Gtid(epoch, 0)), 0)
    record = replica.flush(epoch)
    assert record is not None
    return replica, record


def _messages(replica: PartitionReplica, record: SegmentRecord) -> list[tuple[bytes, bytes]]:
    pid = replica.partition_id
    wire = to_wire(record, table="events", partition_id=pid, topics=TOPICS, latest_major_offset=None, chunk_bytes=CHUNK)
    data = segment_path(replica.directory, record.segment_id).read_bytes()
    out = [(KIND_MANIFEST, wire.to_bytes())]
    for i in range(wire.chunk_count):
        chunk = SegmentChunk(record.segment_id, i, wire.chunk_count, data[i * CHUNK : (i + 1) * CHUNK])
        out.append((KIND_CHUNK, chunk.to_bytes()))
    return out


def test_two_peers_pushing_at_once_are_both_merged_and_acked(tmp_path: Path) -> None:
    pid = new_partition_id()
    leader = PartitionReplica(TABLE, pid, 1, tmp_path / "p1")
    peer2, seg2 = _segment(tmp_path, pid, 2, range(0, 100), epoch=2)
    peer3, seg3 = _segment(tmp_path, pid, 3, range(100, 200), epoch=3)
    a, b = _messages(peer2, seg2), _messages(peer3, seg3)
    assert len(a) > 3 and len(b) > 3
    topic2, topic3 = TOPICS.segments(pid, 2), TOPICS.segments(pid, 3)
    interleaved: list[FakeMessage] = []
    for i in range(max(len(a), len(b))):  # manifest A, manifest B, chunk A0, chunk B0, ...
        if i < len(a):
            interleaved.append(FakeMessage(topic2, i, *a[i]))
        if i < len(b):
            interleaved.append(FakeMessage(topic3, i, *b[i]))

    jobs: queue.Queue[MergeJob] = queue.Queue()

    def submit(job: MergeJob) -> None:  # the leader's thread, run inline
        jobs.put(job)
        drain_merges(jobs, leader, 4)

    receiver = PeerSegmentReceiver(
        leader, KafkaSettings("localhost:1"), topics=TOPICS, peers=lambda: (2, 3), submit=submit
    )
    consumer = FakeConsumer(interleaved)
    receiver._consumer = consumer  # type: ignore[assignment]
    receiver._owners = {topic2: 2, topic3: 3}
    while consumer.messages:
        msg = receiver._poll(0)
        assert msg is not None
        receiver._handle(msg)

    assert receiver.stats.merged == 2 and receiver.stats.invalid == 0
    assert sorted(consumer.commits) == sorted([(topic2, len(a)), (topic3, len(b))])
    assert sorted(leader.scan().column("k").to_pylist()) == list(range(200))


def test_a_chunk_out_of_order_drops_only_that_peers_segment(tmp_path: Path) -> None:
    pid = new_partition_id()
    leader = PartitionReplica(TABLE, pid, 1, tmp_path / "p1")
    peer2, seg2 = _segment(tmp_path, pid, 2, range(0, 100), epoch=2)
    a = _messages(peer2, seg2)
    topic2 = TOPICS.segments(pid, 2)
    broken = [a[0], a[2], a[1], *a[3:]]  # chunk 1 before chunk 0
    consumer = FakeConsumer([FakeMessage(topic2, i, *m) for i, m in enumerate(broken)])
    receiver = PeerSegmentReceiver(
        leader, KafkaSettings("localhost:1"), topics=TOPICS, peers=lambda: (2,), submit=lambda job: None
    )
    receiver._consumer = consumer  # type: ignore[assignment]
    receiver._owners = {topic2: 2}
    while consumer.messages:
        msg = receiver._poll(0)
        assert msg is not None
        receiver._handle(msg)
    assert receiver.stats.invalid == 1 and consumer.commits == []
