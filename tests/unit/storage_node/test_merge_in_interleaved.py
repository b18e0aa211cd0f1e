"""The leader's receiver of pushed segments with two peers' chunk streams interleaved, and a merge
that fails (DESIGN.md section 7)."""

from __future__ import annotations

import queue
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError

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


class _Eof:
    def code(self) -> int:
        return KafkaError._PARTITION_EOF


class FakeMessage:
    def __init__(self, topic: str, offset: int, kind: bytes, value: bytes, *, eof: bool = False) -> None:
        self._topic, self._offset, self._kind, self._value = topic, offset, kind, value
        self._eof = eof

    def topic(self) -> str:
        return self._topic

    def offset(self) -> int:
        return self._offset

    def headers(self) -> list[tuple[str, bytes]]:
        return [(KIND_HEADER, self._kind)]

    def value(self) -> bytes:
        return self._value

    def error(self) -> _Eof | None:
        return _Eof() if self._eof else None


class FakeConsumer:
    """Hands out the queued messages in order; records commits."""

    def __init__(self, messages: list[FakeMessage]) -> None:
        self.messages = list(messages)
        self.commits: list[tuple[str, int]] = []

    def poll(self, _timeout: float) -> FakeMessage | None:
        return self.messages.pop(0) if self.messages else None

    def commit(self, *, offsets: list[Any], asynchronous: bool) -> None:
        self.commits += [(tp.topic, tp.offset) for tp in offsets]


class SeekingConsumer(FakeConsumer):
    """One channel's messages, with ``seek`` (Kafka's position moved back)."""

    def __init__(self, messages: list[FakeMessage]) -> None:
        super().__init__(messages)
        self.all = list(messages)

    def seek(self, tp: Any) -> None:
        self.messages = [m for m in self.all if m.offset() >= tp.offset]


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


def _flushed(peer: PartitionReplica, batches: tuple[tuple[range, int], ...]) -> list[SegmentRecord]:
    """One minor per (keys, epoch) on ``peer``."""
    records = []
    for keys, epoch in batches:
        rows = pa.table(
            {"k": pa.array(list(keys), pa.uint64()), "v": [f"v{k}" for k in keys], "_shoal_deleted": [False] * 10},
            schema=ingest_schema(TABLE.arrow_schema()),
        )
        peer.append(versioned_rows(rows, Gtid(epoch, keys.start)), keys.start)
        record = peer.flush(epoch)
        assert record is not None
        records.append(record)
    return records


def _inline_receiver(leader: PartitionReplica) -> PeerSegmentReceiver:
    """A receiver of placement 2's pushes whose merges run inline, as the leader's thread at epoch 4."""
    jobs: queue.Queue[MergeJob] = queue.Queue()

    def submit(job: MergeJob) -> None:
        jobs.put(job)
        drain_merges(jobs, leader, 4)

    return PeerSegmentReceiver(
        leader, KafkaSettings("localhost:1"), topics=TOPICS, peers=lambda: (2,), submit=submit, retry_pause_s=0
    )


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
    consumer = SeekingConsumer([FakeMessage(topic2, i, *m) for i, m in enumerate(broken)])
    receiver = PeerSegmentReceiver(
        leader,
        KafkaSettings("localhost:1"),
        topics=TOPICS,
        peers=lambda: (2,),
        submit=lambda job: None,
        retry_pause_s=0,
        max_attempts=3,
    )
    receiver._consumer = consumer  # type: ignore[assignment]
    receiver._owners = {topic2: 2}
    for _ in range(100):
        msg = receiver._poll(0)
        if msg is None:
            break
        receiver._handle(msg)
    # read again twice, then the channel's Ack is held at the segment's manifest
    assert receiver.stats.invalid == 3 and receiver.stats.retries == 2
    assert receiver.held == {topic2: 0} and consumer.commits == []
    receiver._ack_past_markers(topic2, len(broken))  # at the channel's end: still not past it
    assert consumer.commits == []


def test_a_failed_merge_is_read_again_and_never_acked_past(tmp_path: Path) -> None:
    """Placement 2 pushes X then Y on its channel; X's merge fails once (a full disk). Going on would
    ack Y's offset, past X, and the Tail would delete X from the pusher's channel."""
    pid = new_partition_id()
    leader = PartitionReplica(TABLE, pid, 1, tmp_path / "p1")
    peer = PartitionReplica(TABLE, pid, 2, tmp_path / "p2")
    records = _flushed(peer, ((range(0, 10), 2), (range(10, 20), 2)))
    topic = TOPICS.segments(pid, 2)
    messages, offset, ends = [], 0, []
    for record in records:
        for kind, value in _messages(peer, record):
            messages.append(FakeMessage(topic, offset, kind, value))
            offset += 1
        ends.append(offset)
        offset += 1  # the transaction's commit marker
    real = leader._list.add_detached
    fail = [1]

    def add_detached(record: SegmentRecord) -> None:
        if fail[0]:
            fail[0] -= 1
            raise sqlite3.OperationalError("database or disk is full")
        real(record)

    leader._list.add_detached = add_detached  # type: ignore[method-assign]
    receiver = _inline_receiver(leader)
    # the channel's end (past Y's commit marker) comes after each pass over the records
    end = FakeMessage(topic, ends[1] + 1, b"", b"", eof=True)
    consumer = SeekingConsumer([*messages, end])
    receiver._consumer = consumer  # type: ignore[assignment]
    receiver._owners = {topic: 2}
    while consumer.messages:
        msg = receiver._poll(0)
        if msg is not None:
            receiver._handle(msg)
    assert receiver.stats.retries == 1 and receiver.stats.merged == 2
    # X acked first, once merged; then Y; then past Y's commit marker, which the pusher waits for
    assert consumer.commits == [(topic, ends[0]), (topic, ends[1]), (topic, ends[1] + 1)]
    assert sorted(leader.scan().column("k").to_pylist()) == list(range(20))


def test_no_ack_past_markers_while_a_segment_is_unacked(tmp_path: Path) -> None:
    """The end of the channel moves the Ack past the markers only when every delivered record is acked."""
    pid = new_partition_id()
    leader = PartitionReplica(TABLE, pid, 1, tmp_path / "p1")
    peer2, seg2 = _segment(tmp_path, pid, 2, range(0, 10), epoch=2)
    topic = TOPICS.segments(pid, 2)
    msgs = [FakeMessage(topic, i, *m) for i, m in enumerate(_messages(peer2, seg2))]
    receiver = PeerSegmentReceiver(
        leader, KafkaSettings("localhost:1"), topics=TOPICS, peers=lambda: (2,), submit=lambda job: None
    )
    receiver._owners = {topic: 2}
    # the manifest only (its chunks not delivered yet), then an end-of-partition event: no Ack
    consumer = FakeConsumer([msgs[0], FakeMessage(topic, 1, b"", b"", eof=True)])
    receiver._consumer = consumer  # type: ignore[assignment]
    while consumer.messages:
        msg = receiver._poll(0)
        if msg is not None:
            receiver._handle(msg)
    assert consumer.commits == []


def test_a_pushed_segment_whose_chunks_stay_broken_holds_the_ack_while_later_ones_merge(tmp_path: Path) -> None:
    """Placement 2 pushes X then Y; a record among X's chunks does not decode, on every read. Y is
    merged, but the Ack on the channel never passes X's manifest, also at the channel's end: the
    pusher counts its push as merged once the Ack reaches the end, then drops its copy, and the Tail
    truncates the channel (the Ack went to Y's end, then past the markers: an audit's proof)."""
    pid = new_partition_id()
    leader = PartitionReplica(TABLE, pid, 1, tmp_path / "p1")
    peer = PartitionReplica(TABLE, pid, 2, tmp_path / "p2")
    records = []
    for keys in (range(0, 10), range(10, 20)):
        rows = pa.table(
            {"k": pa.array(list(keys), pa.uint64()), "v": [f"v{k}" for k in keys], "_shoal_deleted": [False] * 10},
            schema=ingest_schema(TABLE.arrow_schema()),
        )
        peer.append(versioned_rows(rows, Gtid(2, keys.start)), keys.start)
        record = peer.flush(2)
        assert record is not None
        records.append(record)
    topic = TOPICS.segments(pid, 2)
    messages, offset = [], 0
    for n, record in enumerate(records):
        for i, (kind, value) in enumerate(_messages(peer, record)):
            broken = n == 0 and i == 1
            messages.append(FakeMessage(topic, offset, kind, b"\x00garbage on the topic" if broken else value))
            offset += 1
        offset += 1  # the transaction's commit marker
    jobs: queue.Queue[MergeJob] = queue.Queue()

    def submit(job: MergeJob) -> None:
        jobs.put(job)
        drain_merges(jobs, leader, 4)

    receiver = PeerSegmentReceiver(
        leader,
        KafkaSettings("localhost:1"),
        topics=TOPICS,
        peers=lambda: (2,),
        submit=submit,
        retry_pause_s=0,
        max_attempts=2,
    )
    consumer = SeekingConsumer([*messages, FakeMessage(topic, offset, b"", b"", eof=True)])
    receiver._consumer = consumer  # type: ignore[assignment]
    receiver._owners = {topic: 2}
    for _ in range(200):
        msg = receiver._poll(0)
        if msg is None and not consumer.messages:
            break
        if msg is not None:
            receiver._handle(msg)
    assert receiver.stats.merged == 1 and receiver.stats.retries == 1
    assert receiver.held == {topic: 0}
    assert all(acked == 0 for _t, acked in consumer.commits), consumer.commits
    assert sorted(leader.scan().column("k").to_pylist()) == list(range(10, 20))


def test_a_pushed_segment_the_merge_refuses_is_dropped_and_holds_the_ack(tmp_path: Path) -> None:
    """Placement 2 pushes X (rows of epoch 9, above the merging leader's 4: refused) then Y. X is not
    read again after every pause, its written file is deleted, Y is merged, and the Ack never passes
    X's manifest, so the pusher keeps X."""
    pid = new_partition_id()
    leader = PartitionReplica(TABLE, pid, 1, tmp_path / "p1")
    peer = PartitionReplica(TABLE, pid, 2, tmp_path / "p2")
    records = _flushed(peer, ((range(0, 10), 9), (range(10, 20), 2)))
    topic = TOPICS.segments(pid, 2)
    messages = [
        FakeMessage(topic, offset, kind, value)
        for offset, (kind, value) in enumerate(m for record in records for m in _messages(peer, record))
    ]
    end = FakeMessage(topic, len(messages), b"", b"", eof=True)
    receiver = _inline_receiver(leader)
    consumer = SeekingConsumer([*messages, end])
    receiver._consumer = consumer  # type: ignore[assignment]
    receiver._owners = {topic: 2}
    for _ in range(200):
        msg = receiver._poll(0)
        if msg is None:
            break
        receiver._handle(msg)
    assert receiver.stats.retries == 0 and receiver.stats.invalid == 1 and receiver.stats.merged == 1
    assert receiver.held == {topic: 0} and all(offset == 0 for _, offset in consumer.commits)
    assert not segment_path(leader.directory, records[0].segment_id).exists()
    assert sorted(leader.scan().column("k").to_pylist()) == list(range(10, 20))
