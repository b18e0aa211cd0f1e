"""Replica bootstrap: the pure decisions, the catch-up state, eligibility, and two follower fixes.

The follower tests drive :class:`PartitionFollower` with scripted consumers (no Kafka): an INVALID
segment given up after ``max_refetches`` must not loop OUT_OF_ORDER forever, the WAL overlay
keeps its hash chain and GTID order across a bad record, and an old leader's major that the new
leader never published is dropped (root back to the leader's, or a bootstrap).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, TopicPartition

from metadata.table import Column, ColumnType, TableDefinition
from shoal.errors import PartitionUnavailableError
from shoal.ids import new_partition_id, new_segment_id
from shoal.kafka.settings import KafkaSettings
from shoal.segments import SegmentEntry, SegmentRecord, WalRange, write_segment
from shoal.segments.channel import KIND_CHUNK, KIND_HEADER, KIND_MANIFEST, to_wire
from shoal.segments.parquet_io import segment_path
from shoal.topics import TopicNames
from shoal.wire.arrow_ipc import encode_batch
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import GENESIS_HASH, Gtid, SegmentChunk, WalRecord
from shoal_app.testing.segments import commit_local_major
from storage_node.node import HeldPartition, StorageNode
from storage_node.replica import CatchUpPhase, PartitionReplica, versioned_rows
from storage_node.replica.overlay import WalOverlay
from storage_node.replication import bootstrap
from storage_node.replication.bootstrap import ReplicaPosition, bootstrap_reason, caught_up, start_offset
from storage_node.replication.collect import collect_on_follower
from storage_node.roles.follower import FollowerConfig, PartitionFollower

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)
TOPICS = TopicNames("t1")
LEADER, FOLLOWER = 1, 2


# -- pure decisions ------------------------------------------------------------------------------


def test_an_empty_replica_with_history_bootstraps_a_fresh_one_does_not() -> None:
    assert bootstrap_reason(ReplicaPosition(empty=True)) is None  # a new partition: nothing to fetch
    assert bootstrap_reason(ReplicaPosition(empty=True, acked_history=True)) == bootstrap.REASON_EMPTY_WITH_HISTORY
    assert (
        bootstrap_reason(ReplicaPosition(empty=True, partition_has_data=True))
        == bootstrap.REASON_EMPTY_PARTITION_HAS_DATA
    )
    assert bootstrap_reason(ReplicaPosition(empty=False, interrupted=True)) == bootstrap.REASON_INTERRUPTED


def test_lindb_handshake_an_ack_below_tail_rebootstraps() -> None:
    assert bootstrap_reason(ReplicaPosition(empty=False, segments_ack=10, segments_tail=10)) is None
    assert bootstrap_reason(ReplicaPosition(empty=False, segments_ack=None, segments_tail=10)) is None
    assert (
        bootstrap_reason(ReplicaPosition(empty=False, segments_ack=9, segments_tail=10))
        == bootstrap.REASON_ACK_BELOW_TAIL
    )
    assert (
        bootstrap_reason(ReplicaPosition(empty=False, segments_ack=50, wal_ack=3, wal_tail=7))
        == bootstrap.REASON_WAL_ACK_BELOW_TAIL
    )
    assert bootstrap_reason(ReplicaPosition(empty=False, wal_ack=7, wal_tail=7)) is None


def test_start_point_is_the_latest_major_never_below_tail() -> None:
    assert start_offset(0, None) == 0
    assert start_offset(5, None) == 5
    assert start_offset(5, 40) == 40
    assert start_offset(50, 40) == 50


def test_caught_up_needs_segments_and_wal_targets() -> None:
    assert not caught_up(segments_acked=9, segments_target=10, wal_position=5, wal_target=5, tail_wal=True)
    assert not caught_up(segments_acked=10, segments_target=10, wal_position=4, wal_target=5, tail_wal=True)
    assert caught_up(segments_acked=10, segments_target=10, wal_position=5, wal_target=5, tail_wal=True)
    assert caught_up(segments_acked=10, segments_target=10, wal_position=0, wal_target=5, tail_wal=False)


def test_most_advanced_prefers_durable_wal_coverage_then_segments_ack() -> None:
    assert bootstrap.most_advanced([2, 3], [None, None], [None, None]) is None
    assert bootstrap.most_advanced([2, 3], [10, 12], [40, 5]) == 3  # covers more of the old leader's WAL
    assert bootstrap.most_advanced([2, 3], [12, 12], [40, 41]) == 3
    assert bootstrap.most_advanced([2, 3], [0, None], [0, 30]) == 2  # no WAL Ack ranks below any WAL Ack
    assert bootstrap.most_advanced([], [], []) is None


# -- catch-up state and eligibility --------------------------------------------------------------


def test_a_bootstrap_survives_a_restart_until_it_finishes(tmp_path: Path) -> None:
    pid = new_partition_id()
    replica = PartitionReplica(TABLE, pid, FOLLOWER, tmp_path)
    assert replica.empty and replica.catch_up.eligible
    bootstrap.request_bootstrap(replica, "wiped")
    replica.catch_up.targets("seg", 10, 30, 0, 7)
    replica.catch_up.progress(fetched=20, segment_bytes=1000)
    info = replica.catch_up.snapshot().as_dict()
    assert info["state"] == "BOOTSTRAPPING" and info["offsets_fetched"] == 10 and info["offsets_target"] == 20
    assert info["progress"] == 0.5 and info["bytes_fetched"] == 1000 and info["segments_fetched"] == 1
    replica.close()

    again = PartitionReplica(TABLE, pid, FOLLOWER, tmp_path)  # a crash half way: still not eligible
    assert again.catch_up.phase is CatchUpPhase.BOOTSTRAPPING and not again.catch_up.eligible
    again.catch_up.finish()
    again.close()
    assert PartitionReplica(TABLE, pid, FOLLOWER, tmp_path).catch_up.eligible


def test_a_bootstrapping_replica_may_not_campaign(tmp_path: Path) -> None:
    replica = PartitionReplica(TABLE, new_partition_id(), FOLLOWER, tmp_path)
    held = HeldPartition(TABLE, replica.partition_id, FOLLOWER, None, replica)  # type: ignore[arg-type]
    assert not StorageNode._may_campaign(held)  # the empty-replica check has not run yet
    held.bootstrap_checked = True
    assert StorageNode._may_campaign(held)
    bootstrap.request_bootstrap(replica, "out of sync")
    assert not StorageNode._may_campaign(held)


# -- follower: scripted consumers ----------------------------------------------------------------


class FakeError:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def code(self) -> int:
        return KafkaError._PARTITION_EOF


@dataclass
class FakeMessage:
    _offset: int
    _value: bytes | None
    _headers: list[tuple[str, bytes]]
    _error: FakeError | None = None

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def error(self) -> FakeError | None:
        return self._error


class FakeChannel:
    """A consumer on a fixed list of messages: ``assign`` seeks, ``poll`` reads, ``commit`` records."""

    def __init__(self, messages: Sequence[tuple[bytes, bytes]]) -> None:
        self.messages = [FakeMessage(i, v, [(KIND_HEADER, k)]) for i, (k, v) in enumerate(messages)]
        self.position = 0
        self.seeks: list[int] = []
        self.commits: list[int] = []

    def assign(self, tps: list[TopicPartition]) -> None:
        self.position = tps[0].offset
        self.seeks.append(tps[0].offset)

    def poll(self, _timeout: float) -> FakeMessage | None:
        if self.position >= len(self.messages):
            return FakeMessage(self.position, None, [], FakeError(self.position))
        msg = self.messages[self.position]
        self.position += 1
        return msg

    def consume(self, n: int, _timeout: float) -> list[FakeMessage]:
        out = []
        while len(out) < n and self.position < len(self.messages):
            out.append(self.messages[self.position])
            self.position += 1
        return out

    def commit(self, offsets: list[TopicPartition] | None = None, asynchronous: bool = True) -> None:
        if offsets:
            self.commits.append(offsets[0].offset)

    def close(self) -> None:
        pass


def _follower(replica: PartitionReplica, **config: Any) -> PartitionFollower:
    cfg = FollowerConfig(
        KafkaSettings("localhost:1"),
        TOPICS,
        tail_wal=False,
        overload_pause_s=0,
        leader_check_s=3600,
        **{"out_of_order_pause_s": 0, **config},
    )
    f = PartitionFollower(replica, cfg, lambda: LEADER)
    f.leader_placement_id = LEADER
    f._next_leader_check = float("inf")
    return f


def _ingest(keys: list[int]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array(keys, pa.uint64()),
            "v": pa.array([f"v{k}" for k in keys], pa.string()),
            "_shoal_deleted": [False] * len(keys),
        },
        schema=ingest_schema(TABLE.arrow_schema()),
    )


def _segments(tmp: Path, pid: str, n: int, placement: int = LEADER) -> tuple[PartitionReplica, list[SegmentRecord]]:
    leader = PartitionReplica(TABLE, pid, placement, tmp / "leader")
    out = []
    for i in range(n):
        leader.append(versioned_rows(_ingest([i * 10, i * 10 + 1]), Gtid(1, i * 2)), i)
        record = leader.flush(1)
        assert record is not None
        out.append(record)
    return leader, out


def _published(leader: PartitionReplica, record: SegmentRecord, *, corrupt: bool = False) -> list[tuple[bytes, bytes]]:
    wire = to_wire(record, table="events", partition_id=leader.partition_id, topics=TOPICS, latest_major_offset=0)
    data = segment_path(leader.directory, record.segment_id).read_bytes()
    if corrupt:
        data = data[:-1] + bytes([data[-1] ^ 0xFF])
    chunk = SegmentChunk(record.segment_id, 0, 1, data)
    assert wire.chunk_count == 1
    return [(KIND_MANIFEST, wire.to_bytes()), (KIND_CHUNK, chunk.to_bytes())]


def test_an_invalid_segment_given_up_does_not_loop_out_of_order(tmp_path: Path) -> None:
    pid = new_partition_id()
    leader, (major, bad, after) = _segments(tmp_path, pid, 3)
    channel = FakeChannel(_published(leader, major) + _published(leader, bad, corrupt=True) + _published(leader, after))
    replica = PartitionReplica(TABLE, pid, FOLLOWER, tmp_path / "follower")
    f = _follower(replica, max_refetches=2)
    f._consumer, f.topic = channel, TOPICS.segments(pid, LEADER)  # type: ignore[assignment]
    for _ in range(200):
        f._step()
    assert replica.chain.root == major.segment_id  # the bad segment and the one based on it: not applied
    assert f.stats.invalid == 3 and f.stats.refetches == 2
    assert len(channel.seeks) <= 10, f"the follower keeps replaying: {len(channel.seeks)} seeks"
    assert channel.commits == [2]  # acked the major only
    assert channel.position == len(channel.messages)  # it waits at the channel's end for a new major


def _unpublished_major(tmp: Path) -> tuple[PartitionReplica, list[SegmentRecord], FakeChannel, str]:
    """An old leader (placement FOLLOWER) flushed three segments, then committed a major of them and
    lost the leadership before publishing it; the new leader republished the three on its channel."""
    old, records = _segments(tmp, new_partition_id(), 3, placement=FOLLOWER)
    channel = FakeChannel([m for r in records for m in _published(old, r)])
    sid, _folded = commit_local_major(old, epoch=1)
    return old, records, channel, sid


def test_an_unpublished_major_is_dropped_and_root_returns_to_the_leaders(tmp_path: Path) -> None:
    old, records, channel, major = _unpublished_major(tmp_path)
    before = old.scan(include_system=True).sort_by("k")
    f = _follower(old)  # a grace period first: a new leader may still be republishing its chain
    f._consumer, f.topic = channel, TOPICS.segments(old.partition_id, LEADER)  # type: ignore[assignment]
    for _ in range(20):
        f._step()
    assert old.chain.root == major
    f = _follower(old, unpublished_major_grace_s=0)
    f._consumer, f.topic = channel, TOPICS.segments(old.partition_id, LEADER)  # type: ignore[assignment]
    f._seek(0)
    for _ in range(20):
        f._step()
    assert old.chain.root == records[-1].segment_id  # the leader's chain, not the major it never had
    assert major not in old.chain.entries and not segment_path(old.directory, major).exists()
    assert not old.catch_up.bootstrapping and f.stats.rewinds == 1
    assert old.scan(include_system=True).sort_by("k").equals(before)
    assert channel.commits[-1] == len(channel.messages)  # every segment acked: they are all here


def test_an_unpublished_major_whose_folded_segments_are_gone_bootstraps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, records, channel, major = _unpublished_major(tmp_path)
    before = old.scan(include_system=True).sort_by("k")
    assert collect_on_follower(old)  # the follower role deletes what the major folds as it starts
    f = _follower(old, unpublished_major_grace_s=0)
    f._consumer, f.topic = channel, TOPICS.segments(old.partition_id, LEADER)  # type: ignore[assignment]
    rewinds: list[tuple[str | None, bool]] = []
    real_rewind = old.rewind

    def rewind(to: str | None) -> object:
        rewinds.append((to, old.catch_up.bootstrapping))
        return real_rewind(to)

    monkeypatch.setattr(old, "rewind", rewind)
    for _ in range(20):
        f._step()
    assert old.empty and old.catch_up.bootstrapping  # nothing kept that the leader does not hold
    # the BOOTSTRAPPING marker is durable before the root moves to NULL: a kill -9 in between left
    # an empty chain, no marker, served and eligible to lead after the restart
    assert rewinds == [(None, True)]
    assert not segment_path(old.directory, major).exists()
    f._seek(0)  # the bootstrap positions on the leader's latest major (offset 0 here)
    for _ in range(20):
        f._step()
    assert old.chain.root == records[-1].segment_id and [e.segment_id for e in old.chain.walk()][::-1] == [
        r.segment_id for r in records
    ]
    old.catch_up.finish()
    assert old.scan(include_system=True).sort_by("k").equals(before)


def test_minors_above_an_unpublished_major_are_pushed_once_the_leader_moved_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old leader also flushed a minor on its unpublished major; the new leader adopted its rows
    (WAL) and published a segment on its own chain. The minor is pushed to the leader and dropped."""
    old, records, channel, major = _unpublished_major(tmp_path)
    old.append(versioned_rows(_ingest([7, 8]), Gtid(1, 10)), 3)
    minor = old.flush(1)
    assert minor is not None and old.chain.root == minor.segment_id
    assert collect_on_follower(old)  # the major's folded segments are gone here
    new = PartitionReplica(TABLE, old.partition_id, LEADER, tmp_path / "new-leader")  # the leader's next segment
    rows = versioned_rows(_ingest([7, 8]), Gtid(2, 0))
    sid = new_segment_id()
    w = write_segment(new.directory, sid, rows, key_columns=new.key_columns)
    entry = SegmentEntry(segment_id=sid, base_segment_id=records[-1].segment_id, placement_id=LEADER, epoch=2)
    nxt = SegmentRecord(entry=entry, sha256=w.sha256, row_count=w.row_count, size_bytes=w.size_bytes)
    pushed: list[str] = []

    def push(replica: PartitionReplica, segments: list[SegmentRecord], **_: Any) -> int:
        pushed.extend(r.segment_id for r in segments)
        return len(segments)

    monkeypatch.setattr("storage_node.roles.follower.push_segments", push)
    f = _follower(old, unpublished_major_grace_s=0)
    f._consumer, f.topic = channel, TOPICS.segments(old.partition_id, LEADER)  # type: ignore[assignment]
    for _ in range(10):
        f._step()
    assert old.chain.root == minor.segment_id and not pushed  # the leader has not moved on yet: nothing to judge
    n = len(channel.messages)  # the leader publishes its next segment
    channel.messages += [FakeMessage(n + i, v, [(KIND_HEADER, k)]) for i, (k, v) in enumerate(_published(new, nxt))]
    for _ in range(40):
        f._step()
    assert pushed == [minor.segment_id]
    assert old.catch_up.bootstrapping  # not eligible until a bootstrap from the leader's channel ends
    assert not segment_path(old.directory, minor.segment_id).exists()
    assert not segment_path(old.directory, major).exists()
    # the replay from the leader's latest major (what the bootstrap does too) rebuilt its chain here
    assert old.chain.root == sid and len(list(old.chain.walk())) == 4


def _wal(records: list[WalRecord]) -> FakeChannel:
    return FakeChannel([(b"", r.to_bytes()) for r in records])


def _record(keys: list[int], gtid: Gtid, prev: bytes, pid: str, *, payload: bytes | None = None) -> WalRecord:
    body = payload if payload is not None else encode_batch(_ingest(keys))
    return WalRecord.create(
        partition_id=pid, placement_id=LEADER, gtid=gtid, row_count=len(keys), payload=body, prev_hash=prev
    )


def _tail(replica: PartitionReplica, records: list[WalRecord]) -> PartitionFollower:
    f = _follower(replica)
    f._wal, f._wal_topic = _wal(records), TOPICS.wal(replica.partition_id, LEADER)  # type: ignore[assignment]
    replica.overlay = WalOverlay()
    f._tail_wal()
    return f


def test_overlay_chain_moves_past_a_record_whose_rows_do_not_decode(tmp_path: Path) -> None:
    pid = new_partition_id()
    r1 = _record([1], Gtid(1, 0), GENESIS_HASH, pid)
    r2 = _record([2], Gtid(1, 1), r1.hash, pid, payload=b"not arrow")  # the leader's, chained, rows unreadable
    r3 = _record([3], Gtid(1, 2), r2.hash, pid)
    replica = PartitionReplica(TABLE, pid, FOLLOWER, tmp_path)
    f = _tail(replica, [r1, r2, r3])
    assert f.stats.invalid == 0 and replica.overlay is not None and replica.overlay.pending == 3
    assert sorted(replica.scan().column("k").to_pylist()) == [1, 3]  # r3 chains from r2: it is accepted
    assert f.stats.invalid == 1  # found by the read that decoded it, once
    assert replica.overlay.pending == 0 and replica.overlay.rows == 2
    assert sorted(replica.scan().column("k").to_pylist()) == [1, 3] and f.stats.invalid == 1


def test_overlay_checks_gtid_order_and_a_forged_record_does_not_move_the_chain(tmp_path: Path) -> None:
    pid = new_partition_id()
    r1 = _record([1, 2], Gtid(1, 10), GENESIS_HASH, pid)
    backwards = _record([3], Gtid(1, 11), r1.hash, pid)  # chains, but its GTID is inside r1's rows
    forged = _record([4], Gtid(1, 12), b"\x01" * 32, pid)  # does not chain from r1
    r2 = _record([5], Gtid(1, 12), r1.hash, pid)
    replica = PartitionReplica(TABLE, pid, FOLLOWER, tmp_path)
    f = _tail(replica, [r1, backwards, forged, r2])
    assert f.stats.invalid == 2
    assert sorted(replica.scan().column("k").to_pylist()) == [1, 2, 5]


def test_scan_of_a_bootstrapping_or_unchecked_replica_is_refused(tmp_path: Path) -> None:
    replica = PartitionReplica(TABLE, new_partition_id(), FOLLOWER, tmp_path)
    node = StorageNode.__new__(StorageNode)  # only the held-replica table is used
    node._lock, node._held = threading.RLock(), {}
    held = HeldPartition(TABLE, replica.partition_id, FOLLOWER, None, replica)  # type: ignore[arg-type]
    node._held[replica.partition_id] = held
    # empty, not before its bootstrap check ran: it may be a wiped replica about to bootstrap
    with pytest.raises(PartitionUnavailableError, match="has not yet checked whether it must bootstrap"):
        node.replicas("events", None)
    held.bootstrap_checked = True
    assert node.replicas("events", None) == [replica]
    bootstrap.request_bootstrap(replica, "wiped")
    with pytest.raises(PartitionUnavailableError, match="bootstrapping"):
        node.replicas("events", None)


def test_a_former_leaders_overlay_records_stay_until_covered_or_the_grace_ends_at_the_channels_end(
    tmp_path: Path,
) -> None:
    pid = new_partition_id()
    r1 = _record([1], Gtid(1, 0), GENESIS_HASH, pid)
    r2 = _record([2], Gtid(1, 1), r1.hash, pid)
    replica = PartitionReplica(TABLE, pid, FOLLOWER, tmp_path)
    f = _tail(replica, [r1, r2])  # tailed from the leader's (placement 1) WAL channel
    overlay = replica.overlay
    assert overlay is not None and sorted(replica.scan().column("k").to_pylist()) == [1, 2]
    f._close_consumer(keep_overlay=True)  # a leader change: placement 3 leads now
    f.leader_placement_id, f._retired_since = 3, time.monotonic()
    f._eof = None
    f._expire_retired()  # not at the end of the new leader's segments channel: kept
    assert overlay.records == 2 and sorted(replica.scan().column("k").to_pylist()) == [1, 2]
    f._eof = 0
    f._expire_retired()  # at the end, but within the grace period: kept
    assert overlay.records == 2 and f._retired_since is not None
    assert overlay.drop_covered([WalRange(pid, LEADER, 0, 1)]) == 1  # a segment (the adoption) covers r1
    f._retired_since = 0.0  # the grace period is over
    f._expire_retired()  # r2 was never covered: dropped and counted
    assert overlay.records == 0 and f.stats.overlay_dropped == 1 and f._retired_since is None
    assert replica.scan().num_rows == 0


def test_overlay_drop_channels_keeps_the_channels_asked_for() -> None:
    overlay = WalOverlay()
    rows = versioned_rows(_ingest([1, 2]), Gtid(1, 0))
    overlay.add(("p", 1), 0, rows)
    overlay.add(("p", 2), 0, rows)
    overlay.add(("p", 2), 1, rows)
    assert overlay.channels() == {("p", 1), ("p", 2)}
    assert overlay.drop_channels(lambda c: c != ("p", 2)) == (2, 4)
    assert overlay.channels() == {("p", 1)} and overlay.rows == 2


def test_a_leaders_channel_never_acked_on_is_read_from_its_latest_major(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read from the beginning, a leader's channel can offer a major of its earlier term that this
    replica's latest major no longer names: fast-forward-added, it moved the root back."""
    from types import SimpleNamespace

    from confluent_kafka import OFFSET_BEGINNING

    from shoal.errors import KafkaOperationError
    from storage_node.roles import follower as follower_module

    replica = PartitionReplica(TABLE, new_partition_id(), FOLLOWER, tmp_path / "follower")
    f = _follower(replica)
    asked: list[tuple[str, int, int]] = []
    monkeypatch.setattr(
        follower_module, "channel_indexes", lambda _kafka, _topic, timeout_s: SimpleNamespace(tail=3, append=40)
    )

    def latest(_kafka: Any, topic: str, *, tail: int, end: int) -> int | None:
        asked.append((topic, tail, end))
        return 17

    monkeypatch.setattr(bootstrap, "find_latest_major", latest)
    assert f._latest_major_start("seg") == 17 and asked == [("seg", 3, 40)]
    monkeypatch.setattr(bootstrap, "find_latest_major", lambda *_a, **_k: None)
    assert f._latest_major_start("seg") == OFFSET_BEGINNING  # no major yet: all of it

    def down(*_a: Any, **_k: Any) -> int:
        raise KafkaOperationError("no broker")

    monkeypatch.setattr(bootstrap, "find_latest_major", down)
    assert f._latest_major_start("seg") == OFFSET_BEGINNING  # as before, with a warning
    replica.close()


def test_a_follower_ahead_of_a_returning_leader_converges_on_its_chain(tmp_path: Path) -> None:
    """Epoch 1: placement LEADER publishes A (major), M1, M2; this replica acks only A. Epoch 2:
    another leader adopts LEADER's WAL [1, 3) (the rows of M1, M2) and its major B folds A and
    the adoption; B is never published. Epoch 3: LEADER leads again on its own chain and flushes
    N on M2. The follower must converge on N: M1 and M2, whose rows it holds through B, are still
    replayed so that the segments based on them can be applied (answering them as "already held"
    made N OUT_OF_ORDER for ever: an audit's probe, 100 replays)."""
    from shoal.segments import read_segment

    pid = new_partition_id()
    leader, (a, m1, m2) = _segments(tmp_path, pid, 3)
    replica = PartitionReplica(TABLE, pid, FOLLOWER, tmp_path / "follower")
    f = _follower(replica)
    channel = FakeChannel(_published(leader, a))
    f._consumer, f.topic = channel, TOPICS.segments(pid, LEADER)  # type: ignore[assignment]
    for _ in range(5):
        f._step()
    assert replica.chain.root == a.segment_id and channel.commits == [2]
    rows = [read_segment(leader.directory, r.segment_id).replace_schema_metadata(None) for r in (m1, m2)]
    replica.write_adopted(rows, WalRange(pid, LEADER, 1, 3), 2)
    commit_local_major(replica, epoch=2)
    collect_on_follower(replica)
    leader.append(versioned_rows(_ingest([100, 101]), Gtid(3, 0)), 3)
    n = leader.flush(3)
    assert n is not None and n.entry.base_segment_id == m2.segment_id
    channel = FakeChannel([m for r in (a, m1, m2, n) for m in _published(leader, r)])
    f = _follower(replica)
    f._consumer, f.topic = channel, TOPICS.segments(pid, LEADER)  # type: ignore[assignment]
    f._acked = 2
    f._seek(2)  # its committed offset on the returning leader's channel
    for _ in range(400):
        f._step()
    if replica.catch_up.bootstrapping:  # the unpublished major was dropped with its folded segments
        replica.catch_up.finish()
    assert replica.chain.root == n.segment_id, f"stuck: {len(channel.seeks)} seeks, {f._out_of_order}"
    assert sorted(replica.scan().column("k").to_pylist()) == sorted(leader.scan().column("k").to_pylist())
    replica.close()
    leader.close()


# -- a wiped replica of a split child (DESIGN.md section 8) ----------------------------------------


def test_an_empty_follower_with_an_ack_on_its_channel_bootstraps_instead_of_resuming_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A split's LOAD target follows its staging channel without the node's empty-replica check: wiped,
    it resumed at its old Ack, skipped every piece before it, and the splitter read that Ack as held."""
    from types import SimpleNamespace

    from storage_node.roles import follower as follower_module

    replica = PartitionReplica(TABLE, new_partition_id(), FOLLOWER, tmp_path / "child")
    f = _follower(replica)
    monkeypatch.setattr(
        follower_module,
        "channel_indexes",
        lambda _kafka, _topic, _groups=(), timeout_s=10: SimpleNamespace(tail=0, append=9, ack=lambda _g: None),
    )
    assert f._bootstrap_reason("staging", LEADER, 7) == bootstrap.REASON_EMPTY_WITH_HISTORY
    assert f._bootstrap_reason("staging", LEADER, -1001) is None  # never acked: a new replica
    assert f._bootstrap_reason("staging", LEADER, 0) is None
    replica.close()


def test_partition_history_looks_at_every_channel_of_the_partition_staging_ones_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shoal.kafka.indexes import ChannelIndexes

    child = new_partition_id()
    staging = TOPICS.segments(child, 9)  # the parent placement's staging channel of the child
    other = TOPICS.segments(new_partition_id(), 9)
    group = TOPICS.replica_group(child, 2)

    class Admin:
        def list_topics(self, timeout: float) -> Any:
            from types import SimpleNamespace

            return SimpleNamespace(topics={staging: None, other: None, TOPICS.segments(child, 2): None})

    asked: list[str] = []

    def read_indexes(_client: Any, queries: Sequence[Any], timeout_s: float) -> dict[str, ChannelIndexes]:
        asked.extend(q.topic for q in queries)
        return {
            q.topic: ChannelIndexes(
                q.topic, 0, 5 if q.topic == staging else 0, ((group, 4 if q.topic == staging else None),)
            )
            for q in queries
        }

    monkeypatch.setattr(bootstrap, "read_indexes", read_indexes)
    history = bootstrap.partition_history(KafkaSettings("localhost:1"), TOPICS, child, 2, admin=Admin())  # type: ignore[arg-type]
    assert sorted(asked) == sorted([staging, TOPICS.segments(child, 2)])
    assert history.acked_channels == (staging,) and history.data_channels == (staging,)


def test_a_split_childs_seeded_epoch_is_not_a_partition_that_never_led(monkeypatch: pytest.MonkeyPatch) -> None:
    """The splitter seeds a child's epoch with its parent's and no leader: the node took that for a new
    partition, skipped the empty-replica check, and a wiped child replica could lead with nothing."""
    from types import SimpleNamespace

    from metadata.zk_layout import EpochRecord
    from storage_node import node as node_module

    child = new_partition_id()
    records = {"seeded": EpochRecord(child, 5, None, None), "new": EpochRecord(child, 0, None, None)}
    checked: list[str] = []
    monkeypatch.setattr(node_module.bootstrap, "check_on_open", lambda replica, *_a: checked.append("checked"))
    for kind, expect in (("seeded", ["checked"]), ("new", [])):
        checked.clear()
        monkeypatch.setattr(node_module, "read_epoch", lambda _zk, _layout, _pid, rec=records[kind]: rec)
        replica = SimpleNamespace(catch_up=SimpleNamespace(bootstrapping=False))
        held = SimpleNamespace(bootstrap_checked=False, partition_id=child, placement_id=2, peers=(3,), replica=replica)
        node = SimpleNamespace(
            _client=SimpleNamespace(zk=None, layout=None), config=SimpleNamespace(kafka=None, topics=None)
        )
        StorageNode._check_bootstrap(node, held)  # type: ignore[arg-type]
        assert checked == expect and held.bootstrap_checked, kind


def test_a_rewound_follower_keeps_serving_the_leaders_records_it_tailed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old leader (placement 9) published A, B, C; this follower holds them. The new leader
    got A and B only, adopted C's rows from the old leader's WAL channel into D (based on B), and
    accepted k=100 and k=101 (committed on its WAL channel, not flushed). The follower tailed them.
    D is OUT_OF_ORDER here, so the follower rewinds to B: reads must still return 100 and 101
    (the rewind emptied the overlay and the tail stayed past them: an audit's proof), once each."""
    import storage_node.roles.follower as follower_module
    from shoal.segments import read_segment
    from shoal.segments.channel import from_wire
    from shoal.wire.records import ManifestRecord
    from storage_node.replication.receive import apply_segment

    old_placement = 9
    pid = new_partition_id()
    old, (a, b, c) = _segments(tmp_path, pid, 3, placement=old_placement)

    def copy(src: PartitionReplica, dst: PartitionReplica, record: SegmentRecord) -> None:
        (_km, m), (_kc, chunk) = _published(src, record)
        manifest = from_wire(ManifestRecord.from_bytes(m), sender_placement_id=old_placement, topics=TOPICS)
        assert apply_segment(dst, manifest, [SegmentChunk.from_bytes(chunk).data], leader_placement_id=9).acks

    new = PartitionReplica(TABLE, pid, LEADER, tmp_path / "new")
    copy(old, new, a)
    copy(old, new, b)
    rows_c = read_segment(old.directory, c.segment_id).replace_schema_metadata(None)
    d = new.write_adopted([rows_c], WalRange(pid, old_placement, 2, 3), 2)
    assert d is not None and d.entry.base_segment_id == b.segment_id
    replica = PartitionReplica(TABLE, pid, FOLLOWER, tmp_path / "follower")
    for record in (a, b, c):
        copy(old, replica, record)
    r0 = _record([100], Gtid(2, 0), GENESIS_HASH, pid)
    r1 = _record([101], Gtid(2, 1), r0.hash, pid)
    opened: list[FakeChannel] = []

    def consumer(*_args: Any, **_kwargs: Any) -> FakeChannel:
        opened.append(_wal([r0, r1]))
        return opened[-1]

    monkeypatch.setattr(follower_module.clients, "consumer", consumer)
    monkeypatch.setattr(follower_module, "push_segments", lambda *_a, **_k: 0)
    f = _tail(replica, [r0, r1])
    before = sorted(replica.scan().column("k").to_pylist())
    assert {100, 101} <= set(before)
    f._consumer, f.topic = FakeChannel([m for r in (a, b, d) for m in _published(new, r)]), TOPICS.segments(pid, 1)  # type: ignore[assignment]
    for _ in range(30):
        f._step()
        f._tail_wal()
        assert {100, 101} <= set(replica.scan().column("k").to_pylist())
    assert f.stats.rewinds == 1 and replica.chain.root == d.segment_id
    assert opened and opened[-1].position == 2  # tailed again from what the chain covers
    after = replica.scan().column("k").to_pylist()
    assert sorted(after) == before and len(after) == len(set(after))
    assert replica.overlay is not None and replica.overlay.records == 2  # not added twice
    for r in (old, new, replica):
        r.close()


def test_a_stray_record_among_the_chunks_of_a_held_segment_does_not_wedge_the_follower(tmp_path: Path) -> None:
    """A replay from the latest major meets B, which this replica holds, with a garbage record among
    its chunks: B's chunks are not needed, so the follower goes on from that record (it looped on
    B's manifest for ever, never reading C or the major after it: an audit's proof)."""
    pid = new_partition_id()
    leader, (a, b, c) = _segments(tmp_path, pid, 3)
    replica = PartitionReplica(TABLE, pid, FOLLOWER, tmp_path / "follower")
    f = _follower(replica)
    f._consumer, f.topic = FakeChannel(_published(leader, a) + _published(leader, b)), TOPICS.segments(pid, LEADER)  # type: ignore[assignment]
    for _ in range(6):
        f._step()
    assert replica.chain.root == b.segment_id
    major_id, _ = commit_local_major(leader, epoch=1)
    major = leader.record(major_id)
    assert major is not None
    manifest_b, chunk_b = _published(leader, b)
    stray = (KIND_CHUNK, b"\x07a stray record, not a chunk")
    messages = [*_published(leader, a), manifest_b, stray, chunk_b, *_published(leader, c), *_published(leader, major)]
    channel = FakeChannel(messages)
    f = _follower(replica)
    f.stopping.wait = lambda timeout=None: f.stopping.is_set()  # type: ignore[method-assign]
    f._consumer, f.topic = channel, TOPICS.segments(pid, LEADER)  # type: ignore[assignment]
    for _ in range(60):
        f._step()
    assert replica.chain.root == major_id, f"stuck: {channel.seeks}"
    assert channel.seeks.count(2) <= 1 and f.stats.errors == 0 and f.stats.invalid == 1
    assert channel.commits[-1] == len(messages)
    assert sorted(replica.scan().column("k").to_pylist()) == sorted(leader.scan().column("k").to_pylist())
    replica.close()
    leader.close()


def test_overlay_refuses_a_record_of_another_channel_and_keeps_its_chain(tmp_path: Path) -> None:
    """A self-consistent record of another partition's or placement's channel at the tail's start:
    ``verify_chain`` of one record compares its channel with itself, and the tail accepts any first
    hash; applied, it served its rows and every genuine record after it was refused."""
    pid = new_partition_id()
    foreign = WalRecord.create(
        partition_id=new_partition_id(),
        placement_id=9,
        gtid=Gtid(99, 0),
        row_count=1,
        payload=encode_batch(_ingest([1])),
        prev_hash=GENESIS_HASH,
    )
    r1 = _record([1], Gtid(1, 0), GENESIS_HASH, pid)
    r2 = _record([2], Gtid(1, 1), r1.hash, pid)
    replica = PartitionReplica(TABLE, pid, FOLLOWER, tmp_path)
    f = _tail(replica, [foreign, r1, r2])
    for _ in range(2):
        f._tail_wal()
    assert f.stats.invalid == 1
    assert replica.scan().sort_by("k").to_pydict() == {"k": [1, 2], "v": ["v1", "v2"]}


@pytest.mark.parametrize(("committed", "latest", "start"), [(30, 17, 17), (10, 17, 10), (30, None, -2)])
def test_a_repair_reads_the_leaders_channel_from_its_latest_major_or_its_ack_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, committed: int, latest: int | None, start: int
) -> None:
    """A restart whose scrub found a chain segment's file damaged reads the channel again to repair
    it. From the beginning, a major older than the latest one and no longer listed by it (a major
    lists at most 64 folded segments) was fast-forward-added: the root moved back, and the repaired
    segment stayed off the chain while the Ack claimed it."""
    from types import SimpleNamespace

    from storage_node.roles import follower as follower_module

    replica = PartitionReplica(TABLE, new_partition_id(), FOLLOWER, tmp_path)
    f = _follower(replica)
    f._repair = {new_segment_id()}
    consumer = FakeChannel([])
    consumer.committed = lambda tps, timeout: [TopicPartition(tps[0].topic, 0, committed)]  # type: ignore[attr-defined]
    monkeypatch.setattr(follower_module.clients, "consumer", lambda *_a, **_k: consumer)
    monkeypatch.setattr(follower_module, "create_topic", lambda *_a, **_k: None, raising=False)
    monkeypatch.setattr(f, "_bootstrap_reason", lambda *_a: None)
    monkeypatch.setattr(
        follower_module, "channel_indexes", lambda *_a, **_k: SimpleNamespace(tail=0, append=40, ack=lambda _g: None)
    )
    monkeypatch.setattr(bootstrap, "find_latest_major", lambda *_a, **_k: latest)
    f._follow(LEADER)
    assert consumer.seeks == [start]
    replica.close()


def test_a_segment_received_again_keeps_its_file_when_an_older_scan_ends(tmp_path: Path) -> None:
    """An old leader's follower role deletes what its unpublished major folds while a long scan reads
    those files (the unlink waits for the scan); the major is dropped and the same segments are
    received again from the leader's channel. The scan's end unlinked the new files."""
    old, records, channel, _major = _unpublished_major(tmp_path)
    ids = [r.segment_id for r in records]
    with old.reading(ids):
        assert collect_on_follower(old)
        f = _follower(old, unpublished_major_grace_s=0)
        f._consumer, f.topic = channel, TOPICS.segments(old.partition_id, LEADER)  # type: ignore[assignment]
        for _ in range(20):
            f._step()  # the major is dropped: a bootstrap
        f._seek(0)
        for _ in range(20):
            f._step()  # which receives the three segments again
        old.catch_up.finish()
        assert old.chain.root == ids[-1]
    assert all(segment_path(old.directory, s).exists() for s in ids)
    assert sorted(old.scan().column("k").to_pylist()) == [0, 1, 10, 11, 20, 21]


@pytest.mark.parametrize("damaged", [False, True])
def test_a_diverged_follower_keeps_reading_the_rows_it_detaches_until_the_leader_sends_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damaged: bool
) -> None:
    """A follower holding a segment the new leader never got (it adopted the same row from the old
    leader's WAL channel) rewinds its root, then pushes what it detached and pauses before the
    leader's segment arrives: reads in between returned the older value of a key they had read new.
    ``damaged``: the detached segment's file is unreadable here; the rewind happens all the same
    (reading it first raised on every try: the follower never followed the leader again)."""
    from types import SimpleNamespace

    from storage_node.roles import follower as follower_module

    def rows(value: str) -> pa.Table:
        table = _ingest([1])
        return table.set_column(table.schema.get_field_index("v"), "v", pa.array([value], pa.string()))

    def read(replica: PartitionReplica) -> str:
        [value] = replica.scan().column("v").to_pylist()
        return value

    old_leader = 3
    pid = new_partition_id()
    a = PartitionReplica(TABLE, pid, old_leader, tmp_path / "a")
    a.append(versioned_rows(rows("old"), Gtid(1, 0)), 0)
    major = a.flush(1)
    a.append(versioned_rows(rows("new"), Gtid(1, 1)), 1)
    newer = a.flush(1)
    assert major is not None and newer is not None
    replica = PartitionReplica(TABLE, pid, FOLLOWER, tmp_path / "f")
    f = _follower(replica)
    f.leader_placement_id = old_leader
    f._consumer = FakeChannel(_published(a, major) + _published(a, newer))  # type: ignore[assignment]
    f.topic = TOPICS.segments(pid, old_leader)
    for _ in range(6):
        f._step()
    assert read(replica) == "new"
    # the new leader's segment: the old leader's WAL record 1, adopted, based on the major
    (tmp_path / "b").mkdir()
    sid = new_segment_id()
    written = write_segment(tmp_path / "b", sid, versioned_rows(rows("new"), Gtid(1, 1)), key_columns=["k"])
    entry = SegmentEntry(
        segment_id=sid,
        base_segment_id=major.segment_id,
        placement_id=LEADER,
        epoch=2,
        covered=(WalRange(pid, old_leader, 1, 2),),
    )
    adopted = SegmentRecord(entry=entry, sha256=written.sha256, row_count=1, size_bytes=written.size_bytes)
    seen: list[str] = []

    def push(pushing: PartitionReplica, segments: Sequence[SegmentRecord], **_: Any) -> int:
        seen.append(read(pushing))
        return len(segments)

    monkeypatch.setattr(follower_module, "push_segments", push)
    if damaged:
        segment_path(replica.directory, newer.segment_id).write_bytes(b"not parquet")
        seen_read = read

        def read(replica: PartitionReplica) -> str:  # a scan of the damaged file raises: reads stop there
            try:
                return seen_read(replica)
            except Exception:
                return "unreadable"

    g = _follower(replica, out_of_order_pause_s=0.01)
    wait = g.stopping.wait
    monkeypatch.setattr(g.stopping, "wait", lambda t: seen.append(read(replica)) or wait(t))
    leader_dir = SimpleNamespace(directory=tmp_path / "b", partition_id=pid)
    channel = _published(a, major) + _published(leader_dir, adopted)  # type: ignore[arg-type]
    g._consumer, g.topic = FakeChannel(channel), TOPICS.segments(pid, LEADER)  # type: ignore[assignment]
    for _ in range(12):
        g._step()
    assert g.stats.rewinds == 1 and seen and (damaged or set(seen) == {"new"}), seen
    assert read(replica) == "new" and replica.chain.root == sid
