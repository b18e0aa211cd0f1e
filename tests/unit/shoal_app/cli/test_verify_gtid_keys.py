"""``shoal verify``: GTIDs belong to one row each, scans hold no null key, METADATA is read once
(DESIGN.md sections 6 and 10).

Pure: WAL records with real Arrow payloads, segment files as a node writes them, replicas' scans,
through ``verify`` with fake channels.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pyarrow as pa
from test_verify_channels import _described
from test_verify_coverage import _batch, _records, _replica, _segment
from test_verify_gtids import TOPICS, FakeChannels, _client, _file, _manifest
from test_verify_retired import _described as _described_all
from test_verify_retired import _empty, _split

from shoal.wire.records import Gtid
from shoal_app.cli.verify import verify

FILE = _file()
PID = FILE.partitions[0].partition_id
WAL, SEG = TOPICS.wal(PID, 1), TOPICS.segments(PID, 1)
WRITES = _records(PID, 1, [(Gtid(1, 0), _batch([1], ["a"], [False])), (Gtid(1, 1), _batch([2], ["b"], [False]))])


def _run(channels: FakeChannels, scan: pa.Table, key_max: int, row_count: int) -> Any:
    described = {**_described(PID), "key_min": 1, "key_max": key_max, "row_count": row_count}
    return verify(
        _client(FILE),
        "events",
        channels=channels,
        describe=lambda _s: [described],
        rows=lambda _s, _p: scan,
        epoch=lambda _pid: (1, 1),
    )


def _flush(rows: list[tuple[int, str | None, int, int, bool]], declared: tuple[Gtid, Gtid]) -> FakeChannels:
    """The WAL's two writes (k=1 'a' at 1:0, k=2 'b' at 1:1) and a flush of them holding ``rows``."""
    segment, data = _segment(_manifest(PID, 1, 1, (0, 2), declared, is_major=False), rows)
    return FakeChannels({WAL: (0, WRITES)}, {SEG: [segment]}, {segment.segment_id: data})


def test_a_segment_row_at_another_writes_gtid_is_a_mismatch() -> None:
    """The flush of 1:0..1:1 also holds k=3 at 1:1, or a delete of k=1 at 1:1: the WAL record at 1:1
    wrote k=2. Every replica holds what the segment holds (the acknowledged k=1 'a' gone)."""
    channels = _flush([(1, "a", 1, 0, False), (2, "b", 1, 1, False), (3, "x", 1, 1, False)], (Gtid(1, 0), Gtid(1, 1)))
    report = _run(channels, _replica([(1, "a", 1, 0), (2, "b", 1, 1), (3, "x", 1, 1)]), 3, 3)
    error = report.partitions[0].coverage_error or ""
    assert not report.ok and "1 GTID(s) held by more than one key on the channels (gtid 1:1: k=2 and k=3)" in error

    channels = _flush([(1, None, 1, 1, True), (2, "b", 1, 1, False)], (Gtid(1, 0), Gtid(1, 1)))
    scan = _replica([(1, "", 1, 1), (2, "b", 1, 1)])
    scan = scan.set_column(scan.schema.get_field_index("v"), "v", pa.array([None, "b"], pa.string()))
    scan = scan.set_column(scan.schema.get_field_index("_shoal_deleted"), "_shoal_deleted", pa.array([True, False]))
    report = _run(channels, scan, 2, 1)
    assert not report.ok and "gtid 1:1: k=1 and k=2" in (report.partitions[0].coverage_error or "")

    healthy = _flush([(1, "a", 1, 0, False), (2, "b", 1, 1, False)], (Gtid(1, 0), Gtid(1, 1)))
    assert _run(healthy, _replica([(1, "a", 1, 0), (2, "b", 1, 1)]), 2, 2).ok


def test_a_segment_holding_rows_outside_its_declared_gtids_is_a_mismatch() -> None:
    """The GTID order checks trust a manifest's declared range; a file holding k=9 at 1:40 under a
    manifest of 1:0..1:1 is not that segment."""
    channels = _flush([(1, "a", 1, 0, False), (2, "b", 1, 1, False), (9, "x", 1, 40, False)], (Gtid(1, 0), Gtid(1, 1)))
    report = _run(channels, _replica([(1, "a", 1, 0), (2, "b", 1, 1), (9, "x", 1, 40)]), 9, 3)
    error = report.partitions[0].coverage_error or ""
    assert not report.ok and "its rows' GTIDs 1:0..1:40 lie outside its manifest's 1:0..1:1" in error, error


def test_a_scan_row_with_a_null_key_is_a_mismatch() -> None:
    """A node's lowest and highest key leave nulls out, so only the scan shows such a row."""
    scan = _replica([(1, "a", 1, 0), (2, "b", 1, 1)])
    scan = scan.set_column(scan.schema.get_field_index("k"), "k", pa.array([1, None], pa.uint64()))
    report = _run(FakeChannels({WAL: (0, WRITES[:1])}, {}), scan, 1, 2)
    error = report.partitions[0].coverage_error or ""
    assert not report.ok and "holds 1 row(s) with a null primary key column" in error, error


def test_metadata_is_read_once() -> None:
    """``current()`` answered before a SPLIT_FINALIZE and ``history()`` after: the children, one of
    which lost k=5 (on its WAL channel), are checked as the last version of the history lists them."""
    history = _split()
    splitting, final = history[1], history[-1]
    low = final.partitions[0].partition_id
    wal = _records(low, 2, [(Gtid(2, 0), _batch([5], ["x"], [False]))])
    channels = FakeChannels({TOPICS.wal(low, 2): (0, wal)}, {})
    client = SimpleNamespace(
        coordinator=SimpleNamespace(current=lambda _t: splitting, history=lambda _t: history),
        config=SimpleNamespace(topic_prefix="shoal", kafka=None),
    )
    described: dict[str, list[dict[str, Any]]] = {}
    for f in (splitting, final):
        for server, found in _described_all(f).items():
            described.setdefault(server, []).extend(
                {**d, "row_count": 0, "key_min": None, "key_max": None} for d in found
            )
    report = verify(
        client,
        "events",
        channels=channels,
        describe=lambda server: described[server],
        rows=lambda _s, _p: _empty(),
        epoch=lambda _pid: (2, 2),
    )
    assert [p.partition_id for p in report.partitions] == [e.partition_id for e in final.partitions]
    assert not report.ok and "misses 1 of 1 writes" in (report.partitions[0].coverage_error or "")


def test_a_segment_row_without_a_gtid_is_undecodable_not_a_traceback() -> None:
    from test_verify_coverage import TABLE

    from shoal_app.cli.verify_coverage import ChannelSegment, WalFloors

    manifest = _manifest(PID, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 9)), segment_id="cd" * 16)
    for rows in ([(1, "a", None, 0, False)], [(1, "a", 1, None, False)]):
        segment, data = _segment(manifest, rows)  # type: ignore[arg-type]
        floors = WalFloors(TABLE)
        floors.add_segment("segs", ChannelSegment(0, segment, data))
        assert floors.undecodable == [f"segment {'cd' * 16} at segs@0: 1 of its rows' GTID values are null"]
