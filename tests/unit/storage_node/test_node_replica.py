"""Replica, memtable, ingest validation and Flight scans, without servers."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from metadata.keyspace import KeyRange
from metadata.table import Column, ColumnType, TableDefinition
from shoal.errors import SchemaError, WireFormatError
from shoal.ids import new_partition_id, new_segment_id
from shoal.scan import ScanRequest, scan_remote
from shoal.segments import (
    CompactionConflictError,
    MajorContentError,
    SegmentRecord,
    WalRange,
    compaction_entry,
    lww_merge,
    read_segment,
    read_segment_near,
    segment_list_path,
    write_segment,
)
from shoal.segments.errors import (
    ChecksumMismatchError,
    ReplacedSegmentUnreadableError,
    SegmentChecksumError,
    SegmentListCorruptError,
)
from shoal.segments.parquet_io import ROW_GROUP_ROWS, read_segment_metadata, segment_path
from shoal.wire.arrow_ipc import encode_batch
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import Gtid
from storage_node.config import FlushPolicy
from storage_node.replica import IngestValidator, KeyFilter, PartitionReplica, Rejected, replica_dir, versioned_rows
from storage_node.replica.memtable import Memtable
from storage_node.serve import ScanServer

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)


def ingest(keys: list[int], values: list[str | None], deleted: bool = False) -> pa.Table:
    return pa.table(
        {"k": pa.array(keys, pa.uint64()), "v": pa.array(values, pa.string()), "_shoal_deleted": [deleted] * len(keys)},
        schema=ingest_schema(TABLE.arrow_schema()),
    )


def test_flush_policy() -> None:
    p = FlushPolicy(max_rows=10, max_bytes=1000, max_age_s=5)
    assert not p.due(0, 10**9, 100)  # nothing to flush
    assert p.due(10, 0, 0) and p.due(1, 1000, 0) and p.due(1, 0, 5)
    assert not p.due(9, 999, 4.9)


def test_memtable_tracks_offsets_and_refuses_going_back() -> None:
    m = Memtable(start_offset=4)
    assert m.empty
    m.append(versioned_rows(ingest([1], ["a"]), Gtid(1, 0)), 5)
    m.append(versioned_rows(ingest([1], ["b"]), Gtid(1, 1)), 7)
    assert (m.start_offset, m.end_offset, m.rows) == (4, 8, 2)
    with pytest.raises(ValueError):
        m.append(versioned_rows(ingest([2], ["c"]), Gtid(1, 2)), 6)
    merged = m.merged(["k"])
    assert merged is not None and merged.column("v").to_pylist() == ["b"]


def test_replica_flush_scan_and_reopen(tmp_path: Path) -> None:
    pid = new_partition_id()
    r = PartitionReplica(TABLE, pid, 3, tmp_path)
    assert r.covered_end() == 0 and r.flush(1) is None
    r.append(versioned_rows(ingest([1, 2, 1], ["a", "b", "a2"]), Gtid(1, 0)), 0)  # same key twice: later row wins
    r.append(versioned_rows(ingest([2], [None], deleted=True), Gtid(1, 3)), 2)
    assert r.scan().to_pylist() == [{"k": 1, "v": "a2"}]
    first = r.flush(1)
    assert first is not None and first.entry.is_major and first.entry.base_segment_id is None
    r.append(versioned_rows(ingest([2, 5], ["b2", "e"]), Gtid(2, 0)), 4)
    second = r.flush(2)
    assert second is not None and second.entry.base_segment_id == first.segment_id and not second.entry.is_major
    r.append(versioned_rows(ingest([5], ["e2"]), Gtid(2, 2)), 6)  # memtable only
    expect = [{"k": 1, "v": "a2"}, {"k": 2, "v": "b2"}, {"k": 5, "v": "e2"}]
    assert r.scan().sort_by("k").to_pylist() == expect
    assert r.scan(KeyFilter(low=2, high=5)).to_pylist() == [{"k": 2, "v": "b2"}]
    assert r.covered_end() == 5
    r.close()
    again = PartitionReplica(TABLE, pid, 3, tmp_path)  # the memtable is gone: the leader replays the WAL from 5
    assert again.covered_end() == 5 and again.memtable.start_offset == 5
    assert again.scan().sort_by("k").to_pylist() == [*expect[:2], {"k": 5, "v": "e"}]
    again.close()


@pytest.mark.parametrize("damage", ["emptied", "deleted"])
def test_segment_files_whose_list_was_lost_are_refused_and_kept(tmp_path: Path, damage: str) -> None:
    """SQLite opens a missing or 0-byte list as a new, empty one; the reconciliation then deleted every
    segment file as an orphan, and the empty replica was served until its bootstrap check ran. The
    replica now refuses to open, and the files stay for an operator (or a bootstrap once the
    directory is removed)."""
    pid = new_partition_id()
    r = PartitionReplica(TABLE, pid, 3, tmp_path)
    r.append(versioned_rows(ingest([1, 2], ["a", "b"]), Gtid(1, 0)), 0)
    assert r.flush(1) is not None
    r.close()
    directory = replica_dir(tmp_path, pid, 3)
    files = sorted(p.name for p in directory.glob("*.parquet"))
    lost = segment_list_path(directory, pid, 3)
    for extra in directory.glob(lost.name + "-*"):
        extra.unlink()
    if damage == "emptied":
        lost.write_bytes(b"")
    else:
        lost.unlink()
    for _ in range(2):  # refused every time, not only the first
        with pytest.raises(SegmentListCorruptError, match="holds 1 segment files but its segment list"):
            PartitionReplica(TABLE, pid, 3, tmp_path)
    assert sorted(p.name for p in directory.glob("*.parquet")) == files and len(files) == 1
    empty_dir = PartitionReplica(TABLE, new_partition_id(), 3, tmp_path)  # no files, no list: a new replica
    assert empty_dir.empty
    empty_dir.close()


def test_a_segment_file_changed_into_other_valid_parquet_is_refused_on_first_read(tmp_path: Path) -> None:
    """Opening a replica checks only that its files exist. A file replaced by another valid Parquet
    file (here the bytes of the next segment, so the rows differ) was served as it was; the first scan
    of this process now hashes it against the record's sha256."""
    pid = new_partition_id()
    r = PartitionReplica(TABLE, pid, 3, tmp_path)
    r.append(versioned_rows(ingest([1, 2], ["a", "b"]), Gtid(1, 0)), 0)
    first = r.flush(1)
    r.append(versioned_rows(ingest([3], ["c"]), Gtid(1, 2)), 2)
    second = r.flush(1)
    assert first is not None and second is not None
    r.close()
    directory = replica_dir(tmp_path, pid, 3)
    original = segment_path(directory, first.segment_id).read_bytes()
    segment_path(directory, first.segment_id).write_bytes(segment_path(directory, second.segment_id).read_bytes())
    again = PartitionReplica(TABLE, pid, 3, tmp_path)
    with pytest.raises(SegmentChecksumError) as err:
        again.scan()
    assert err.value.segment_id == first.segment_id and err.value.expected == first.sha256
    with pytest.raises(SegmentChecksumError):
        again.scan(KeyFilter(key=1))  # refused every time, key scans too
    segment_path(directory, first.segment_id).write_bytes(original)
    assert again.scan().sort_by("k").column("k").to_pylist() == [1, 2, 3]  # the right bytes again: served
    again.close()
    fixed = PartitionReplica(TABLE, pid, 3, tmp_path)
    assert fixed.scan().sort_by("k").column("k").to_pylist() == [1, 2, 3]  # the right bytes again: served
    fixed.close()


def test_key_scans_read_only_the_row_groups_that_may_hold_the_key_and_agree_with_a_full_scan(
    tmp_path: Path,
) -> None:
    rnd = random.Random(7)
    r = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    keys = sorted({rnd.getrandbits(64) for _ in range(150_000)} - {0, 2**63, 2**64 - 1})
    keys = [*rnd.sample(keys, len(keys)), 0, 2**63, 2**64 - 1]  # distinct, in random order
    offset, seq = 0, 0
    for part in range(2):  # two segments of ~75,000 rows, then newer versions of some keys in the memtable
        chunk = keys[part::2]
        r.append(versioned_rows(ingest(chunk, [f"v{part}-{k % 1000}" for k in chunk]), Gtid(1, seq)), offset)
        offset, seq = offset + 1, seq + len(chunk)
        assert r.flush(1) is not None
    newer = rnd.sample(keys, 500)
    r.append(versioned_rows(ingest(newer[:250], ["new"] * 250), Gtid(1, seq)), offset)
    r.append(versioned_rows(ingest(newer[250:], [None] * 250, deleted=True), Gtid(1, seq + 250)), offset + 1)
    full = {row["k"]: row["v"] for row in r.scan().to_pylist()}
    assert len(full) == len(keys) - 250
    probes = [*rnd.sample(keys, 40), *newer[:5], *newer[250:255], 1, 2**64 - 2, 2**63 - 1, 2**63 + 1]
    for key in probes:
        got = r.scan(KeyFilter(key=key)).to_pylist()
        assert got == ([{"k": key, "v": full[key]}] if key in full else []), key
    for _ in range(10):
        low, high = sorted(rnd.sample(keys, 2))
        got = r.scan(KeyFilter(low=low, high=high)).sort_by("k").column("k").to_pylist()
        assert got == sorted(k for k in full if low <= k < high)
    # the pruning itself: a point read decodes one row group of each segment, not the files
    chain = r.chain
    sid = chain.root
    assert sid is not None
    whole = read_segment(r.directory, sid)
    assert read_segment_metadata(r.directory, sid).num_row_groups > 1
    near = read_segment_near(r.directory, sid, "k", low=probes[0], high=probes[0])
    assert 0 < near.num_rows <= ROW_GROUP_ROWS < whole.num_rows
    assert read_segment_near(r.directory, sid, "k", low=2**64 - 1, high=None).num_rows <= ROW_GROUP_ROWS
    # bounds the statistics cannot compare, and columns they do not prune, read the whole file
    assert read_segment_near(r.directory, sid, "k", low="a", high=None).num_rows == whole.num_rows
    assert read_segment_near(r.directory, sid, "v", low=1, high=1).num_rows == whole.num_rows
    assert read_segment_near(r.directory, sid, "k").num_rows == whole.num_rows
    r.close()


def test_validator_reasons() -> None:
    v = IngestValidator(TABLE, KeyRange((0).to_bytes(8, "big"), (100).to_bytes(8, "big")), max_bytes=4096)
    good = v.validate(encode_batch(ingest([1, 99], ["a", "b"])), [("shoal.table", b"events")])
    assert isinstance(good, pa.Table) and good.num_rows == 2

    def reason(value: bytes | None, headers: list[tuple[str, bytes]] | None = None) -> str:
        res = v.validate(value, headers)
        assert isinstance(res, Rejected)
        return res.reason

    assert reason(b"junk") == "undecodable"
    assert reason(None) == "undecodable"
    assert reason(encode_batch(pa.table({"k": pa.array([1], pa.int64())}))) == "schema_mismatch"
    assert reason(b"x" * 5000) == "oversized"
    assert reason(encode_batch(ingest([100], ["x"]))) == "key_out_of_range"
    assert reason(encode_batch(ingest([1], ["x"])), [("shoal.table", b"other")]) == "wrong_table"


def test_scan_request_ticket_validation() -> None:
    req = ScanRequest("events", None, low=1, high=9)
    assert ScanRequest.from_ticket(req.to_ticket()) == req
    system = ScanRequest("events", "ab" * 16, system=True)
    assert ScanRequest.from_ticket(system.to_ticket()) == system
    tombstones = ScanRequest("events", "ab" * 16, system=True, deleted=True)
    assert ScanRequest.from_ticket(tombstones.to_ticket()) == tombstones
    # ``deleted`` is sent only when asked for: a node from before it refuses unknown fields
    assert b"deleted" not in system.to_ticket() and b'"deleted": true' in tombstones.to_ticket()
    bad_tickets = (
        b'{"table": "t", "deleted": true}',  # tombstones only with their GTID columns
        b'{"table": "t", "system": true, "deleted": 1}',
        b"{",
        b'{"table": "../x"}',
        b'{"table": "t", "path": "/etc"}',
        b'{"table": "t", "key": [1]}',
        b'{"table": "t", "system": "yes"}',
    )
    for bad in bad_tickets:
        with pytest.raises((WireFormatError, SchemaError, ValueError)):
            ScanRequest.from_ticket(bad)


def test_flight_scan_roundtrip(tmp_path: Path) -> None:
    r = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    r.append(versioned_rows(ingest([1, 2], ["a", "b"]), Gtid(1, 0)), 0)
    r.append(versioned_rows(ingest([3], [None], deleted=True), Gtid(1, 2)), 1)
    server = ScanServer("grpc://127.0.0.1:0", lambda table, pid: [r] if table == "events" else [])
    try:
        loc = f"grpc://127.0.0.1:{server.port}"
        assert scan_remote(loc, ScanRequest("events", key=2)).to_pylist() == [{"k": 2, "v": "b"}]
        # with its GTID columns (``shoal verify``'s coverage check)
        versioned = scan_remote(loc, ScanRequest("events", key=2, system=True)).to_pylist()
        assert versioned == [{"k": 2, "v": "b", "_shoal_epoch": 1, "_shoal_seq": 1, "_shoal_deleted": False}]
        # tombstones only when asked for (``shoal verify``: a delete reaches an older write's GTID)
        assert scan_remote(loc, ScanRequest("events", key=3, system=True)).num_rows == 0
        deleted = scan_remote(loc, ScanRequest("events", key=3, system=True, deleted=True)).to_pylist()
        assert deleted == [{"k": 3, "v": None, "_shoal_epoch": 1, "_shoal_seq": 2, "_shoal_deleted": True}]
        with pytest.raises(Exception, match="no replica"):
            scan_remote(loc, ScanRequest("nope"))
    finally:
        server.shutdown()
        r.close()


def test_a_scan_hands_over_buffers_aligned_to_their_type(tmp_path: Path) -> None:
    """Flight delivers gRPC's buffers where they land; unaligned ones made every Acero join of a scan
    (``shoal verify``'s coverage check) print a warning on stderr. Scans read them aligned."""
    r = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    n = 200_000
    r.append(versioned_rows(ingest(list(range(n)), [f"v{i}" for i in range(n)]), Gtid(1, 0)), 0)
    server = ScanServer("grpc://127.0.0.1:0", lambda table, pid: [r])
    try:
        rows = scan_remote(f"grpc://127.0.0.1:{server.port}", ScanRequest("events", system=True))
    finally:
        server.shutdown()
        r.close()
    assert rows.num_rows == n
    unaligned = []
    for name, column in zip(rows.column_names, rows.columns, strict=True):
        width = 4 if pa.types.is_string(column.type) else max(column.type.bit_width // 8, 1)
        for chunk in column.chunks:
            buffers = chunk.buffers()[1:2]  # the values (fixed width) or offsets (strings) buffer
            unaligned += [name for b in buffers if b is not None and b.address % width]
    assert unaligned == []


def test_a_scan_with_tombstones_declares_the_value_columns_nullable(tmp_path: Path) -> None:
    """A tombstone has no values, whatever the table declares NOT NULL."""
    strict = TableDefinition(
        "events", (Column("k", ColumnType.UINT64, False), Column("n", ColumnType.INT64, False)), ("k",), "k", 1
    )
    r = PartitionReplica(strict, new_partition_id(), 1, tmp_path)
    schema = ingest_schema(strict.arrow_schema(), strict.primary_key)
    rows = pa.table(
        {"k": pa.array([1, 2], pa.uint64()), "n": pa.array([10, None], pa.int64()), "_shoal_deleted": [False, True]},
        schema=schema,
    )
    r.append(versioned_rows(rows, Gtid(1, 0)), 0)
    try:
        tables = [r.scan(include_system=True, include_deleted=True)]  # from the memtable
        assert r.flush(1) is not None
        tables.append(r.scan(include_system=True, include_deleted=True))  # from the segment
        for table in tables:
            table.validate(full=True)
            assert not table.schema.field("k").nullable and table.schema.field("n").nullable
            assert table.column("_shoal_deleted").to_pylist() == [False, True]
        assert r.scan().to_pylist() == [{"k": 1, "n": 10}]
    finally:
        r.close()


def test_an_ended_leader_terms_memtable_is_dropped(tmp_path: Path) -> None:
    """A handover keeps the process: the old term's memtable must not shadow the segments the next
    leader publishes (it adopted those rows) nor double with what a new term of this replica replays."""
    r = PartitionReplica(TABLE, new_partition_id(), 3, tmp_path)
    r.append(versioned_rows(ingest([1], ["a"]), Gtid(1, 0)), 0)
    assert r.flush(1) is not None
    r.append(versioned_rows(ingest([1, 2], ["a2", "b"]), Gtid(1, 1)), 1)  # accepted, not flushed
    assert r.drop_memtable() == 2
    assert r.memtable.start_offset == r.covered_end() == 1 and r.memtable.empty
    assert r.scan().to_pylist() == [{"k": 1, "v": "a"}]
    assert r.drop_memtable() == 0
    r.close()


def test_an_ended_leader_terms_memtable_stays_readable_from_the_overlay_until_a_segment_covers_it(
    tmp_path: Path,
) -> None:
    """A replica that follows after its term ended reads its accepted, unflushed rows until the
    next leader's adoption segment covers them (reads do not go back in time)."""
    pid = new_partition_id()
    r = PartitionReplica(TABLE, pid, 3, tmp_path)
    r.append(versioned_rows(ingest([1], ["a"]), Gtid(1, 0)), 0)
    assert r.flush(1) is not None
    r.append(versioned_rows(ingest([1, 2], ["a2", "b"]), Gtid(1, 1)), 1)  # accepted, not flushed
    r.append(versioned_rows(ingest([3], ["c"]), Gtid(1, 3)), 2)
    assert r.retire_memtable() == 3
    assert r.memtable.start_offset == r.covered_end() == 1 and r.memtable.empty
    assert r.overlay is not None and r.overlay.channels() == {(pid, 3)}
    assert sorted(r.scan().to_pylist(), key=lambda row: row["k"]) == [
        {"k": 1, "v": "a2"},
        {"k": 2, "v": "b"},
        {"k": 3, "v": "c"},
    ]
    assert r.overlay.drop_covered([WalRange(pid, 3, 1, 2)]) == 0  # the last record is not covered yet
    assert r.overlay.drop_covered([WalRange(pid, 3, 1, 3)]) == 2  # the adoption's segment covers it
    assert r.scan().to_pylist() == [{"k": 1, "v": "a"}]
    assert r.retire_memtable() == 0
    r.close()


def _major_of(r: PartitionReplica, rows: pa.Table, epoch: int) -> SegmentRecord:
    """A major on ``r``'s root holding ``rows`` (written as the compaction service writes one)."""
    sid = new_segment_id()
    written = write_segment(r.directory, sid, rows, key_columns=r.key_columns)
    entry = compaction_entry(r.chain, sid, placement_id=r.placement_id, epoch=epoch)
    return SegmentRecord(entry=entry, sha256=written.sha256, row_count=written.row_count, size_bytes=written.size_bytes)


def _as(like: pa.Table, rows: pa.Table) -> pa.Table:
    return pa.Table.from_arrays(rows.select(like.schema.names).columns, schema=like.schema)


def test_a_major_that_is_not_the_merge_of_what_it_replaces_is_refused(tmp_path: Path) -> None:
    """A compaction that lost a row, kept a stale version, dropped a delete or changed a value would
    lose data once the channels behind the major are truncated: the leader refuses it and nothing
    changes."""
    r = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    r.append(versioned_rows(ingest([1, 2, 3], ["a", "b", "c"]), Gtid(1, 0)), 0)
    r.flush(1)
    r.append(versioned_rows(ingest([2], ["b2"]), Gtid(1, 3)), 1)
    r.append(versioned_rows(ingest([3], [None], deleted=True), Gtid(1, 4)), 2)
    r.flush(1)
    r.append(versioned_rows(ingest([4], ["d"]), Gtid(1, 5)), 3)
    r.flush(1)
    replaced = r.chain.since_latest_major()
    merged = lww_merge([read_segment(r.directory, e.segment_id) for e in replaced], r.key_columns)
    root, scan = r.chain.root, r.scan().sort_by("k").to_pylist()
    k = merged.column("k").to_pylist()
    wrong = {
        "a lost row": merged.filter(pa.array([x != 4 for x in k])),
        "a stale version": pa.concat_tables(
            [
                merged.filter(pa.array([x != 2 for x in k])),
                _as(merged, read_segment(r.directory, replaced[0].segment_id).slice(1, 1)),
            ]
        ),
        "a dropped delete": merged.filter(pc.invert(merged.column("_shoal_deleted"))),
        "an invented row": pa.concat_tables(
            [merged, _as(merged, merged.slice(0, 1).set_column(0, "k", pa.array([9], pa.uint64())))]
        ),
        "a changed value": merged.set_column(
            merged.schema.get_field_index("v"), merged.schema.field("v"), pa.array(["a", "b2!", None, "d"])
        ),
    }
    for what, rows in wrong.items():
        record = _major_of(r, rows, 1)
        with pytest.raises(MajorContentError) as err:
            r.commit_major(record, leader_epoch=1)
        assert (err.value.missing, err.value.extra, err.value.changed) != (0, 0, 0), what
        assert r.chain.root == root and r.scan().sort_by("k").to_pylist() == scan, what
    good = _major_of(r, merged, 1)
    assert r.commit_major(good, leader_epoch=1).root == good.segment_id
    assert r.scan().sort_by("k").to_pylist() == scan == [{"k": 1, "v": "a"}, {"k": 2, "v": "b2"}, {"k": 4, "v": "d"}]
    r.close()


def test_a_stale_major_is_a_conflict_before_its_rows_are_read(tmp_path: Path) -> None:
    r = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    r.append(versioned_rows(ingest([1], ["a"]), Gtid(2, 0)), 0)
    r.flush(2)
    r.append(versioned_rows(ingest([2], ["b"]), Gtid(2, 1)), 1)
    r.flush(2)
    record = _major_of(r, read_segment(r.directory, r.chain.root), 1)  # wrong rows too, and epoch 1
    with pytest.raises(CompactionConflictError):
        r.commit_major(record, leader_epoch=2)
    r.close()


def _three_segments(tmp_path: Path) -> PartitionReplica:
    r = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    for i, (keys, values) in enumerate([([1, 2], ["a", "b"]), ([2], ["b2"]), ([3], ["c"])]):
        r.append(versioned_rows(ingest(keys, values), Gtid(1, 2 * i)), i)
        r.flush(1)
    return r


def test_a_major_of_the_right_versions_with_other_columns_or_coverage_is_refused(tmp_path: Path) -> None:
    """A major whose columns differ from the segments' (every later merge and scan would fail) or that
    claims WAL ranges the segments it replaces do not cover (the Tail would truncate records no
    segment holds) is refused, though its keys and versions are right."""
    r = _three_segments(tmp_path)
    replaced = r.chain.since_latest_major()
    merged = lww_merge([read_segment(r.directory, e.segment_id) for e in replaced], r.key_columns)
    v = merged.schema.get_field_index("v")
    wrong = {
        "a column more": (merged.append_column("extra", pa.array([1] * merged.num_rows)), "a column extra"),
        "a column less": (merged.drop_columns(["v"]), "no column v"),
        "another type": (
            merged.set_column(v, "v", pc.cast(merged.column("v"), pa.large_string())),
            "v is large_string",
        ),
    }
    for what, (rows, reason) in wrong.items():
        with pytest.raises(MajorContentError, match=reason):
            r.commit_major(_major_of(r, rows, 1), leader_epoch=1)
        assert r.chain.root == replaced[-1].segment_id, what
    record = _major_of(r, merged, 1)
    wider = WalRange(r.partition_id, 1, 0, 1000)
    with pytest.raises(MajorContentError, match=r"it covers #1\[0, 1000\); the segments it replaces cover #1\[0, 3\)"):
        r.commit_major(replace(record, entry=replace(record.entry, covered=(wider,))), leader_epoch=1)
    assert r.commit_major(record, leader_epoch=1).root == record.segment_id and r.covered_end() == 3
    r.close()


def test_a_major_is_not_committed_unchecked_when_a_segment_it_replaces_is_gone_here(tmp_path: Path) -> None:
    """A lost or corrupt local file cannot be checked against: the major is refused with
    ReplacedSegmentUnreadableError and nothing changes (unchecked, a major that lost rows would be
    the only copy once the channels are truncated). The file written again from its channel copy
    (restore_file: the segment list's sha256 and size, nothing else) lets the check run."""
    r = _three_segments(tmp_path)
    replaced = r.chain.since_latest_major()
    merged = lww_merge([read_segment(r.directory, e.segment_id) for e in replaced], r.key_columns)
    path = segment_path(r.directory, replaced[1].segment_id)
    good = path.read_bytes()
    path.unlink()
    record = _major_of(r, merged, 1)
    root = r.chain.root
    with pytest.raises(ReplacedSegmentUnreadableError) as err:
        r.commit_major(record, leader_epoch=1)
    assert err.value.segment_id == replaced[1].segment_id and r.chain.root == root
    with pytest.raises(ChecksumMismatchError):  # not its bytes: nothing written
        r.restore_file(replaced[1].segment_id, [good[:-1] + b"x"])
    assert not path.exists()
    with pytest.raises(KeyError):
        r.restore_file("ff" * 16, [good])
    r.restore_file(replaced[1].segment_id, [good[:100], good[100:]])
    assert r.commit_major(record, leader_epoch=1).root == record.segment_id
    assert r.scan().sort_by("k").to_pylist() == [{"k": 1, "v": "a"}, {"k": 2, "v": "b2"}, {"k": 3, "v": "c"}]
    r.close()
