"""``shoal verify`` compares every replica with the segments channels, not only with the WAL channels
and with each other (DESIGN.md section 6), without servers.

The states here are wrong in a way comparing replicas cannot show: every replica lacks rows that a
segment on a channel holds, once the WAL channel that carried them was truncated (a compaction that
lost rows, a segment every replica dropped). Only the segments channels still hold them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_verify_coverage import _batch, _records, _replica, _segment
from test_verify_gtids import TABLE, TOPICS, FakeChannels, _client, _file, _manifest

from metadata.table import Column, ColumnType, TableDefinition
from shoal.errors import WireFormatError
from shoal.segments.channel import KIND_CHUNK, KIND_HEADER, KIND_MANIFEST
from shoal.wire.records import Gtid, SegmentChunk
from shoal_app.cli import verify as verify_module
from shoal_app.cli.verify import verify
from shoal_app.cli.verify_coverage import ChannelSegment, WalFloors, missing_writes

Row = tuple[int, str | None, int, int, bool]


def _described(pid: str) -> list[dict[str, Any]]:
    return [
        {
            "partition_id": pid,
            "placement_id": 1,
            "row_count": 2,
            "key_min": 1,
            "key_max": 1,
            "content_hash": "h",
            "chain": ["s"],
            "root": "s",
        }
    ]


def _with_tombstones(rows: list[Row]) -> pa.Table:
    """A replica's scan with its tombstones (``ScanRequest.deleted``): (k, v, epoch, seq, deleted)."""
    table = _replica([(k, v or "", e, s) for k, v, e, s, _d in rows])
    return table.set_column(table.schema.get_field_index("_shoal_deleted"), "_shoal_deleted", [[r[4] for r in rows]])


def _verify(rows: list[Row], segment_rows: list[Row], *, corrupt: bool = False) -> Any:
    """One partition whose WAL channel was truncated to 2 by a segment covering [0, 2) that holds
    ``segment_rows``; every replica's scan is ``rows``."""
    file = _file()
    pid = file.partitions[0].partition_id
    seg, data = _segment(_manifest(pid, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 9)), is_major=False), segment_rows)
    if corrupt:
        data = data[:-9] + b"x" * 9
    channels = FakeChannels({TOPICS.wal(pid, 1): (2, [])}, {TOPICS.segments(pid, 1): [seg]}, {seg.segment_id: data})
    report = verify(
        _client(file),
        "events",
        channels=channels,
        describe=lambda _s: _described(pid),
        rows=lambda _s, _p: _with_tombstones(rows),
    )
    return report


def test_rows_every_replica_lacks_but_a_segment_holds_are_a_mismatch() -> None:
    segment = [(1, "a", 1, 0, False), (2, "b", 1, 1, False)]
    held = [(1, "a", 1, 0, False), (2, "b", 1, 1, False)]
    assert _verify(held, segment).ok
    report = _verify(held[:1], segment)  # every replica lost k=2 alike: they agree with each other
    part = report.partitions[0]
    assert not report.ok and part.agree and part.wal_chains_ok and part.covered is False
    assert "misses 1 of 2 writes on the channels (k=2 written at gtid 1:1, replica has no row)" in (
        part.coverage_error or ""
    ), part.coverage_error
    # other values at the segment's GTID (a compaction that stamped old values with a new GTID)
    report = _verify([(1, "a", 1, 0, False), (2, "old", 1, 1, False)], segment)
    assert not report.ok and "other values at that gtid: v='old' (channel 'b')" in (
        report.partitions[0].coverage_error or ""
    )


def test_a_later_delete_only_the_replicas_hold_reaches_an_older_segment_row() -> None:
    """The delete's own channel is gone (a leaving placement's channels are deleted after it led):
    the replicas' tombstone, newer than the segment's row, is what they must hold."""
    segment = [(1, "a", 1, 0, False), (2, "b", 1, 1, False)]
    assert _verify([(1, "a", 1, 0, False), (2, None, 2, 0, True)], segment).ok
    # a tombstone older than the segment's row is not: the replica lost that write
    report = _verify([(1, "a", 1, 0, False), (2, None, 0, 5, True)], segment)
    assert not report.ok and "k=2 written at gtid 1:1, replica has a delete at gtid 0:5" in (
        report.partitions[0].coverage_error or ""
    )


def test_a_segment_file_that_does_not_match_its_manifest_is_a_mismatch() -> None:
    segment = [(1, "a", 1, 0, False)]
    report = _verify([(1, "a", 1, 0, False)], segment, corrupt=True)
    error = report.partitions[0].coverage_error or ""
    assert not report.ok and "undecodable segment" in error and "is not its manifest's" in error, error


def test_tombstones_in_the_replica_scan_are_compared_by_gtid() -> None:
    floors = _with_tombstones([(1, "a", 1, 0, False), (2, None, 1, 1, True), (3, None, 1, 2, True)])
    replica = _with_tombstones([(1, None, 1, 0, True), (2, None, 1, 1, True), (3, None, 1, 1, True)])
    count, examples = missing_writes(floors, replica, ["k"])
    # k=1: a delete at the write's own GTID; k=2: the delete's own tombstone (fine); k=3: an older tombstone
    assert count == 2, examples
    assert "k=1 written at gtid 1:0, replica has a delete at gtid 1:0" in examples[0]
    assert "k=3 deleted at gtid 1:2, replica has a delete at gtid 1:1" in examples[1]
    # a live row at a delete's GTID is a miss, a newer live row is not
    assert missing_writes(floors.slice(1, 1), _with_tombstones([(2, "x", 1, 1, False)]), ["k"])[0] == 1
    assert missing_writes(floors.slice(1, 1), _with_tombstones([(2, "x", 1, 2, False)]), ["k"])[0] == 0


class _Msg(SimpleNamespace):
    def headers(self) -> list[tuple[str, bytes]]:
        return [(KIND_HEADER, self.kind)]

    def offset(self) -> int:
        return int(self.at)

    def value(self) -> bytes:
        return bytes(self.body)


def _channel_messages(monkeypatch: pytest.MonkeyPatch, messages: list[_Msg], *, ends: list[int] | None = None) -> Any:
    """KafkaChannels over ``messages``; each read from an offset stops at the next of ``ends`` (the
    end it read when it started), or at the last message."""
    import shoal.kafka.readers as readers

    reads: list[int] = []

    def read_to_end(_settings: Any, _topic: str, start: int, **_kw: Any) -> Any:
        reads.append(start)
        end = next((e for e in ends or [] if e > start), None)
        return iter([m for m in messages if m.at >= start and (end is None or m.at < end)])

    monkeypatch.setattr(readers, "read_to_end", read_to_end)
    channels = verify_module.KafkaChannels.__new__(verify_module.KafkaChannels)
    channels.kafka = None
    channels.resume_s = 0.3
    channels.reads = reads
    return channels


def test_kafka_segments_join_each_manifests_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    pid = _file().partitions[0].partition_id
    one = _manifest(pid, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 1)), segment_id="01" * 16)
    one = replace(one, chunk_count=2)
    two = _manifest(pid, 1, 1, (2, 4), (Gtid(1, 2), Gtid(1, 3)), segment_id="02" * 16)
    three = _manifest(pid, 1, 1, (4, 6), (Gtid(1, 4), Gtid(1, 5)), segment_id="03" * 16)

    def chunk(m: Any, index: int, count: int, data: bytes, at: int) -> _Msg:
        return _Msg(kind=KIND_CHUNK, at=at, body=SegmentChunk(m.segment_id, index, count, data).to_bytes())

    messages = [
        _Msg(kind=KIND_CHUNK, at=0, body=b"a chunk whose manifest was truncated"),
        _Msg(kind=KIND_MANIFEST, at=1, body=one.to_bytes()),
        chunk(one, 0, 2, b"ab", 2),
        chunk(one, 1, 2, b"cd", 3),
        _Msg(kind=KIND_MANIFEST, at=4, body=two.to_bytes()),  # its chunk never came
        _Msg(kind=KIND_MANIFEST, at=5, body=three.to_bytes()),
        chunk(two, 0, 1, b"zz", 6),  # another segment's chunk
    ]
    channels = _channel_messages(monkeypatch, messages)
    got = list(channels.segments("t", data=True))
    assert [(s.offset, s.manifest.segment_id, s.data) for s in got] == [
        (1, one.segment_id, b"abcd"),
        (4, two.segment_id, None),
        (5, three.segment_id, None),
    ]
    assert got[0].error is None
    assert got[1].error == "only 0 of its chunks before the next manifest"
    assert (got[2].error or "").startswith(f"chunk {two.segment_id}[0/1] at offset 6 where its chunk 0 was expected")
    # manifests only: no chunk is decoded
    assert [(s.offset, s.data, s.error) for s in channels.segments("t", data=False)] == [
        (1, None, None),
        (4, None, None),
        (5, None, None),
    ]
    # a channel that ends before a manifest's last chunk
    channels = _channel_messages(monkeypatch, messages[1:3])
    (only,) = channels.segments("t", data=True)
    assert only.data is None and only.error == "only 1 of its 2 chunks on the channel"


def test_a_message_neither_manifest_nor_chunk_on_a_segments_channel_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only leaders write segments channels: a message of another kind (another writer, a manifest
    sent without its header) could hide a segment, so verify fails the channel instead of skipping it."""
    pid = _file().partitions[0].partition_id
    one = _manifest(pid, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 1)), segment_id="01" * 16)
    for kind, shown in ((b"garbage", "shoal.kind b'garbage'"), (None, "no shoal.kind header")):
        messages = [_Msg(kind=KIND_MANIFEST, at=0, body=one.to_bytes()), _Msg(kind=kind, at=1, body=one.to_bytes())]
        channels = _channel_messages(monkeypatch, messages)
        with pytest.raises(WireFormatError, match=f"the message at offset 1 has {re.escape(shown)}"):
            list(channels.segments("t", data=False))


def test_a_read_whose_end_falls_inside_a_segments_transaction_reads_on_to_its_chunks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The end a read takes first can fall between a committed manifest and its chunks (read while
    the transaction's records were replicating; the manifest read once it committed): a CI run of
    the broker-fault test saw a healthy channel reported "only 0 of its 1 chunks on the channel"."""
    pid = _file().partitions[0].partition_id
    one = _manifest(pid, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 1)), segment_id="01" * 16)
    two = _manifest(pid, 1, 1, (2, 4), (Gtid(1, 2), Gtid(1, 3)), segment_id="02" * 16)

    def chunk(m: Any, data: bytes, at: int) -> _Msg:
        return _Msg(kind=KIND_CHUNK, at=at, body=SegmentChunk(m.segment_id, 0, 1, data).to_bytes())

    messages = [
        _Msg(kind=KIND_MANIFEST, at=0, body=one.to_bytes()),
        chunk(one, b"ab", 1),
        _Msg(kind=KIND_MANIFEST, at=3, body=two.to_bytes()),  # offset 2: the first transaction's marker
        chunk(two, b"cd", 4),
    ]
    channels = _channel_messages(monkeypatch, messages, ends=[4])
    got = list(channels.segments("t", data=True))
    assert [(s.offset, s.data, s.error) for s in got] == [(0, b"ab", None), (3, b"cd", None)]
    assert channels.reads == [0, 4]
    # a read that ends on whole segments reads once
    channels = _channel_messages(monkeypatch, messages, ends=[2])
    assert [(s.offset, s.data) for s in channels.segments("t", data=True)] == [(0, b"ab")]
    assert channels.reads == [0]


def test_a_segment_and_a_wal_record_disagreeing_at_one_gtid_are_a_mismatch() -> None:
    """A bad major stamped another row at a WAL record's own GTID: whichever the merge keeps, one
    channel is wrong. Equal rows at one GTID (a segment covering a record still on the WAL) are fine."""
    file = _file()
    pid = file.partitions[0].partition_id
    wal = _records(pid, 1, [(Gtid(1, 0), _batch([1, 2], ["a", "x"], [False, False]))])

    def run(segment_rows: list[Row], replica: list[Row]) -> Any:
        seg, data = _segment(_manifest(pid, 1, 1, (0, 1), (Gtid(1, 0), Gtid(1, 1)), is_major=True), segment_rows)
        channels = FakeChannels(
            {TOPICS.wal(pid, 1): (0, wal)}, {TOPICS.segments(pid, 1): [seg]}, {seg.segment_id: data}
        )
        return verify(
            _client(file),
            "events",
            channels=channels,
            describe=lambda _s: _described(pid),
            rows=lambda _s, _p: _with_tombstones(replica),
        ).partitions[0]

    same = [(1, "a", 1, 0, False), (2, "x", 1, 1, False)]
    assert run(same, same).covered is True
    stale = run([(1, "a", 1, 0, False), (2, "old", 1, 1, False)], [(1, "a", 1, 0, False), (2, "old", 1, 1, False)])
    assert stale.covered is False
    assert "k=2 at gtid 1:1: a row v='old' and a row v='x'" in (stale.coverage_error or ""), stale.coverage_error
    deleted = run([(1, "a", 1, 0, False), (2, None, 1, 1, True)], [(1, "a", 1, 0, False), (2, None, 1, 1, True)])
    assert deleted.covered is False and "k=2 at gtid 1:1: a delete and a row v='x'" in (deleted.coverage_error or "")


def _floors_of_one_segment(table: TableDefinition, rows: pa.Table) -> WalFloors:
    """WalFloors of ``table`` after one segment whose file holds ``rows``."""
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink)
    data = sink.getvalue().to_pybytes()
    pid = _file().partitions[0].partition_id
    m = replace(_manifest(pid, 1, 1, (0, 1), (Gtid(1, 0), Gtid(1, 1))), checksum=hashlib.sha256(data).hexdigest())
    floors = WalFloors(table)
    floors.add_segment("shoal.segments.x.1", ChannelSegment(0, m, data))
    return floors


def test_a_flushed_delete_in_a_table_with_a_not_null_column_is_read() -> None:
    """A tombstone has no values: a node's segment holds nulls in a NOT NULL column for it."""
    table = TableDefinition(
        "events", (Column("k", ColumnType.UINT64, False), Column("n", ColumnType.INT64, False)), ("k",), "k", 1
    )
    rows = pa.table(
        {
            "k": pa.array([1, 2], pa.uint64()),
            "n": pa.array([10, None], pa.int64()),
            "_shoal_epoch": pa.array([1, 1], pa.int64()),
            "_shoal_seq": pa.array([0, 1], pa.int64()),
            "_shoal_deleted": [False, True],
        }
    )
    floors = _floors_of_one_segment(table, rows)
    assert floors.undecodable == [] and floors.conflicts == []
    newest = floors.floors()
    assert newest is not None and newest.column("_shoal_deleted").to_pylist() == [False, True]


def test_a_segment_column_of_another_kind_is_undecodable_not_cast() -> None:
    """A segment whose file holds the string column as integers is not read after a cast (``1`` would
    pass for ``"1"``): its rows cannot be checked, which is a mismatch."""
    rows = pa.table(
        {
            "k": pa.array([1], pa.uint64()),
            "v": pa.array([1], pa.int64()),
            "_shoal_epoch": pa.array([1], pa.int64()),
            "_shoal_seq": pa.array([0], pa.int64()),
            "_shoal_deleted": [False],
        }
    )
    floors = _floors_of_one_segment(TABLE, rows)
    (problem,) = floors.undecodable
    assert "not a segment of this table: it holds v as int64" in problem, problem
    assert floors.segments == 0
