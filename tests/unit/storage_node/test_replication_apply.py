"""apply_segment (the follower's receive step) and the segments-channel wire conversions, without Kafka."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from metadata.table import Column, ColumnType, TableDefinition
from shoal.errors import SchemaError
from shoal.ids import new_partition_id
from shoal.segments import PlainManifest, ReceiveOutcome, SegmentRecord, WalRange
from shoal.segments.channel import chunk_count, from_wire, parse_wal_topic, to_wire
from shoal.segments.parquet_io import segment_path
from shoal.topics import TopicNames
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import Gtid
from shoal.wire.records import ManifestRecord as WireManifest
from storage_node.replica import PartitionReplica, versioned_rows
from storage_node.replica.overlay import PendingRows, WalOverlay
from storage_node.replication.describe import content_hash, describe_replica
from storage_node.replication.receive import InFlightBudget, ReceiveStats, apply_segment

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)
TOPICS = TopicNames("t1")
LEADER, FOLLOWER = 1, 2


def ingest(keys: list[int], values: list[str]) -> pa.Table:
    return pa.table(
        {"k": pa.array(keys, pa.uint64()), "v": pa.array(values, pa.string()), "_shoal_deleted": [False] * len(keys)},
        schema=ingest_schema(TABLE.arrow_schema()),
    )


class Pair:
    """A leader replica that flushes segments and a follower replica that receives them."""

    def __init__(self, tmp: Path) -> None:
        self.pid = new_partition_id()
        self.leader = PartitionReplica(TABLE, self.pid, LEADER, tmp / "leader")
        self.follower = PartitionReplica(TABLE, self.pid, FOLLOWER, tmp / "follower")
        self.seq = 0
        self.offset = 0

    def flush(self, keys: list[int]) -> SegmentRecord:
        self.leader.append(versioned_rows(ingest(keys, [f"v{k}" for k in keys]), Gtid(1, self.seq)), self.offset)
        self.seq += len(keys)
        self.offset += 2
        record = self.leader.flush(1)
        assert record is not None
        return record

    def manifest(self, record: SegmentRecord, sender: int = LEADER) -> PlainManifest:
        wire = to_wire(record, table="events", partition_id=self.pid, topics=TOPICS, latest_major_offset=None)
        return from_wire(WireManifest.from_bytes(wire.to_bytes()), sender_placement_id=sender, topics=TOPICS)

    def chunks(self, record: SegmentRecord, size: int = 100) -> Iterator[bytes]:
        data = segment_path(self.leader.directory, record.segment_id).read_bytes()
        for i in range(0, len(data), size):
            yield data[i : i + size]

    def apply(self, record: SegmentRecord, chunks: Iterator[bytes] | None = None, **kw: object) -> ReceiveOutcome:
        kw.setdefault("leader_placement_id", LEADER)
        result = apply_segment(self.follower, self.manifest(record), chunks or self.chunks(record), **kw)  # type: ignore[arg-type]
        return result.outcome


def test_fast_forward_then_exists_and_identical_content(tmp_path: Path) -> None:
    p = Pair(tmp_path)
    s1, s2 = p.flush([1, 2, 3]), p.flush([3, 4])
    assert s1.entry.is_major and not s2.entry.is_major
    assert p.apply(s1) is ReceiveOutcome.FAST_FORWARD  # base NULL == root NULL
    assert p.apply(s2) is ReceiveOutcome.FAST_FORWARD
    assert p.follower.chain.root == s2.segment_id == p.leader.chain.root
    assert p.apply(s1) is ReceiveOutcome.SEGMENT_EXISTS  # a replay is idempotent
    assert p.apply(s2) is ReceiveOutcome.SEGMENT_EXISTS
    a, b = describe_replica(p.leader), describe_replica(p.follower)
    assert (a["row_count"], a["content_hash"], a["chain"]) == (b["row_count"], b["content_hash"], b["chain"])
    assert a["row_count"] == 4
    # the file is stored byte for byte (never re-encoded)
    assert (
        segment_path(p.follower.directory, s2.segment_id).read_bytes()
        == segment_path(p.leader.directory, s2.segment_id).read_bytes()
    )


def test_corrupt_chunk_is_invalid_changes_nothing_and_a_refetch_succeeds(tmp_path: Path) -> None:
    p = Pair(tmp_path)
    s1 = p.flush([1, 2, 3])
    pieces = list(p.chunks(s1))
    pieces[1] = bytes([pieces[1][0] ^ 0xFF]) + pieces[1][1:]
    assert p.apply(s1, iter(pieces)) is ReceiveOutcome.INVALID
    assert p.follower.chain.root is None and not segment_path(p.follower.directory, s1.segment_id).exists()
    assert p.apply(s1, iter(pieces[:-1])) is ReceiveOutcome.INVALID  # short file
    assert p.apply(s1) is ReceiveOutcome.FAST_FORWARD


def test_out_of_order_foreign_and_overloaded(tmp_path: Path) -> None:
    p = Pair(tmp_path)
    s1, s2, s3 = p.flush([1]), p.flush([2]), p.flush([3])
    assert p.apply(s1) is ReceiveOutcome.FAST_FORWARD
    assert p.apply(s3) is ReceiveOutcome.OUT_OF_ORDER  # its base s2 is missing
    assert p.follower.chain.root == s1.segment_id
    assert p.apply(s2, leader_placement_id=7) is ReceiveOutcome.INVALID  # not from the placement we follow
    busy = InFlightBudget(max_bytes=10)
    busy.acquire(5)
    assert p.apply(s2, budget=busy) is ReceiveOutcome.OVERLOADED
    assert p.apply(s2) is ReceiveOutcome.FAST_FORWARD and p.apply(s3) is ReceiveOutcome.FAST_FORWARD


def test_stats_count_outcomes_and_never_decode_rows(tmp_path: Path) -> None:
    p = Pair(tmp_path)
    stats = ReceiveStats()
    s1 = p.flush([1, 2])
    for _ in range(2):
        stats.count(apply_segment(p.follower, p.manifest(s1), p.chunks(s1), leader_placement_id=LEADER))
    assert (stats.manifests, stats.fast_forwards - 1, stats.exists, stats.rows_decoded_to_apply) == (2, 0, 1, 0)
    assert stats.bytes_received == s1.size_bytes


def test_wire_round_trip_and_topic_parsing(tmp_path: Path) -> None:
    p = Pair(tmp_path)
    s1 = p.flush([1])
    m = p.manifest(s1)
    assert m.covered == (WalRange(p.pid, LEADER, 0, 1),)
    assert (m.segment_id, m.sha256, m.size_bytes, m.row_count) == (s1.segment_id, s1.sha256, s1.size_bytes, 1)
    assert parse_wal_topic(TOPICS, TOPICS.wal(p.pid, 9)) == (p.pid, 9)
    for bad in [TopicNames("other").wal(p.pid, 9), f"t1.segments.{p.pid}.9", "t1.wal.xyz.1", f"t1.wal.{p.pid}.01"]:
        with pytest.raises(SchemaError):
            parse_wal_topic(TOPICS, bad)
    assert chunk_count(0) == 1 and chunk_count(10, 5) == 2 and chunk_count(11, 5) == 3


def test_overlay_drops_rows_the_chain_covers_and_scans_see_it(tmp_path: Path) -> None:
    p = Pair(tmp_path)
    overlay = WalOverlay()
    p.follower.overlay = overlay
    ch = (p.pid, LEADER)
    overlay.add(ch, 0, versioned_rows(ingest([1], ["v1"]), Gtid(1, 0)))
    overlay.add(ch, 2, versioned_rows(ingest([5], ["v5"]), Gtid(1, 1)))
    assert sorted(p.follower.scan().column("k").to_pylist()) == [1, 5]
    s1 = p.flush([1])  # covers WAL offset 0 of the leader's channel
    assert p.apply(s1) is ReceiveOutcome.FAST_FORWARD
    assert overlay.records == 1 and sorted(p.follower.scan().column("k").to_pylist()) == [1, 5]
    assert not overlay.add(ch, 0, versioned_rows(ingest([1], ["v1"]), Gtid(1, 0)), p.follower.chain.coverage())


def test_overlay_decodes_a_pending_record_once_and_never_one_covered_first(tmp_path: Path) -> None:
    p = Pair(tmp_path)
    overlay = WalOverlay()
    p.follower.overlay = overlay
    ch = (p.pid, LEADER)
    decoded: list[int] = []

    def pending(offset: int, keys: list[int], gtid: Gtid) -> PendingRows:
        def decode() -> pa.Table:
            decoded.append(offset)
            return versioned_rows(ingest(keys, [f"v{k}" for k in keys]), gtid)

        return PendingRows(len(keys), decode)

    overlay.add(ch, 0, pending(0, [1], Gtid(1, 0)))
    overlay.add(ch, 2, pending(2, [5, 6], Gtid(1, 1)))
    assert (overlay.records, overlay.pending, overlay.rows, decoded) == (2, 2, 3, [])
    assert p.apply(p.flush([1])) is ReceiveOutcome.FAST_FORWARD  # covers offset 0 before any read
    assert (overlay.records, overlay.pending, decoded) == (1, 1, [])
    assert sorted(p.follower.scan().column("k").to_pylist()) == [1, 5, 6]
    assert sorted(p.follower.scan().column("k").to_pylist()) == [1, 5, 6]
    assert decoded == [2] and overlay.pending == 0 and overlay.rows == 2  # offset 0 never decoded


def test_content_hash_is_order_independent() -> None:
    t = versioned_rows(ingest([3, 1, 2], ["c", "a", "b"]), Gtid(1, 0))
    shuffled = pa.concat_tables([t.slice(2), t.slice(0, 2)])
    assert content_hash(t, ["k"]) == content_hash(shuffled, ["k"])
    assert content_hash(t, ["k"]) != content_hash(t.slice(1), ["k"])
    # a segment compacted by Spark declares its columns NOT NULL; the same rows hash alike
    strict = t.cast(pa.schema([f.with_nullable(False) for f in t.schema]))
    assert strict.schema != t.schema and content_hash(strict, ["k"]) == content_hash(t, ["k"])
    changed = t.set_column(1, "v", pa.array(["c", "a", "x"]))
    assert content_hash(changed, ["k"]) != content_hash(t, ["k"])


def test_tail_never_passes_an_ack_or_the_own_coverage() -> None:
    from storage_node.replication.tail import decide_tail

    d = decide_tail(
        wal_tail=0,
        wal_acks=[10, 7],
        own_covered_end=9,
        segments_tail=0,
        segments_acks=[30, 25],
        major_offsets=[0, 12, 26],
    )
    assert (d.wal_tail, d.segments_tail) == (7, 12)  # min ack; the latest major both acked
    d = decide_tail(
        wal_tail=0,
        wal_acks=[10, 12],
        own_covered_end=9,
        segments_tail=12,
        segments_acks=[13, 30],
        major_offsets=[0, 12, 26],
    )
    assert (d.wal_tail, d.segments_tail) == (9, None)  # own coverage bounds it; nothing new to drop
    d = decide_tail(
        wal_tail=0, wal_acks=[10, None], own_covered_end=20, segments_tail=0, segments_acks=[None], major_offsets=[5]
    )
    assert (d.wal_tail, d.segments_tail) == (None, None)  # a replica without acks holds the Tail
    assert (
        decide_tail(
            wal_tail=5, wal_acks=[3], own_covered_end=9, segments_tail=0, segments_acks=[], major_offsets=[]
        ).wal_tail
        is None
    )


def test_rewind_detaches_the_diverged_segments_and_follows_the_leader(tmp_path: Path) -> None:
    p = Pair(tmp_path)
    s1 = p.flush([1])
    assert p.apply(s1) is ReceiveOutcome.FAST_FORWARD
    # the follower got a segment from an old leader that the new leader never received
    old = PartitionReplica(TABLE, p.pid, 9, tmp_path / "old-leader")
    old.append(versioned_rows(ingest([7], ["x"]), Gtid(1, 50)), 0)
    detached_rec = old.flush(1)
    assert detached_rec is not None
    entry = detached_rec.entry
    from dataclasses import replace

    forked = replace(detached_rec, entry=replace(entry, base_segment_id=s1.segment_id, is_major=False))
    p.follower.apply_received(forked, add=False)
    s2 = p.flush([2])  # the new leader's next segment, based on s1
    assert p.apply(s2) is ReceiveOutcome.OUT_OF_ORDER
    p.follower.rewind(s1.segment_id)
    assert p.apply(s2) is ReceiveOutcome.FAST_FORWARD
    chain = p.follower.chain
    assert chain.root == s2.segment_id and forked.segment_id in chain and not chain.is_referenced(forked.segment_id)
    with pytest.raises(Exception, match="not on the chain"):
        p.follower.rewind(forked.segment_id)


OTHER_TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.INT64)), ("k",), "k", 1
)


def _foreign(tmp: Path, table: TableDefinition, pid: str, epoch: int) -> tuple[PartitionReplica, SegmentRecord]:
    """A segment flushed by another writer: ``table``'s columns, rows stamped with ``epoch``."""
    other = PartitionReplica(table, pid, 9, tmp / "other")
    values = pa.array([1, 2], pa.int64()) if table is OTHER_TABLE else pa.array(["x", "y"], pa.string())
    rows = pa.table(
        {"k": pa.array([1, 2], pa.uint64()), "v": values, "_shoal_deleted": [False, False]},
        schema=ingest_schema(table.arrow_schema()),
    )
    other.append(versioned_rows(rows, Gtid(epoch, 0)), 0)
    record = other.flush(epoch)
    assert record is not None
    return other, record


def test_a_segment_of_other_columns_is_invalid_and_changes_nothing(tmp_path: Path) -> None:
    """Checksum, size and row count matched, so a segment whose ``v`` holds integers was stored, acked,
    and every later scan of the replica failed (an audit's proof)."""
    p = Pair(tmp_path)
    p.apply(p.flush([1]))
    other, wrong = _foreign(tmp_path, OTHER_TABLE, p.pid, 1)
    wire = to_wire(wrong, table="events", partition_id=p.pid, topics=TOPICS, latest_major_offset=None)
    manifest = from_wire(WireManifest.from_bytes(wire.to_bytes()), sender_placement_id=LEADER, topics=TOPICS)
    data = segment_path(other.directory, wrong.segment_id).read_bytes()
    root = p.follower.chain.root
    result = apply_segment(p.follower, manifest, iter([data]), leader_placement_id=LEADER)
    assert result.outcome is ReceiveOutcome.INVALID and "v is int64" in result.reason
    assert p.follower.chain.root == root and not segment_path(p.follower.directory, wrong.segment_id).exists()
    assert p.follower.scan().num_rows == 1


@pytest.mark.parametrize(("table", "epoch"), [(OTHER_TABLE, 1), (TABLE, 9)])
def test_a_pushed_segment_of_other_columns_or_a_later_epoch_is_not_merged(
    tmp_path: Path, table: TableDefinition, epoch: int
) -> None:
    """A leader merging a pushed (or detached) segment keeps its rows' GTIDs: rows of an epoch above its
    own would win over every write it accepts, and other columns would fail every scan."""
    p = Pair(tmp_path)
    p.flush([1])
    other, pushed = _foreign(tmp_path, table, p.pid, epoch)
    segment_path(p.leader.directory, pushed.segment_id).write_bytes(
        segment_path(other.directory, pushed.segment_id).read_bytes()
    )
    before = (p.leader.chain.root, p.leader.detached(), p.leader.scan().to_pylist())
    with pytest.raises(SchemaError):
        p.leader.merge_detached(pushed, 3)
    assert (p.leader.chain.root, p.leader.detached(), p.leader.scan().to_pylist()) == before
    if table is TABLE:
        p.leader.merge_detached(pushed, epoch)  # the same segment, merged by a leader of that epoch or later
        assert sorted(r["k"] for r in p.leader.scan().to_pylist()) == [1, 2]
