"""``shoal verify``'s coverage check: replicas that agree on the wrong rows are a mismatch (DESIGN.md section 6).

Pure: WAL records with real Arrow payloads, replicas' rows built as the node's scan returns them
(GTID columns, tombstones hidden), through ``verify`` with fake channels and fake replicas.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_verify_gtids import TABLE, TOPICS, FakeChannels, _client, _file

from shoal.kafka.readers import ChannelRecord
from shoal.segments.merge import same_kind
from shoal.segments.versioned import stamp
from shoal.wire.arrow_ipc import encode_batch
from shoal.wire.ingest import DELETED_COLUMN, ingest_schema
from shoal.wire.records import GENESIS_HASH, Gtid, WalRecord
from shoal.wire.records import ManifestRecord as WireManifest
from shoal_app.cli.models import ReplicaDescription
from shoal_app.cli.verify import verify
from shoal_app.cli.verify_coverage import ReplicaTypeError, WalFloors, missing_writes, replicas_missing

SCHEMA = ingest_schema(TABLE.arrow_schema(), TABLE.primary_key)


def _batch(keys: list[int], values: list[str | None], deleted: list[bool]) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.uint64()), "v": values, DELETED_COLUMN: deleted}, schema=SCHEMA)


def _records(
    pid: str, placement: int, batches: list[tuple[Gtid, pa.Table]], first_offset: int = 0
) -> list[ChannelRecord]:
    out, prev = [], GENESIS_HASH
    for i, (gtid, rows) in enumerate(batches):
        rec = WalRecord.create(
            partition_id=pid,
            placement_id=placement,
            gtid=gtid,
            row_count=rows.num_rows,
            payload=encode_batch(rows),
            prev_hash=prev,
        )
        out.append(ChannelRecord(first_offset + i, rec))
        prev = rec.hash
    return out


def _replica(rows: list[tuple[int, str, int, int]]) -> pa.Table:
    """A scan with system columns: (k, v, epoch, seq) per live row."""
    table = pa.table({"k": pa.array([r[0] for r in rows], pa.uint64()), "v": [r[1] for r in rows]})
    stamped = stamp(table, epoch=0, first_seq=0)
    return stamped.set_column(
        stamped.schema.get_field_index("_shoal_epoch"), "_shoal_epoch", pa.array([r[2] for r in rows], pa.uint64())
    ).set_column(
        stamped.schema.get_field_index("_shoal_seq"), "_shoal_seq", pa.array([r[3] for r in rows], pa.uint64())
    )


def _segment(manifest: WireManifest, rows: list[tuple[int, str | None, int, int, bool]]) -> tuple[WireManifest, bytes]:
    """A segment file of versioned rows (k, v, epoch, seq, deleted) as a node writes it, and
    ``manifest`` with that file's sha256, size and row count."""
    table = pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.uint64()),
            "v": pa.array([r[1] for r in rows], pa.string()),
            "_shoal_epoch": pa.array([r[2] for r in rows], pa.int64()),
            "_shoal_seq": pa.array([r[3] for r in rows], pa.int64()),
            "_shoal_deleted": pa.array([r[4] for r in rows], pa.bool_()),
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    data = sink.getvalue().to_pybytes()
    checksum = hashlib.sha256(data).hexdigest()
    return replace(manifest, checksum=checksum, size_bytes=len(data), row_count=len(rows)), data


def _floors(pid: str, batches: list[tuple[Gtid, pa.Table]]) -> pa.Table:
    floors = WalFloors(TABLE)
    for item in floors.tap("wal", _records(pid, 1, batches)):
        assert item.record.row_count > 0
    newest = floors.floors()
    assert newest is not None
    return newest


def test_floors_keep_the_newest_version_per_key_and_missing_writes_compares_gtids() -> None:
    pid = _file().partitions[0].partition_id
    floors = _floors(
        pid,
        [
            (Gtid(1, 0), _batch([1, 2, 3], ["a", "b", "c"], [False, False, False])),
            (Gtid(1, 3), _batch([2, 4], [None, "d"], [True, False])),  # key 2 deleted at 1:3
        ],
    )
    assert floors.num_rows == 4
    good = _replica([(1, "a", 1, 0), (3, "c", 1, 2), (4, "d", 1, 4)])
    assert missing_writes(floors, good, ["k"]) == (0, [])
    # a newer version of a key (from a channel already truncated) reaches its floor
    assert missing_writes(floors, _replica([(1, "z", 2, 0), (3, "c", 1, 2), (4, "d", 1, 4)]), ["k"])[0] == 0
    # a lost write, an older version kept, and a delete undone are each one miss
    count, examples = missing_writes(floors, _replica([(1, "a", 1, 0), (3, "c", 0, 9)]), ["k"])
    assert count == 2, examples
    assert any("k=4 written at gtid 1:4, replica has no row" in e for e in examples), examples
    assert any("k=3 written at gtid 1:2, replica has gtid 0:9" in e for e in examples), examples
    count, examples = missing_writes(
        floors, _replica([(1, "a", 1, 0), (3, "c", 1, 2), (4, "d", 1, 4), (2, "b", 1, 1)]), ["k"]
    )
    assert count == 1 and "k=2 deleted at gtid 1:3" in examples[0], examples
    # a row written again after the delete is fine
    rewritten = _replica([(1, "a", 1, 0), (2, "b2", 1, 7), (3, "c", 1, 2), (4, "d", 1, 4)])
    assert missing_writes(floors, rewritten, ["k"])[0] == 0


def test_a_row_at_the_right_gtid_with_other_values_is_a_miss() -> None:
    """Replicas that all hold a key at the GTID the WAL wrote it with, but with other values (a
    compaction that stamped an older version's values with the newest GTID), miss that write."""
    pid = _file().partitions[0].partition_id
    floors = _floors(
        pid,
        [
            (Gtid(1, 0), _batch([1, 2, 3], ["a", None, "c"], [False, False, False])),
            (Gtid(1, 3), _batch([1], ["a2"], [False])),
        ],
    )
    assert missing_writes(floors, _replica([(1, "a2", 1, 3), (2, None, 1, 1), (3, "c", 1, 2)]), ["k"]) == (0, [])
    count, examples = missing_writes(floors, _replica([(1, "a", 1, 3), (2, "", 1, 1), (3, None, 1, 2)]), ["k"])
    assert count == 3, examples
    assert "k=1 written at gtid 1:3, replica has other values at that gtid: v='a' (channel 'a2')" in examples[0]
    # a newer GTID may hold other values: a later write on a channel already truncated
    assert missing_writes(floors, _replica([(1, "z", 2, 0), (2, "y", 2, 1), (3, "x", 2, 2)]), ["k"]) == (0, [])


def test_a_replica_column_of_another_kind_is_a_mismatch_not_a_cast() -> None:
    """A replica whose scan holds a column as another kind of value (integers where the table has
    strings) is not compared after a cast (``1`` would pass for ``"1"``), and a value the channel's
    type cannot hold (a cast that fails) is a problem named for the replica, not a traceback."""
    pid = _file().partitions[0].partition_id
    floors = _floors(pid, [(Gtid(1, 0), _batch([1, 2], ["1", "2"], [False, False]))])
    good = _replica([(1, "1", 1, 0), (2, "2", 1, 1)])
    as_ints = good.set_column(good.schema.get_field_index("v"), "v", pa.array([1, 2], pa.int64()))
    with pytest.raises(ReplicaTypeError) as caught:
        missing_writes(floors, as_ints, ["k"])
    assert caught.value.column == "v" and caught.value.replica_type == pa.int64()
    described = [
        ReplicaDescription.model_validate(
            {
                "server_id": "node-1",
                "placement_id": 1,
                "partition_id": pid,
                "root": None,
                "chain": [],
                "row_count": 2,
                "content_hash": "h",
            }
        )
    ]
    (problem,) = replicas_missing(floors, described, lambda _s, _p: as_ints, ["k"])
    assert problem == "node-1#1: its scan holds column 'v' as int64, the channels as string", problem
    # a large string or a dictionary is the same kind; a timestamp of another unit compares after a cast
    large = good.set_column(good.schema.get_field_index("v"), "v", pa.array(["1", "2"], pa.large_string()))
    assert missing_writes(floors, large, ["k"]) == (0, [])
    assert same_kind(pa.timestamp("us"), pa.timestamp("ns"))
    assert same_kind(pa.string(), pa.dictionary(pa.int32(), pa.string()))
    assert not same_kind(pa.string(), pa.int64()) and not same_kind(pa.timestamp("us"), pa.int64())


def test_a_replica_value_the_channel_type_cannot_hold_is_a_mismatch() -> None:
    """A cast that fails (a negative integer where the table has unsigned ones) names the replica."""
    pid = _file().partitions[0].partition_id
    floors = _floors(pid, [(Gtid(1, 0), _batch([1], ["a"], [False]))])
    replica = _replica([(1, "a", 1, 0)])
    signed = replica.set_column(replica.schema.get_field_index("k"), "k", pa.array([-1], pa.int64()))
    with pytest.raises(ReplicaTypeError):
        missing_writes(floors, signed, ["k"])


def test_floating_point_values_compare_nan_and_null() -> None:
    keys = pa.array([1, 2, 3, 4], pa.uint64())
    floors = pa.table(
        {
            "k": keys,
            "x": pa.array([float("nan"), None, 1.5, 2.0], pa.float64()),
            "_shoal_epoch": pa.array([1] * 4, pa.uint64()),
            "_shoal_seq": pa.array([0, 1, 2, 3], pa.uint64()),
            "_shoal_deleted": [False] * 4,
        }
    )
    same = floors.drop_columns(["_shoal_deleted"])
    assert missing_writes(floors, same, ["k"]) == (0, [])
    other = same.set_column(1, "x", pa.array([1.0, 0.0, None, 2.0], pa.float64()))
    assert missing_writes(floors, other, ["k"])[0] == 3


def test_floating_point_values_compare_by_their_bits() -> None:
    """A replica that holds -0.0 where the channel wrote 0.0, or another NaN, holds another value."""
    nan = float(np.array([0x7FF8000000000000], np.uint64).view(np.float64)[0])
    other_nan = float(np.array([0x7FF8000000000001], np.uint64).view(np.float64)[0])
    floors = pa.table(
        {
            "k": pa.array([1, 2, 3], pa.uint64()),
            "x": pa.array([0.0, nan, -0.0], pa.float64()),
            "_shoal_epoch": pa.array([1] * 3, pa.uint64()),
            "_shoal_seq": pa.array([0, 1, 2], pa.uint64()),
            "_shoal_deleted": [False] * 3,
        }
    )
    same = floors.drop_columns(["_shoal_deleted"])
    assert missing_writes(floors, same, ["k"]) == (0, [])
    other = same.set_column(1, "x", pa.array([-0.0, other_nan, 0.0], pa.float64()))
    count, examples = missing_writes(floors, other, ["k"])
    assert count == 3, examples
    assert "other values at that gtid: x=-0.0 (channel 0.0)" in examples[0]
    assert "x=nan(0x7ff8000000000001) (channel nan(0x7ff8000000000000))" in examples[1]


def test_verify_says_mismatch_when_agreeing_replicas_miss_a_wal_write() -> None:
    file = _file()
    pid = file.partitions[0].partition_id
    wal = _records(pid, 1, [(Gtid(1, 0), _batch([1, 2], ["a", "b"], [False, False]))])
    channels = FakeChannels({TOPICS.wal(pid, 1): (0, wal)}, {})
    described = [
        {
            "partition_id": pid,
            "placement_id": 1,
            "row_count": 1,
            "key_min": 1,
            "key_max": 1,
            "content_hash": "h",
            "chain": [],
            "root": None,
        }
    ]

    def run(rows: pa.Table) -> dict[str, Any]:
        report = verify(
            _client(file), "events", channels=channels, describe=lambda _s: described, rows=lambda _s, _p: rows
        )
        part: dict[str, Any] = report.to_json()["partitions"][0]
        assert report.ok == part["covered"]
        return part

    part = run(_replica([(1, "a", 1, 0)]))
    assert part["agree"] and part["wal_chains_ok"] and part["covered"] is False
    assert "node-1#1 misses 1 of 2 writes on the channels" in part["coverage_error"], part["coverage_error"]
    assert run(_replica([(1, "a", 1, 0), (2, "b", 1, 1)]))["covered"] is True
    # without a way to read rows the check is not run (and says so)
    report = verify(_client(file), "events", channels=channels, describe=lambda _s: described)
    assert report.ok and report.partitions[0].covered is None


def test_an_undecodable_wal_record_is_reported_not_passed() -> None:
    file = _file()
    pid = file.partitions[0].partition_id
    bad = WalRecord.create(partition_id=pid, placement_id=1, gtid=Gtid(1, 0), row_count=2, payload=b"not arrow")
    channels = FakeChannels({TOPICS.wal(pid, 1): (0, [ChannelRecord(0, bad)])}, {})
    described = [
        {"partition_id": pid, "placement_id": 1, "row_count": 0, "content_hash": "h", "chain": [], "root": None}
    ]
    report = verify(
        _client(file), "events", channels=channels, describe=lambda _s: described, rows=lambda _s, _p: _replica([])
    )
    part = report.partitions[0]
    assert not report.ok and part.covered is False and "undecodable WAL record" in (part.coverage_error or "")
