"""Compaction parts without servers: the channel book's chain, segment reassembly, type round trip."""

from __future__ import annotations

import hashlib
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metadata.table import Column, ColumnType, TableDefinition
from shoal.ids import new_partition_id, new_segment_id
from shoal.segments import segments_to_compact
from shoal.segments.versioned import stamp
from shoal.topics import TopicNames
from shoal.wire.records import ManifestRecord, WalOffsetRange
from spark_jobs.compaction.book import ChannelBook, parse_segments_topic
from spark_jobs.compaction.compute import SegmentSource, from_spark, reassemble, versioned_schema
from spark_jobs.errors import CompactionJobError

TABLE = TableDefinition("t", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1)
TOPICS = TopicNames("p")
PID = new_partition_id()


def _manifest(sid: str, base: str | None, major: bool, start: int, end: int) -> ManifestRecord:
    return ManifestRecord(
        table="t",
        partition_id=PID,
        segment_id=sid,
        base_segment_id=base,
        included_segment_ids=(),
        is_major=major,
        placement_id=3,
        epoch=2,
        checksum="0" * 64,
        size_bytes=10,
        row_count=1,
        chunk_count=1,
        covered_wal_offsets=(WalOffsetRange(TOPICS.wal(PID, 3), start, end),),
        latest_major_offset=None,
        created_at_ms=1000 + start,
    )


def test_segments_topics_are_parsed_strictly() -> None:
    assert parse_segments_topic(TOPICS, TOPICS.segments(PID, 3)) == (PID, 3)
    for bad in ("p.segments.x.3", "q.segments." + PID + ".3", "p.wal." + PID + ".3", "p.segments." + PID + ".x"):
        assert parse_segments_topic(TOPICS, bad) is None


def test_the_book_rebuilds_the_chain_of_a_channel_from_its_manifests() -> None:
    ids = [new_segment_id() for _ in range(4)]
    book = ChannelBook(TOPICS)
    topic = TOPICS.segments(PID, 3)
    base: str | None = None
    for offset, sid in enumerate(ids):
        assert book.add(topic, offset * 3, _manifest(sid, base, base is None, offset * 10, offset * 10 + 10))
        base = sid
    assert not book.add(TOPICS.segments(new_partition_id(), 3), 99, _manifest(new_segment_id(), None, True, 0, 1))
    assert book.invalid == 1 and book.partitions() == {PID: "t"}
    view = book.view(PID, 3)
    assert view is not None and view.chain.root == ids[-1]
    assert [e.segment_id for e in segments_to_compact(view.chain)] == ids
    assert view.manifests[ids[2]][0] == 6
    assert book.view(PID, 4) is None


def _segment_bytes(keys: list[int], values: list[str]) -> bytes:
    rows = stamp(pa.table({"k": pa.array(keys, pa.uint64()), "v": values}), epoch=1, first_seq=0)
    sink = io.BytesIO()
    pq.write_table(rows, sink)
    return sink.getvalue()


def _chunks(sid: str, data: bytes, size: int) -> list[tuple[str, int, bytes]]:
    return [(sid, i, data[o : o + size]) for i, o in enumerate(range(0, len(data), size))]


def test_reassembly_checks_every_segment_and_yields_its_rows() -> None:
    a, b = new_segment_id(), new_segment_id()
    da, db = _segment_bytes([1, 2], ["x", "y"]), _segment_bytes([2**62, 2**63, 2**64 - 1], ["z", "w", "u"])
    ca, cb = _chunks(a, da, 100), _chunks(b, db, 64)
    sources = {
        s: SegmentSource(s, "topic", 0, len(c), len(d), hashlib.sha256(d).hexdigest())
        for s, c, d in ((a, ca, da), (b, cb, db))
    }
    rows = sorted([*ca, *cb, ca[0]])  # sorted by (segment, index); a chunk seen twice is ignored
    batch = pa.RecordBatch.from_pydict(
        {
            "segment_id": [r[0] for r in rows],
            "idx": pa.array([r[1] for r in rows], pa.int32()),
            "data": pa.array([r[2] for r in rows], pa.binary()),
        }
    )
    out = pa.Table.from_batches(list(reassemble([batch], sources, TABLE)))
    # Spark has no unsigned long: a uint64 key travels as the int64 of its bits, and comes back whole
    assert (
        sorted(out.column("k").to_pylist()) == [-(2**63), -1, 1, 2, 2**62] and out.schema.field("k").type == pa.int64()
    )
    back = from_spark(out, TABLE)
    assert back.schema == versioned_schema(TABLE) and back.schema.field("k").type == pa.uint64()
    assert sorted(back.column("k").to_pylist()) == [1, 2, 2**62, 2**63, 2**64 - 1]

    corrupt = batch.set_column(2, "data", pa.array([r[2][:-1] + b"?" for r in rows], pa.binary()))
    with pytest.raises(CompactionJobError, match="do not match the manifest"):
        list(reassemble([corrupt], sources, TABLE))
    keep = [i for i, r in enumerate(rows) if not (r[0] == a and r[1] == 0)]
    missing = batch.take(pa.array(keep))
    with pytest.raises(CompactionJobError, match="chunk 0 is missing"):
        list(reassemble([missing], sources, TABLE))


def test_the_service_reads_a_table_definition_once_when_its_manifests_arrive() -> None:
    """A compaction then finds the definition in memory; a failed read is retried on the next batch."""
    from types import SimpleNamespace
    from typing import Any

    from metadata.client import MetadataConfig
    from shoal.errors import ShoalError
    from spark_jobs.compaction.service import CompactionConfig, CompactionService

    reads: list[str] = []
    failures = [ShoalError("ZooKeeper is away")]

    def current(name: str) -> Any:
        reads.append(name)
        if failures:
            raise failures.pop()
        return SimpleNamespace(table=TABLE)

    config = CompactionConfig(MetadataConfig(zk_hosts="zk:1", bootstrap_servers="k:1", topic_prefix="p"))
    service = CompactionService(None, config)  # type: ignore[arg-type]
    service._client = SimpleNamespace(coordinator=SimpleNamespace(current=current))  # type: ignore[assignment]
    service.learn_tables()
    assert reads == []  # nothing in the book yet
    service.book.add(TOPICS.segments(PID, 3), 0, _manifest(new_segment_id(), None, True, 0, 10))
    service.learn_tables()
    service.learn_tables()
    service.learn_tables()
    assert reads == ["t", "t"] and service._table("t") is TABLE


def test_a_segment_with_no_chunk_in_the_read_fails_the_major() -> None:
    """Spark's Kafka source reads the channel with ``failOnDataLoss=false``: a segment whose chunks the
    Tail deleted yields no row, and reassembly alone (per segment it sees) cannot notice. The
    segments it saw are reported; the job compares them with its inputs."""
    from spark_jobs.compaction.compute import check_all_read

    a, b = new_segment_id(), new_segment_id()
    da = _segment_bytes([1, 2], ["x", "y"])
    ca = _chunks(a, da, 100)
    sources = {
        a: SegmentSource(a, "p.segments.x.1", 0, len(ca), len(da), hashlib.sha256(da).hexdigest()),
        b: SegmentSource(b, "p.segments.x.1", 9, 1, 10, "0" * 64),  # on the channel no more
    }
    batch = pa.RecordBatch.from_pydict(
        {
            "segment_id": [r[0] for r in ca],
            "idx": pa.array([r[1] for r in ca], pa.int32()),
            "data": pa.array([r[2] for r in ca], pa.binary()),
        }
    )
    seen: list[str] = []
    out = pa.Table.from_batches(list(reassemble([batch], sources, TABLE, seen.append)))
    assert out.num_rows == 2 and seen == [a]
    with pytest.raises(CompactionJobError, match=f"1 input segment.*e.g. {b} on p.segments.x.1"):
        check_all_read(seen, list(sources.values()))
    check_all_read([a, b], list(sources.values()))
