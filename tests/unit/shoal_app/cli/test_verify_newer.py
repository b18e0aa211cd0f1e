"""``shoal verify``'s check of replica versions newer than the channels' (DESIGN.md section 6).

Pure: WAL records with real Arrow payloads, replicas' scans as a node returns them, through
``verify`` with fake channels (read again after the scans) and a fake ZooKeeper epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
from test_verify_channels import _described
from test_verify_coverage import _batch, _records, _replica, _segment
from test_verify_gtids import TOPICS, FakeChannels, _client, _file, _manifest

from metadata.zk_client import ZooKeeperUnavailableError
from shoal.kafka.readers import ChannelRecord
from shoal.wire.records import Gtid
from shoal_app.cli.verify import verify
from shoal_app.cli.verify_newer import newer_than_floors, unexplained

FILE = _file()
PID = FILE.partitions[0].partition_id
WAL = TOPICS.wal(PID, 1)


def _tomb(k: int, epoch: int, seq: int) -> pa.Table:
    """A scan holding only the tombstone of ``k`` at (epoch, seq)."""
    t = _replica([(k, "", epoch, seq)])
    t = t.set_column(t.schema.get_field_index("v"), "v", pa.array([None], pa.string()))
    return t.set_column(t.schema.get_field_index("_shoal_deleted"), "_shoal_deleted", pa.array([True]))


def _verify_scan(
    channels: FakeChannels,
    scan: Callable[[str, str], pa.Table],
    epoch: Callable[[str], tuple[int, int | None]] = lambda _pid: (1, 1),
    described: dict[str, Any] | None = None,
    **kw: Any,
) -> Any:
    """verify of the one partition, its replica scanned with ``scan`` (described with ``described``
    over the defaults: key_max 2), ``epoch`` its epoch in ZooKeeper and leading placement."""
    return verify(
        _client(FILE),
        "events",
        channels=channels,
        describe=lambda _s: [{**_described(PID), "key_max": 2, **(described or {})}],
        rows=scan,
        epoch=epoch,
        **kw,
    )


def _verify(channels: FakeChannels, rows: pa.Table, epoch: int = 1, leader: int | None = 1, **described: Any) -> Any:
    """verify of the one partition, its epoch in ZooKeeper ``epoch`` led by placement ``leader``."""
    return _verify_scan(channels, lambda _s, _p: rows, lambda _pid: (epoch, leader), {"key_max": 1, **described})


def _one_wal(*batches: tuple[Gtid, pa.Table]) -> FakeChannels:
    return FakeChannels({WAL: (0, _records(PID, 1, list(batches)))}, {})


NO_KEYS = {"row_count": 0, "key_min": None, "key_max": None}


def test_a_tombstone_with_an_epoch_no_leader_had_is_a_mismatch() -> None:
    """The acknowledged write k=1 'a' at 1:0 is the newest version on the channels; every replica
    holds a tombstone at 7:0, while ZooKeeper's epoch for the partition is 1: users read k=1 as gone."""
    channels = _one_wal((Gtid(1, 0), _batch([1], ["a"], [False])))
    report = _verify(channels, _tomb(1, 7, 0), **NO_KEYS)
    part = report.partitions[0]
    assert not report.ok and part.covered is False
    assert "with an epoch above the partition's epoch 1 in ZooKeeper" in (part.coverage_error or "")
    assert "k=1 at gtid 7:0" in (part.coverage_error or ""), part.coverage_error
    # other values at such a GTID alike
    report = _verify(channels, _replica([(1, "WRONG", 7, 0)]))
    assert not report.ok and "epoch above the partition's epoch 1" in (report.partitions[0].coverage_error or "")
    # epoch 7 was given out to placement 2, whose channels are gone (deleted by its UNLOAD_FINAL
    # after it left): what it wrote is on no channel any more, so not checked
    assert _verify(channels, _tomb(1, 7, 0), epoch=7, leader=2, **NO_KEYS).ok
    # while the leader of epoch 7 has its WAL channel, whatever it wrote is on its channels
    report = _verify(channels, _tomb(1, 7, 0), epoch=7, leader=1, **NO_KEYS)
    assert not report.ok and "k=1: a delete at gtid 7:0, no channel holds that gtid" in (
        report.partitions[0].coverage_error or ""
    ), report.partitions[0].coverage_error


def test_an_epoch_that_cannot_be_read_is_a_named_problem() -> None:
    def unreachable(_pid: str) -> int:
        raise ZooKeeperUnavailableError("read epoch: connection lost")

    channels = _one_wal((Gtid(1, 0), _batch([1], ["a"], [False])))
    report = _verify_scan(channels, lambda _s, _p: _tomb(1, 7, 0), unreachable, NO_KEYS)
    error = report.partitions[0].coverage_error or ""
    assert (
        not report.ok and "the partition's epoch in ZooKeeper could not be read: ZooKeeperUnavailableError" in error
    ), error


def test_a_version_at_a_gtid_its_wal_channel_does_not_hold_is_a_mismatch() -> None:
    """Epoch 1's WAL channel holds every GTID of epoch 1 from 1:0: a replica version at 1:5 that no
    record holds (above everything read) or at 1:1, a GTID another key's record holds, was never
    written, whatever the replicas agree on."""
    channels = _one_wal((Gtid(1, 0), _batch([1], ["a"], [False])), (Gtid(1, 1), _batch([2], ["b"], [False])))
    held = _replica([(1, "a", 1, 0), (2, "b", 1, 1)])
    assert _verify(channels, held, key_max=2).ok
    for phantom, gtid in ((_tomb(1, 1, 5), "1:5"), (_tomb(1, 1, 1), "1:1"), (_replica([(1, "x", 1, 5)]), "1:5")):
        rows = pa.concat_tables([phantom, held.slice(1)], promote_options="permissive")
        report = _verify(channels, rows, key_max=2)
        error = report.partitions[0].coverage_error or ""
        assert not report.ok and "newer than the channels' that the channels should hold" in error, error
        assert f"k=1: a {'delete' if phantom['_shoal_deleted'][0].as_py() else 'row'} at gtid {gtid}" in error
        assert "no channel holds that gtid" in error


def _grown_before_scan(first: list[ChannelRecord], later: list[ChannelRecord], rows: pa.Table, **kw: Any) -> Any:
    """verify over a WAL channel holding ``first`` that gets ``later`` right before the replica is
    scanned (a write committed during verify, after the channel was read)."""
    channels = FakeChannels({WAL: (0, first)}, {})

    def scan(_server: str, _partition: str) -> pa.Table:
        channels.wal[WAL] = (0, [*first, *later])
        return rows

    return _verify_scan(channels, scan, lambda _pid: (kw.get("epoch", 1), 1))


def test_a_write_that_lands_after_the_channels_were_read_passes() -> None:
    """k=2 written at 1:1 after verify read the channel, before it scanned the replica: the second
    read holds it, at its GTID with its values. A different row there is a mismatch."""
    batches = [(Gtid(1, 0), _batch([1], ["a"], [False])), (Gtid(1, 1), _batch([2], ["b"], [False]))]
    records = _records(PID, 1, batches)
    held = _replica([(1, "a", 1, 0), (2, "b", 1, 1)])
    assert _grown_before_scan(records[:1], records[1:], held).ok
    other = _replica([(1, "a", 1, 0), (2, "c", 1, 1)])
    report = _grown_before_scan(records[:1], records[1:], other)
    error = report.partitions[0].coverage_error or ""
    assert not report.ok and "k=2: a row at gtid 1:1, the channels hold another row at that gtid" in error, error
    # a new leader's first write (epoch 2) after the read: its channel is read the second time too
    new = _records(PID, 1, [*batches[:1], (Gtid(2, 0), _batch([2], ["b"], [False]))])
    report = _grown_before_scan(new[:1], new[1:], _replica([(1, "a", 1, 0), (2, "b", 2, 0)]), epoch=2)
    assert report.ok, report.partitions[0].coverage_error


def test_a_version_replaced_on_the_channels_after_the_scan_is_explained() -> None:
    """The scan's k=1 at 1:3 is not on the channels any more (a major kept its newer 1:4): explained;
    a version the channels hold nothing newer of is not."""
    keys = ["k"]
    scan = _replica([(1, "a", 1, 3)])
    newer = _replica([(1, "b", 1, 4)]).append_column("_shoal_deleted", pa.array([False]))
    empty = newer.slice(0, 0)
    assert unexplained(scan, empty, newer, keys)[0] == 0
    count, examples = unexplained(scan, empty, None, keys)
    assert count == 1 and examples == ["k=1: a row at gtid 1:3, no channel holds that gtid"]


def test_only_versions_above_their_keys_newest_on_the_channels_are_looked_at() -> None:
    floors = _replica([(1, "a", 1, 0), (2, "b", 1, 5)])
    scan = _replica([(1, "a", 1, 0), (2, "b", 1, 7), (3, "c", 0, 1)])
    assert newer_than_floors(scan, floors, ["k"]).column("k").to_pylist() == [2, 3]
    assert newer_than_floors(scan, None, ["k"]).num_rows == 3


def test_what_the_second_read_finds_wrong_is_reported() -> None:
    """k=2 'b' written at 1:1 after the first read, and a segment published before the scan holding
    k=2 at 1:1 as 'c', which every replica holds: the second read holds one key at one GTID with two
    rows, a mismatch as it is in a first read."""
    batches = [(Gtid(1, 0), _batch([1], ["a"], [False])), (Gtid(1, 1), _batch([2], ["b"], [False]))]
    records = _records(PID, 1, batches)
    manifest = _manifest(PID, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 1)), segment_id="cd" * 16)
    manifest, data = _segment(manifest, [(1, "a", 1, 0, False), (2, "c", 1, 1, False)])
    channels = FakeChannels({WAL: (0, records[:1])}, {}, {manifest.segment_id: data})

    def scan(_server: str, _partition: str) -> pa.Table:
        channels.wal[WAL] = (0, records)
        channels.published[TOPICS.segments(PID, 1)] = [manifest]
        return _replica([(1, "a", 1, 0), (2, "c", 1, 1)])

    report = _verify_scan(channels, scan)
    error = report.partitions[0].coverage_error or ""
    assert not report.ok and "read again after the scans: 1 key(s) held at the same GTID with different rows" in error


def test_a_newer_write_does_not_excuse_a_version_whose_record_was_read() -> None:
    """The WAL holds k=1 at 1:0 and k=2 at 1:1; every replica holds a tombstone of k=1 at 1:1, and k=1
    is written again at 1:2 after the scan: the record at 1:1 was read and holds k=2 only."""
    batches = [
        (Gtid(1, 0), _batch([1], ["a"], [False])),
        (Gtid(1, 1), _batch([2], ["b"], [False])),
        (Gtid(1, 2), _batch([1], ["z"], [False])),
    ]
    records = _records(PID, 1, batches)
    rows = pa.concat_tables([_tomb(1, 1, 1), _replica([(2, "b", 1, 1)])], promote_options="permissive")
    report = _grown_before_scan(records[:2], records[2:], rows)
    error = report.partitions[0].coverage_error or ""
    assert not report.ok and "k=1: a delete at gtid 1:1, no channel holds that gtid" in error, error


def test_channels_deleted_between_the_reads_after_a_metadata_change_are_not_judged() -> None:
    """k=2 written at 1:1 after the first read; then a split finalized and the parent's UNLOAD_FINAL
    deleted its channels before the second read: the version is on the children's channels now.
    With METADATA moved on, verify says so (verify again) instead of calling the version a phantom."""
    records = _records(PID, 1, [(Gtid(1, 0), _batch([1], ["a"], [False])), (Gtid(1, 1), _batch([2], ["b"], [False]))])

    def run(moved: bool) -> Any:
        channels = FakeChannels({WAL: (0, records[:1])}, {})

        def scan(_server: str, _partition: str) -> pa.Table:
            channels.wal[WAL] = (0, records)
            rows = _replica([(1, "a", 1, 0), (2, "b", 1, 1)])
            del channels.wal[WAL]
            return rows

        return _verify_scan(channels, scan, metadata_moved=lambda: moved)

    report = run(moved=True)
    error = report.partitions[0].coverage_error or ""
    assert not report.ok and "METADATA changed while verify read the channels again" in error, error
    assert "no channel holds that gtid" not in error
    # the same deletion with METADATA unchanged is a channel lost under a listed partition
    assert "no channel holds that gtid" in (run(moved=False).partitions[0].coverage_error or "")


def test_a_version_at_the_current_epoch_is_judged_when_its_wal_channel_is_empty() -> None:
    """The leader (placement 1, ZooKeeper's epoch 1) flushed k=1 at 1:0 and k=2 at 1:9 and its Tail
    emptied its WAL channel: no record accounts for epoch 1, yet whatever it wrote is on its
    channels, so every replica's tombstone of k=1 at 1:5 (below everything read) is a phantom."""
    manifest = _manifest(PID, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 9)), segment_id="cd" * 16)
    manifest, data = _segment(manifest, [(1, "a", 1, 0, False), (2, "b", 1, 9, False)])
    channels = FakeChannels({WAL: (2, [])}, {TOPICS.segments(PID, 1): [manifest]}, {manifest.segment_id: data})
    healthy = _replica([(1, "a", 1, 0), (2, "b", 1, 9)])
    assert _verify(channels, healthy, key_max=2).ok
    phantom = pa.concat_tables([_tomb(1, 1, 5), healthy.slice(1)], promote_options="permissive")
    report = _verify(channels, phantom, key_max=2)
    assert not report.ok and "k=1: a delete at gtid 1:5, no channel holds that gtid" in (
        report.partitions[0].coverage_error or ""
    ), report.partitions[0].coverage_error
    # another leader now (placement 2, whose channels are gone): epoch 1 is still judged, as an epoch
    # placement 1's own flushes hold (its WAL channel exists: every write of epoch 1 is on its channels)
    assert not _verify(channels, phantom, leader=2, key_max=2).ok


def test_a_replica_row_with_a_null_gtid_is_a_mismatch() -> None:
    """A row no leader stamped (null ``_shoal_epoch``/``_shoal_seq``, e.g. a segment file written
    without its GTID values) at a key no channel holds: every GTID comparison skips a null, so it
    passed; the same phantom at a GTID is caught by the newer-version check."""
    file = _file()
    pid = file.partitions[0].partition_id
    channels = FakeChannels(
        {TOPICS.wal(pid, 1): (0, _records(pid, 1, [(Gtid(1, 0), _batch([1], ["a"], [False]))]))}, {}
    )
    ghost = _replica([(2, "ghost", 0, 0)])
    for column in ("_shoal_epoch", "_shoal_seq"):
        ghost = ghost.set_column(ghost.schema.get_field_index(column), column, pa.array([None], pa.uint64()))
    scan = pa.concat_tables([_replica([(1, "a", 1, 0)]), ghost])
    report = verify(
        _client(file),
        "events",
        channels=channels,
        describe=lambda _s: [{**_described(pid), "row_count": 2, "key_min": 1, "key_max": 2}],
        rows=lambda _s, _p: scan,
        epoch=lambda _pid: (1, 1),
    )
    assert not report.ok
    (part,) = report.partitions
    assert part.covered is False and "null GTID" in (part.coverage_error or ""), part
