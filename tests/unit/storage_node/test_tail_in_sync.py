"""Tail and the in-sync set, pure parts (DESIGN.md section 6; storage_node.replication.tail)."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from metadata.errors import MetadataDecodeError
from metadata.in_sync import InSyncRecord, prefer_in_sync
from shoal.errors import ConfigError
from shoal.ids import new_partition_id
from shoal.kafka.settings import TopicPolicy
from shoal.segments import WalRange
from storage_node.config import ReplicaLagPolicy
from storage_node.replication.tail import (
    ChainSegment,
    InSyncKeeper,
    ReplicaLag,
    decide_orphan_tail,
    decide_tail,
    lag_bytes,
)

PID = new_partition_id()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_out_of_sync_replicas_do_not_hold_the_tail() -> None:
    common = {"wal_tail": 0, "own_covered_end": 50, "segments_tail": 0, "major_offsets": [0, 12, 26]}
    # peer 2 (ack 5 / never acked the segments channel) is out of sync: only peer 1 counts
    d = decide_tail(wal_acks=[40, 5], segments_acks=[30, None], in_sync=[True, False], **common)  # type: ignore[arg-type]
    assert (d.wal_tail, d.segments_tail, d.segments_acks) == (40, 26, (30,))
    # both in sync: the lagging one holds both channels
    d = decide_tail(wal_acks=[40, 5], segments_acks=[30, None], in_sync=[True, True], **common)  # type: ignore[arg-type]
    assert (d.wal_tail, d.segments_tail) == (5, None)
    # an in-sync replica without an Ack still holds the Tail
    d = decide_tail(wal_acks=[None, 45], segments_acks=[30, 30], in_sync=[True, False], **common)  # type: ignore[arg-type]
    assert d.wal_tail is None


def test_no_in_sync_peer_follows_the_own_coverage_and_the_latest_major() -> None:
    # replication factor 1: no peers at all
    d = decide_tail(
        wal_tail=3, wal_acks=[], own_covered_end=20, segments_tail=0, segments_acks=[], major_offsets=[0, 9]
    )
    assert (d.wal_tail, d.segments_tail) == (20, 9)
    # every peer out of sync: the same, never past the own covered end
    d = decide_tail(
        wal_tail=3,
        wal_acks=[1, None],
        own_covered_end=20,
        segments_tail=9,
        segments_acks=[None, 2],
        major_offsets=[0, 9],
        in_sync=[False, False],
    )
    assert (d.wal_tail, d.segments_tail) == (20, None)
    # nothing covered yet: nothing moves
    d = decide_tail(wal_tail=0, wal_acks=[], own_covered_end=0, segments_tail=0, segments_acks=[], major_offsets=[])
    assert (d.wal_tail, d.segments_tail) == (None, None)


def _seg(offset: int | None, placement: int, start: int, end: int, size: int = 100) -> ChainSegment:
    return ChainSegment(offset, (WalRange(PID, placement, start, end),), size)


def test_orphan_wal_channels_are_truncated_once_adopted_and_acked() -> None:
    chain = [_seg(0, 7, 0, 40), _seg(10, 7, 40, 90), _seg(None, 7, 90, 120), _seg(20, 1, 0, 5)]
    channel = (PID, 7)
    # the in-sync replicas acked up to offset 15 of the leader's segments channel: the first two segments
    # (the last covered record stays: a leader starting again on the channel reads its GTID there)
    assert decide_orphan_tail(channel=channel, tail=0, append=130, segments=chain, in_sync_segments_acks=[15]) == 89
    # an in-sync replica without an Ack holds it
    assert (
        decide_orphan_tail(channel=channel, tail=0, append=130, segments=chain, in_sync_segments_acks=[15, None])
        is None
    )
    # no in-sync peer: every published segment counts; an unpublished one never does
    assert decide_orphan_tail(channel=channel, tail=0, append=130, segments=chain, in_sync_segments_acks=[]) == 89
    # never past the channel's end, never backwards
    assert decide_orphan_tail(channel=channel, tail=0, append=60, segments=chain, in_sync_segments_acks=[]) == 60
    assert decide_orphan_tail(channel=channel, tail=95, append=130, segments=chain, in_sync_segments_acks=[]) is None
    # a channel nothing covers stays
    assert decide_orphan_tail(channel=(PID, 3), tail=0, append=10, segments=chain, in_sync_segments_acks=[]) is None


def test_lag_bytes_counts_the_segments_beyond_the_ack() -> None:
    chain = [_seg(0, 1, 0, 40, 1000), _seg(10, 1, 40, 90, 200), _seg(20, 1, 90, 120, 30), _seg(30, 2, 0, 9, 7)]
    channel = (PID, 1)
    assert lag_bytes(chain, channel, None) == 1230
    assert lag_bytes(chain, channel, 40) == 230
    assert lag_bytes(chain, channel, 100) == 30
    assert lag_bytes(chain, channel, 120) == 0


def test_a_lagging_or_dead_follower_leaves_the_set_and_rejoins_only_once_caught_up() -> None:
    clock = Clock()
    lag = ReplicaLag(ReplicaLagPolicy(max_lag_s=10, max_lag_bytes=1000), clock)
    out: set[int] = set()

    def step(
        own: int, acks: dict[int, int | None], alive: Iterable[int], nbytes: dict[int, int] | None = None
    ) -> set[int]:
        nonlocal out
        clock.now += 5
        result = lag.observe(own_end=own, acks=acks, alive=alive, lag_bytes=nbytes or {}, out_of_sync=out)
        out = set(result)
        return out

    # a new leader gives every follower max_lag_s, even one that never acked
    assert step(10, {1: 10, 2: None}, {1, 2}) == set()
    assert step(20, {1: 20, 2: None}, {1, 2}) == set()
    assert step(30, {1: 25, 2: None}, {1, 2}) == set()  # 1 reached the end of 5 s ago; 2: 10 s, not more
    assert step(30, {1: 30, 2: None}, {1, 2}) == {2}  # 2: no ack for more than max_lag_s
    # 1 dies; 2 catches up with the previous pass while alive: it rejoins
    assert step(30, {1: 30, 2: 30}, {2}) == set()
    assert step(30, {1: 30, 2: 30}, {2}) == set()
    # a dead follower is out once max_lag_s passed, even with nothing new to replicate
    assert step(30, {1: 30, 2: 30}, {2}) == {1}
    # the byte bound drops a follower at once (and keeps it out while passed)
    assert step(40, {1: 40, 2: 40}, {1, 2}, {1: 2000, 2: 2000}) == {1, 2}
    assert step(40, {1: 40, 2: 40}, {1, 2}) == set()
    # an out-of-sync follower behind the previous pass stays out, though alive
    assert step(50, {1: 50, 2: 20}, {1, 2}, {2: 2000}) == {2}
    assert step(60, {1: 60, 2: 45}, {1, 2}) == {2}  # the previous pass's end was 50
    assert step(70, {1: 70, 2: 60}, {1, 2}) == set()  # reached it: back in


def test_rejoin_requires_being_caught_up_to_the_previous_pass() -> None:
    clock = Clock()
    lag = ReplicaLag(ReplicaLagPolicy(max_lag_s=10, max_lag_bytes=10**9), clock)
    lag.observe(own_end=100, acks={5: 0}, alive={5}, lag_bytes={}, out_of_sync={5})
    clock.now += 5
    # the ack reaches an end of more than one pass ago only: still out
    assert lag.observe(own_end=200, acks={5: 99}, alive={5}, lag_bytes={}, out_of_sync={5}) == {5}
    clock.now += 5
    assert lag.observe(own_end=300, acks={5: 200}, alive={5}, lag_bytes={}, out_of_sync={5}) == set()


def test_a_first_time_leaders_out_of_sync_peer_rejoins_only_with_its_published_segments() -> None:
    """A first-time leader's own WAL channel is covered by none of its segments (own end 0): its chain
    holds the old leader's data as received segments, published on its segments channel. A peer out
    of sync with WAL Ack 0 "reached" the own end, and was written back in sync (then elected, it served
    older values and deleted rows) without holding that chain: it rejoins once its segments Ack is past
    the newest manifest the leader published."""
    clock = Clock()
    lag = ReplicaLag(ReplicaLagPolicy(max_lag_s=10, max_lag_bytes=10**9), clock)

    def observe(wal_ack: int | None, segments_ack: int | None) -> frozenset[int]:
        clock.now += 5
        return lag.observe(
            own_end=0,
            acks={3: wal_ack},
            alive={3},
            lag_bytes={},
            out_of_sync={3},
            segments_acks={3: segments_ack},
            segments_end=40,  # the newest manifest is at offset 39
        )

    assert observe(0, None) == {3}
    assert observe(0, 12) == {3}
    assert observe(0, 40) == frozenset()  # past the newest manifest: it holds the leader's chain
    # nothing published yet on the segments channel: the WAL Ack alone decides, as before
    fresh = ReplicaLag(ReplicaLagPolicy(max_lag_s=10, max_lag_bytes=10**9), clock)
    fresh.observe(own_end=0, acks={3: 0}, alive={3}, lag_bytes={}, out_of_sync={3}, segments_end=0)
    clock.now += 5
    assert fresh.observe(own_end=0, acks={3: 0}, alive={3}, lag_bytes={}, out_of_sync={3}) == frozenset()


class FakeStore:
    def __init__(self, out: Iterable[int] = ()) -> None:
        self.out = frozenset(out)
        self.live: frozenset[int] = frozenset()
        self.writes: list[frozenset[int]] = []

    def alive(self) -> frozenset[int]:
        return self.live

    def out_of_sync(self) -> frozenset[int]:
        return self.out

    def mark(self, out_of_sync: Iterable[int]) -> frozenset[int]:
        self.out = frozenset(out_of_sync)
        self.writes.append(self.out)
        return self.out


def test_the_keeper_records_only_changes_and_forgets_removed_placements() -> None:
    clock = Clock()
    store = FakeStore(out={2, 9})  # 9 left the partition
    store.live = frozenset({1, 2})
    keeper = InSyncKeeper(store, ReplicaLagPolicy(max_lag_s=10), ReplicaLag(ReplicaLagPolicy(max_lag_s=10), clock))
    assert keeper.update(own_end=10, acks={1: None, 2: 0}, lag_bytes={}) == {2}  # 2 is behind: stays out
    assert store.writes == [frozenset({2})]  # 9 dropped from the record
    clock.now += 5
    assert keeper.update(own_end=10, acks={1: 10, 2: 10}, lag_bytes={}) == set()  # caught up: back in
    clock.now += 5
    assert keeper.update(own_end=10, acks={1: 10, 2: 10}, lag_bytes={}) == set()
    assert store.writes == [frozenset({2}), frozenset()]  # only changes are written


def test_in_sync_record_codec_and_election_preference() -> None:
    rec = InSyncRecord(PID, frozenset({3, 4}), 7, 1)
    back = InSyncRecord.decode(PID, rec.encode(), 2)
    assert (back.out_of_sync, back.epoch, back.placement_id, back.version) == ({3, 4}, 7, 1, 2)
    assert back.in_sync([1, 3, 5]) == (1, 5)
    assert InSyncRecord.decode(PID, b"", 0).out_of_sync == frozenset()
    for bad in (b"[]", b'{"epoch": -1, "out_of_sync": []}', b'{"epoch": 1, "out_of_sync": "x"}', b"\xff"):
        with pytest.raises(MetadataDecodeError):
            InSyncRecord.decode(PID, bad, 0)
    # out-of-sync candidates never lead while an in-sync placement exists, in line or not (its node
    # restarting: nobody leads yet); only once no LIVE placement is in sync may anyone lead
    assert prefer_in_sync([4, 3, 1], {3, 4}, [1, 3, 4]) == (1,)
    assert prefer_in_sync([4, 3], {3, 4}, [1, 3, 4]) == ()
    assert prefer_in_sync([4, 3], {3, 4}, [3, 4]) == (4, 3)


def test_retention_config_and_lag_policy_validation() -> None:
    policy = TopicPolicy()
    assert policy.retention_config({"retention.ms": "-1"}) == {"segment.bytes": str(64 * 1024 * 1024)}
    big = {"retention.ms": "-1", "max.message.bytes": str(100 * 1024 * 1024)}
    assert policy.retention_config(big) == {"segment.bytes": str(100 * 1024 * 1024)}
    assert policy.retention_config({}) == {}  # time retention (deadletter, ...): the broker's segments
    assert TopicPolicy(log_segment_bytes=None).retention_config({"retention.ms": "-1"}) == {}
    with pytest.raises(ConfigError):
        TopicPolicy(log_segment_bytes=1000)
    for bad in ({"max_lag_s": 0}, {"max_lag_bytes": 0}, {"max_lag_s": True}):
        with pytest.raises(ConfigError):
            ReplicaLagPolicy(**bad)  # type: ignore[arg-type]
