"""``shoal verify`` while the Tail moves the channels it reads (DESIGN.md section 6), without servers.

The leader's Tail pass (``delete_records``) runs every few seconds on a healthy cluster, also right
when tests and users run verify after writes stop. A read that the Tail overtakes sees a prefix of
a channel: taken for the channel, it made a healthy cluster a mismatch (a hash chain checked from
genesis though its first records were gone, segments missing) or, worse, let a write every replica
lost pass (a WAL read that ended early, in silence, holding none of the writes). Readers now raise
ChannelTruncatedError instead of jumping to the end, and verify reads the partition's channels again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_verify_coverage import _batch, _records, _segment
from test_verify_gtids import TOPICS, FakeChannels, _client, _file, _manifest
from test_verify_segments import _Msg, _with_tombstones

import shoal.kafka.readers as readers
from shoal.kafka.errors import ChannelTruncatedError
from shoal.kafka.readers import ChannelRecord
from shoal.segments.channel import KIND_CHUNK, KIND_MANIFEST
from shoal.wire.records import Gtid, SegmentChunk
from shoal_app.cli import verify as verify_module
from shoal_app.cli.verify import CHANNEL_READS, verify

FILE = _file()
PID = FILE.partitions[0].partition_id
WAL = TOPICS.wal(PID, 1)
SEG = TOPICS.segments(PID, 1)
KEYS = [1, 2, 3, 4, 5, 6, 7, 8]


def wal_records() -> list[ChannelRecord]:
    """Key k written at GTID 1:(k-1) in its own record at offset k-1, chained from genesis."""
    return _records(PID, 1, [(Gtid(1, k - 1), _batch([k], [f"v{k}"], [False])) for k in KEYS])


def segment(sid: str, covered: tuple[int, int], *, major: bool = False) -> tuple[Any, bytes]:
    """A segment holding the writes at WAL offsets [covered): keys covered[0]+1 .. covered[1]."""
    keys = list(range(covered[0] + 1, covered[1] + 1))
    m = _manifest(PID, 1, 1, covered, (Gtid(1, keys[0] - 1), Gtid(1, keys[-1] - 1)), segment_id=sid, is_major=major)
    return _segment(m, [(k, f"v{k}", 1, k - 1, False) for k in keys])


def _rows(keys: list[int]) -> Any:
    return _with_tombstones([(k, f"v{k}", 1, k - 1, False) for k in keys])


def _described(rows: int) -> Any:
    return lambda _server: [
        {
            "partition_id": PID,
            "placement_id": 1,
            "row_count": rows,
            "key_min": 1,
            "key_max": 1,
            "content_hash": "h",
            "chain": ["s"],
            "root": "s",
        }
    ]


def _verify(channels: Any, keys: list[int] = KEYS) -> Any:
    return verify(
        _client(FILE), "events", channels=channels, describe=_described(len(keys)), rows=lambda _s, _p: _rows(keys)
    )


class MovingTail(FakeChannels):
    """The WAL Tail moves to ``new_tail`` right after verify read the channel's bounds for the
    ``after``-th time; records are read as read_wal_channel(exact_start=True) reads them: from
    ``start``, or ChannelTruncatedError when the log starts above it now."""

    def __init__(self, *args: Any, new_tail: int, after: int, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.new_tail, self.after, self.calls = new_tail, after, 0

    def bounds(self, topic: str) -> tuple[int, int] | None:
        out = super().bounds(topic)
        if topic == WAL:
            self.calls += 1
            if self.calls == self.after:
                _tail, records = self.wal[WAL]
                self.wal[WAL] = (self.new_tail, [r for r in records if r.offset >= self.new_tail])
        return out

    def wal_records(self, topic: str, start: int) -> Iterator[ChannelRecord]:
        low = self.wal[topic][0]
        if start < low:
            raise ChannelTruncatedError("WAL channel", topic, start)
        return (r for r in self.wal[topic][1] if r.offset >= start)


def test_the_first_truncation_between_the_bounds_and_the_read_is_no_broken_chain() -> None:
    """Bounds said Tail 0, the read began at 3: the first record read chains from one that is gone,
    not from genesis (was: HashChainError on a healthy channel)."""

    def run(new_tail: int, after: int) -> Any:
        seg, data = segment("01" * 16, (0, 4))
        channels = MovingTail(
            {WAL: (0, wal_records())}, {SEG: [seg]}, {seg.segment_id: data}, new_tail=new_tail, after=after
        )
        return _verify(channels)

    assert run(0, after=99).ok  # never truncated
    assert run(3, after=1).ok  # truncated before verify's first look
    report = run(3, after=2)  # between check_wal_channel's bounds (Tail 0) and its read: read again
    assert report.ok, report.partitions[0].wal_channels


def test_a_tail_that_moved_past_uncovered_records_between_the_bounds_and_the_read_is_seen() -> None:
    """Segments cover the WAL channel up to offset 2; records 2 and 3 were deleted (Tail 4) between
    verify reading the Tail (0) and reading the records. The read used to start at the new log start
    and the coverage check judged the channel by Tail 0: verify agreed. It reads again and sees the
    Tail above what segments cover."""
    seg, data = segment("01" * 16, (0, 2))
    channels = MovingTail({WAL: (0, wal_records())}, {SEG: [seg]}, {seg.segment_id: data}, new_tail=4, after=2)
    report = _verify(channels)
    assert not report.ok
    errors = [c.error for c in report.partitions[0].wal_channels]
    assert any("Tail 4 is above what segments cover of this channel (2)" in (e or "") for e in errors), errors


# one segments channel as a read-committed consumer sees it: manifest, chunk, commit marker per transaction
M1, M1_DATA = segment("01" * 16, (0, 3))
M2, M2_DATA = segment("02" * 16, (3, 6))
MAJOR, MAJOR_DATA = segment("0f" * 16, (0, 6), major=True)  # the compaction of m1 + m2
LOG = [
    _Msg(kind=KIND_MANIFEST, at=0, body=M1.to_bytes()),
    _Msg(kind=KIND_CHUNK, at=1, body=SegmentChunk(M1.segment_id, 0, 1, M1_DATA).to_bytes()),
    _Msg(kind=KIND_MANIFEST, at=3, body=M2.to_bytes()),
    _Msg(kind=KIND_CHUNK, at=4, body=SegmentChunk(M2.segment_id, 0, 1, M2_DATA).to_bytes()),
    _Msg(kind=KIND_MANIFEST, at=6, body=MAJOR.to_bytes()),
    _Msg(kind=KIND_CHUNK, at=7, body=SegmentChunk(MAJOR.segment_id, 0, 1, MAJOR_DATA).to_bytes()),
]
END, MAJOR_OFFSET = 9, 6


class SegmentsLog:
    """read_to_end over LOG; the Tail moves to the major before delivery number ``truncate_before``
    (counted over every read), or before each read's first delivery with ``every_read``; a fetch
    below the log start raises, as ``auto.offset.reset=error`` makes librdkafka do."""

    def __init__(self, truncate_before: int | None, *, every_read: bool = False) -> None:
        self.low, self.delivered, self.truncate_before, self.every_read, self.reads = (
            0,
            0,
            truncate_before,
            every_read,
            0,
        )

    def read_to_end(self, _settings: Any, topic: str, start: int, **_kw: Any) -> Iterator[Any]:
        self.reads += 1
        if self.every_read:
            self.low = 0  # a model, not a channel: each read starts below where the Tail moves next
        low, high = self.low, END
        pos = max(start, low)
        for m in (m for m in LOG if m.at >= pos):
            if self.delivered == self.truncate_before or self.every_read:
                self.low = MAJOR_OFFSET
            if m.at < self.low:
                raise ChannelTruncatedError("segments channel", topic, m.at)
            self.delivered += 1
            yield m
            if m.at + 1 >= high:
                return


class Channels(verify_module.KafkaChannels):
    """KafkaChannels reading its segments channel from SegmentsLog; the WAL channel is a fake whose
    Tail (5) the segments cover."""

    def __init__(self, log: SegmentsLog) -> None:
        self.kafka, self._topics, self.resume_s = None, None, 0.3
        self.fake = FakeChannels({WAL: (5, [r for r in wal_records() if r.offset >= 5])}, {SEG: []})
        self.log = log

    def bounds(self, topic: str) -> tuple[int, int] | None:
        return (self.log.low, END) if topic == SEG else self.fake.bounds(topic)

    def wal_records(self, topic: str, start: int) -> Any:
        return self.fake.wal_records(topic, start)


@pytest.mark.parametrize("truncate_before", [None, 0, 1, 2, 3])
def test_a_segments_channel_truncated_under_the_read_is_read_again(
    monkeypatch: pytest.MonkeyPatch, truncate_before: int | None
) -> None:
    """The Tail moved the channel up to the major before the first fetch, between a manifest and its
    chunk, or between two segments: the partition's channels are read again, from the major (was: a
    segment undecodable, or the WAL Tail above what the segments cover)."""
    log = SegmentsLog(truncate_before)
    monkeypatch.setattr(readers, "read_to_end", log.read_to_end)
    report = _verify(Channels(log))
    assert report.ok, report.partitions[0]
    assert log.reads == (1 if truncate_before is None else 2)


def test_a_channel_overtaken_in_every_read_is_an_error_not_an_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    log = SegmentsLog(None, every_read=True)
    monkeypatch.setattr(readers, "read_to_end", log.read_to_end)
    report = _verify(Channels(log))
    part = report.partitions[0]
    assert not report.ok and not part.gtids_ok and log.reads == CHANNEL_READS
    assert f"the Tail moved past offset 0 while it was read (in each of {CHANNEL_READS} reads" in (
        part.gtid_error or ""
    )


class OvertakenOnce(FakeChannels):
    """The first read of the WAL channel is overtaken by the Tail before its first fetch."""

    overtaken = False

    def wal_records(self, topic: str, start: int) -> Iterator[ChannelRecord]:
        if not self.overtaken:
            self.overtaken = True
            raise ChannelTruncatedError("WAL channel", topic, start)
        return super().wal_records(topic, start)


def test_a_wal_channel_truncated_under_the_read_still_shows_a_lost_write() -> None:
    """Every replica lost key 8, a write only the WAL channel holds. A read that ended early without
    an error held none of the writes, and verify agreed; the read again finds the write missing."""
    seg, data = segment("01" * 16, (0, 4))
    channels = OvertakenOnce(
        {WAL: (3, [r for r in wal_records() if r.offset >= 3])}, {SEG: [seg]}, {seg.segment_id: data}
    )
    report = _verify(channels, keys=KEYS[:-1])
    assert not report.ok and channels.overtaken
    assert "k=8 written at gtid 1:7, replica has no row" in (report.partitions[0].coverage_error or "")


def test_a_tail_pass_after_the_segments_read_makes_verify_read_again() -> None:
    """The leader publishes a segment covering WAL [2, 4) and moves the Tail to 4 after verify read
    the segments channels and before it reads the WAL: records [2, 4) are in neither read. Verify
    reads the channels again (and finds the write every replica lacks), never takes Tail 4."""
    file = _file()
    pid = file.partitions[0].partition_id
    wal, seg = TOPICS.wal(pid, 1), TOPICS.segments(pid, 1)
    recs = _records(pid, 1, [(Gtid(1, k - 1), _batch([k], [f"v{k}"], [False])) for k in (1, 2, 3, 4, 5)])
    s1, d1 = _segment(
        _manifest(pid, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 1)), segment_id="01" * 16, is_major=False),
        [(1, "v1", 1, 0, False), (2, "v2", 1, 1, False)],
    )
    s2, d2 = _segment(
        _manifest(pid, 1, 1, (2, 4), (Gtid(1, 2), Gtid(1, 3)), segment_id="02" * 16, is_major=False),
        [(3, "v3", 1, 2, False), (4, "v4", 1, 3, False)],
    )

    class TailPassDuringVerify(FakeChannels):
        segments_read = moved = False

        def segments(self, topic: str, *, data: bool) -> Any:
            self.segments_read = True
            return super().segments(topic, data=data)

        def bounds(self, topic: str) -> Any:
            if topic == wal and self.segments_read and not self.moved:
                self.moved = True  # the publisher: S2 published, then the Tail pass truncates to 4
                self.published[seg] = [s1, s2]
                self.files[s2.segment_id] = d2
                self.wal[wal] = (4, [r for r in self.wal[wal][1] if r.offset >= 4])
            return super().bounds(topic)

    # every replica lacks key 3 (written at WAL offset 2, GTID 1:2)
    replica = _with_tombstones(
        [(1, "v1", 1, 0, False), (2, "v2", 1, 1, False), (4, "v4", 1, 3, False), (5, "v5", 1, 4, False)]
    )
    channels = TailPassDuringVerify({wal: (2, [r for r in recs if r.offset >= 2])}, {seg: [s1]}, {s1.segment_id: d1})

    describe = _on_node_1(pid, rows=4)

    report = verify(_client(file), "events", channels=channels, describe=describe, rows=lambda _s, _p: replica)
    part = report.partitions[0]
    assert channels.moved and not report.ok
    assert not part.covered and "k=3 written at gtid 1:2" in (part.coverage_error or ""), part


def _on_node_1(pid: str, *, rows: int) -> Any:
    """A ``describe`` where node-1 holds placement 1 of ``pid`` with ``rows`` rows, and no other node any."""

    def describe(server: str) -> list[dict[str, Any]]:
        row = {"partition_id": pid, "placement_id": 1, "row_count": rows, "key_min": 1, "key_max": 1}
        return [{**row, "content_hash": "h", "chain": ["s"], "root": "s"}] if server == "node-1" else []

    return describe


def test_a_replica_holding_a_key_twice_is_a_mismatch() -> None:
    """Every replica serving key 1 twice agrees with the others and reaches every floor; its scan
    holding a key in two rows is the mismatch."""
    file = _file()
    pid = file.partitions[0].partition_id
    recs = _records(pid, 1, [(Gtid(1, 0), _batch([1], ["v1"], [False])), (Gtid(1, 1), _batch([2], ["v2"], [False]))])
    channels = FakeChannels({TOPICS.wal(pid, 1): (0, recs)}, {})

    describe = _on_node_1(pid, rows=3)

    for twice in ([(1, "v1", 1, 0, False)], [(1, "other", 1, 7, False)]):
        scan = _with_tombstones([(1, "v1", 1, 0, False), *twice, (2, "v2", 1, 1, False)])
        report = verify(_client(file), "events", channels=channels, describe=describe, rows=lambda _s, _p, t=scan: t)
        part = report.partitions[0]
        assert not report.ok and "holds 1 key(s) more than once" in (part.coverage_error or ""), part
    once = _with_tombstones([(1, "v1", 1, 0, False), (2, "v2", 1, 1, False)])
    assert verify(_client(file), "events", channels=channels, describe=describe, rows=lambda _s, _p: once).ok
    # no channel holds a row (never written, or every channel gone): the replicas are scanned all the same
    scan = _with_tombstones([(1, "v1", 1, 0, False), (1, "v1", 1, 0, False)])
    report = verify(_client(file), "events", channels=FakeChannels({}, {}), describe=describe, rows=lambda _s, _p: scan)
    assert not report.ok and "holds 1 key(s) more than once" in (report.partitions[0].coverage_error or "")
