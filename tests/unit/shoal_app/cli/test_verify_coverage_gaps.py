"""``shoal verify`` holds a WAL channel's Tail to the union of what segments cover of it, not to the
highest covered offset (DESIGN.md section 6): records in a gap below the highest covered offset that
the Tail passed are records no segment holds, lost whatever the replicas agree on.

A healthy channel has no gap: a leader's flushes cover its channel from where the last one ended, and
an adopting leader claims from where its read started, markers and aborted records included
(:mod:`storage_node.replication.adopt`).
"""

from __future__ import annotations

from test_verify_channels import verify_one_replica
from test_verify_coverage import _batch, _records, _segment
from test_verify_gtids import TOPICS, FakeChannels, _file, _manifest

from shoal.wire.records import Gtid
from shoal_app.cli.verify_gtids import SegmentsOrder, covered_run


def _order(topic: str, *ranges: tuple[int, int]) -> SegmentsOrder:
    return SegmentsOrder(covered={topic: list(ranges)})


def test_the_covered_run_stops_at_the_first_gap() -> None:
    assert covered_run([], "w") == 0
    assert covered_run([_order("w", (0, 4), (4, 9))], "w") == 9  # adjacent ranges join
    assert covered_run([_order("w", (0, 4), (5, 9))], "w") == 4  # offset 4 is in no segment
    assert covered_run([_order("w", (1, 9))], "w") == 0  # offset 0 is in no segment
    assert covered_run([_order("w", (0, 4)), _order("w", (3, 9))], "w") == 9  # overlapping, two channels
    assert covered_run([_order("w", (5, 9)), _order("w", (0, 5))], "w") == 9  # in any order
    assert covered_run([_order("x", (0, 9))], "w") == 0  # another WAL channel's coverage is not this one's
    assert _order("w", (0, 4), (5, 9)).covered_end("w") == 9


def test_a_tail_above_a_gap_in_what_segments_cover_is_a_mismatch() -> None:
    """Segments cover WAL offsets [0, 2) and [3, 6); the Tail is 5. The record at offset 2 was deleted
    though no segment held it (a wrong Tail, a hand-made delete_records, an adoption that skipped it):
    every replica misses it alike, and the highest covered offset (6) is above the Tail, so only the
    union can tell."""
    file = _file()
    pid = file.partitions[0].partition_id
    first, file0 = _segment(_manifest(pid, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 1)), is_major=False), [])
    later = _manifest(pid, 1, 1, (3, 6), (Gtid(1, 3), Gtid(1, 5)), segment_id="02" * 16, is_major=False)
    later, file1 = _segment(later, [])
    wal = _records(pid, 1, [(Gtid(1, 5), _batch([9], ["z"], [False]))], first_offset=5)
    files = {first.segment_id: file0, later.segment_id: file1}

    gapped = FakeChannels({TOPICS.wal(pid, 1): (5, wal)}, {TOPICS.segments(pid, 1): [first, later]}, files)
    report = verify_one_replica(gapped, file)
    assert not report.ok
    (check,) = report.partitions[0].wal_channels
    assert not check.ok
    assert "Tail 5 is above the first gap in what segments cover (2)" in (check.error or ""), check.error

    # the same channel whose gap a segment covers (the record flushed, or the offset a marker an
    # adoption claimed) agrees
    gap = _manifest(pid, 1, 1, (2, 3), (Gtid(1, 2), Gtid(1, 2)), segment_id="03" * 16, is_major=False)
    gap, files[gap.segment_id] = _segment(gap, [])
    whole = FakeChannels({TOPICS.wal(pid, 1): (5, wal)}, {TOPICS.segments(pid, 1): [first, gap, later]}, files)
    assert verify_one_replica(whole, file, seq=5).ok

    # a Tail at the gap's start lost nothing yet
    at_gap = _records(pid, 1, [(Gtid(1, s), _batch([9], ["z"], [False])) for s in range(2, 6)], first_offset=2)
    held = FakeChannels({TOPICS.wal(pid, 1): (2, at_gap)}, {TOPICS.segments(pid, 1): [first, later]}, files)
    report = verify_one_replica(held, file)
    (check,) = report.partitions[0].wal_channels
    assert check.ok, check.error


def test_a_wal_channel_that_ends_below_what_segments_cover_is_a_mismatch() -> None:
    """Segments cover offsets [0, 6) of the WAL channel, which now ends at 0: it was deleted and a
    leader created it again (empty), or it lost records; the writes not yet flushed when that
    happened are gone, and a Tail of 0 alone would pass."""
    file = _file()
    pid = file.partitions[0].partition_id
    seg, data = _segment(_manifest(pid, 1, 1, (0, 6), (Gtid(1, 0), Gtid(1, 5)), is_major=False), [])
    channels = FakeChannels({TOPICS.wal(pid, 1): (0, [])}, {TOPICS.segments(pid, 1): [seg]}, {seg.segment_id: data})
    report = verify_one_replica(channels, file)
    (check,) = report.partitions[0].wal_channels
    assert not report.ok and not check.ok
    assert "the channel ends at 0, below what segments cover of it (6)" in (check.error or ""), check.error
