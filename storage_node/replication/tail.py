"""The Tail index: truncating the partition's channels, and the in-sync set (LinDB seed 001; DESIGN.md
sections 3, 6 and 10; Kafka's ISR and ``replica.lag.time.max.ms``).

Every pass (the leader's segment publisher, :mod:`storage_node.replication.publish`) reads the
indexes of the partition's channels, updates the in-sync set, and moves each channel's Tail with
``delete_records``:

- **In-sync set.** A follower is out of sync when it has not been caught up (its Ack on this
  leader's WAL channel at or past what this leader's durable segments covered at some moment) for
  ``max_lag_s``, when it is dead (not a candidate in the partition's election: every LIVE replica
  campaigns) for that long, or when the segment bytes it still lacks pass ``max_lag_bytes``
  (:class:`ReplicaLag`, :class:`~storage_node.config.ReplicaLagPolicy`). It rejoins only once caught
  up again (Kafka's rule): alive and holding at least what this leader held durable at the previous
  pass. The set is written to ZooKeeper fenced by the leader's epoch (:mod:`metadata.in_sync`)
  *before* any Tail moves past an out-of-sync replica, so the election never prefers it while an
  in-sync replica is a candidate.
- **WAL channel**: below the minimum Ack of the in-sync replicas (a follower's Ack = what its
  durable segments cover of this channel; an in-sync replica without an Ack holds the Tail), never
  beyond what this leader's own durable segments cover, less the last covered record (``KEEP_LAST``:
  a restarted leader reads its last GTID there). With no in-sync peer (replication factor 1,
  or every other replica out of sync) the Tail follows the own covered end.
- **Segments channel**: below the latest major manifest every in-sync replica acked (committed
  offset past it); with no in-sync peer, below the latest major. So a joining, out-of-order or
  returning out-of-sync replica can always re-bootstrap from a major and what follows it on Kafka
  alone. A returning replica whose Ack is below the Tail starts over from the latest major (its
  consumers reset to the log start); it stays out of sync until it has caught up.
- **Orphan channels** (the WAL and segments channels of other placements, former leaders): a WAL
  channel below what this leader's segments cover of it (adoption wrote them) and every in-sync
  replica acked on this leader's segments channel, less its last covered record; a segments channel
  below this leader's own committed offset there (its peer-segment receiver merged or skipped
  everything before it; a former leader that leads again publishes its chain anew).
- **Ingest channel**: below the leader group's committed offset (the accepted-by-leader index: every
  record before it is in the WAL, or in deadletter, committed in the same transaction).

Retention choice: ``delete_records`` driven by these Ack indexes is the only mechanism that deletes
data shoal still needs. Every channel shoal truncates is created with ``retention.ms=-1`` (no time
retention: a replica or leader down longer than any time limit would otherwise lose unacked data)
and with Kafka log segments of :attr:`~shoal.kafka.settings.TopicPolicy.log_segment_bytes`, so the
bytes below a Tail are freed within one log segment (Kafka deletes whole log segments only).
Bounded retention therefore comes from the in-sync rule above, not from a clock.

Invariants kept: Tail <= every in-sync Ack <= Append, Tail <= own covered end, and nothing is
truncated that no in-sync replica (or this leader) holds durably.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from shoal.errors import KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.admin import delete_records
from shoal.kafka.indexes import ChannelIndexes, IndexQuery, close_offset_readers, read_indexes
from shoal.kafka.settings import KafkaSettings
from shoal.segments import WalRange
from shoal.topics import TopicNames
from storage_node.config import ReplicaLagPolicy
from storage_node.replica import PartitionReplica

log = logging.getLogger(__name__)

KEEP_LAST = 1
"""A WAL channel's Tail stays this many records below what segments cover of it: a leader that
starts again on the channel reads its last GTID from the last covered record
(:mod:`storage_node.roles.leader.recovery`)."""


@dataclass(frozen=True)
class ChainSegment:
    """What Tail needs of one segment of the leader's chain (from the latest major to root)."""

    manifest_offset: int | None
    """Offset of its manifest on the leader's segments channel (None: not published yet)."""
    covered: tuple[WalRange, ...]
    size_bytes: int


def chain_segments(replica: PartitionReplica, manifest_offsets: Mapping[str, int]) -> list[ChainSegment]:
    """The leader's chain from the latest major to root, with manifest offsets and sizes."""
    out = []
    for entry in replica.chain.since_latest_major():
        record = replica.record(entry.segment_id)
        size = record.size_bytes if record is not None else 0
        out.append(ChainSegment(manifest_offsets.get(entry.segment_id), entry.covered, size))
    return out


def channel_end(segments: Iterable[ChainSegment], channel: tuple[str, int]) -> int:
    """One past the last offset of ``channel`` the segments cover (0 if none)."""
    return max((r.end_offset for s in segments for r in s.covered if r.channel == channel), default=0)


def published_end(segments: Iterable[ChainSegment], channel: tuple[str, int]) -> int:
    """One past the last offset of ``channel`` that segments already on the segments channel cover
    (a manifest offset): how far the leader's own WAL Tail may go. A segment flushed but not yet
    published is on the leader's disk only, and the WAL channel holds the only other copy of its rows."""
    return channel_end((s for s in segments if s.manifest_offset is not None), channel)


def lag_bytes(segments: Iterable[ChainSegment], channel: tuple[str, int], ack: int | None) -> int:
    """Pure: the bytes of the leader's segments that cover offsets of ``channel`` at or past ``ack``
    (what a follower with that Ack on the channel still has to receive)."""
    low = ack if ack is not None else 0
    return sum(s.size_bytes for s in segments if any(r.channel == channel and r.end_offset > low for r in s.covered))


@dataclass(frozen=True)
class TailDecision:
    wal_tail: int | None
    """New log start of the WAL channel, or None to leave it."""
    segments_tail: int | None
    segments_acks: tuple[int | None, ...] = ()
    """The in-sync replicas' committed offsets on the segments channel, as read (for garbage collection)."""
    orphan_wal_tails: tuple[tuple[int, int], ...] = ()
    """(placement id, new log start) of other placements' WAL channels."""
    orphan_segments_tails: tuple[tuple[int, int], ...] = ()
    """(placement id, new log start) of other placements' segments channels."""
    ingest_tail: int | None = None
    out_of_sync: frozenset[int] = frozenset()
    """The peers excluded from the decision (as recorded in ZooKeeper)."""


def decide_tail(
    *,
    wal_tail: int,
    wal_acks: Sequence[int | None],
    own_covered_end: int,
    segments_tail: int,
    segments_acks: Sequence[int | None],
    major_offsets: Sequence[int],
    in_sync: Sequence[bool] | None = None,
) -> TailDecision:
    """Pure: where Tail may move on the leader's own channels (None = stay).

    ``*_acks``: one per other replica; ``in_sync``: one per other replica (default: all in sync).
    Out-of-sync replicas do not hold the Tail; with no in-sync peer the WAL Tail follows the own
    covered end and the segments Tail the latest major.
    """
    flags = list(in_sync) if in_sync is not None else [True] * max(len(wal_acks), len(segments_acks))
    wal_in = [a for a, ok in zip(wal_acks, flags, strict=False) if ok]
    seg_in = [a for a, ok in zip(segments_acks, flags, strict=False) if ok]
    new_wal: int | None = None
    if all(a is not None for a in wal_in):
        target = min([own_covered_end, *(a for a in wal_in if a is not None)])
        if target > wal_tail:
            new_wal = target
    new_seg: int | None = None
    if all(a is not None for a in seg_in):
        low_ack = min((a for a in seg_in if a is not None), default=None)
        acked_majors = [m for m in major_offsets if low_ack is None or m < low_ack]
        if acked_majors and max(acked_majors) > segments_tail:
            new_seg = max(acked_majors)
    return TailDecision(new_wal, new_seg, tuple(seg_in))


def decide_orphan_tail(
    *,
    channel: tuple[str, int],
    tail: int,
    append: int,
    segments: Sequence[ChainSegment],
    in_sync_segments_acks: Sequence[int | None],
) -> int | None:
    """Pure: the new Tail of another placement's WAL channel (None = stay): below what the leader's
    published segments cover of it, counting only segments every in-sync replica acked."""
    if any(a is None for a in in_sync_segments_acks):
        return None
    low_ack = min((a for a in in_sync_segments_acks if a is not None), default=None)
    acked = [s for s in segments if s.manifest_offset is not None and (low_ack is None or s.manifest_offset < low_ack)]
    target = min(channel_end(acked, channel) - KEEP_LAST, append)
    return target if target > tail else None


class ReplicaLag:
    """Pure, stateful across passes: which peers are out of sync (Kafka's lastCaughtUpTime rule).

    Each pass records the own covered end and the end of the chain published on the leader's segments
    channel. A peer is caught up to the latest recorded moment whose covered end its WAL Ack reaches
    and whose published end its segments Ack reaches (the chain also holds other placements' data: a
    first-time leader's own covered end is 0), and only while it is alive. It leaves the set when
    that moment is older than ``max_lag_s`` or its lag passes ``max_lag_bytes``; it rejoins once it
    is alive, caught up to the previous pass and within the byte bound. A peer first seen counts as caught up now (a
    new leader gives every follower ``max_lag_s``, as Kafka's does).
    """

    def __init__(self, policy: ReplicaLagPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.clock = clock
        self._samples: deque[tuple[float, int, int]] = deque()
        """(time, own covered end, segments end): a peer reached a sample when its WAL Ack reached the
        covered end AND its segments Ack the end of the chain published then (its WAL Ack alone says
        nothing of the other channels the chain covers: a first-time leader's own end is 0)."""
        self._caught_up: dict[int, float] = {}
        """Per peer: the latest pass whose own covered end its Ack reached while it was alive."""
        self._first_seen: dict[int, float] = {}

    def caught_up_at(self, peer: int) -> float | None:
        return self._caught_up.get(peer)

    def observe(
        self,
        *,
        own_end: int,
        acks: Mapping[int, int | None],
        alive: Iterable[int],
        lag_bytes: Mapping[int, int],
        out_of_sync: Iterable[int],
        segments_acks: Mapping[int, int | None] | None = None,
        segments_end: int = 0,
    ) -> frozenset[int]:
        """The out-of-sync peers among ``acks`` after this pass. ``segments_end``: one past the newest
        manifest of the chain on the leader's segments channel; ``segments_acks``: each peer's Ack there."""
        now = self.clock()
        previous = self._samples[-1][0] if self._samples else now
        self._samples.append((now, own_end, segments_end))
        seg_acks = segments_acks or {}
        horizon = now - 2 * self.policy.max_lag_s
        while len(self._samples) > 2 and self._samples[1][0] < horizon:
            self._samples.popleft()
        live, was_out = set(alive), set(out_of_sync)
        out: set[int] = set()
        for peer, ack in acks.items():
            first_seen = self._first_seen.setdefault(peer, now)
            if peer in live:
                sack = seg_acks.get(peer)
                reached = [
                    t
                    for t, end, send in self._samples
                    if (ack if ack is not None else 0) >= end and (send == 0 or (sack is not None and sack >= send))
                ]
                if reached:
                    self._caught_up[peer] = max(self._caught_up.get(peer, reached[-1]), max(reached))
            caught = self._caught_up.get(peer)
            too_far = lag_bytes.get(peer, 0) > self.policy.max_lag_bytes
            if peer in was_out:  # rejoins only once caught up (the first-seen grace does not count)
                if not (peer in live and caught is not None and caught >= previous and not too_far):
                    out.add(peer)
            elif too_far or now - max(first_seen, caught or first_seen) > self.policy.max_lag_s:
                out.add(peer)
        for gone in set(self._first_seen) - set(acks):
            self._first_seen.pop(gone, None)
            self._caught_up.pop(gone, None)
        return frozenset(out)


class InSyncStore(Protocol):
    """The partition's in-sync set in ZooKeeper (:class:`metadata.in_sync.PartitionInSync`)."""

    def alive(self) -> frozenset[int]: ...

    def out_of_sync(self) -> frozenset[int]: ...

    def mark(self, out_of_sync: Iterable[int]) -> frozenset[int]: ...


@dataclass
class InSyncKeeper:
    """One leader term's in-sync bookkeeping: the lag tracker and the fenced ZooKeeper record."""

    store: InSyncStore
    policy: ReplicaLagPolicy = field(default_factory=ReplicaLagPolicy)
    lag: ReplicaLag | None = None
    current: frozenset[int] | None = None
    """The out-of-sync set as last recorded (None: not read yet)."""

    def update(
        self,
        *,
        own_end: int,
        acks: Mapping[int, int | None],
        lag_bytes: Mapping[int, int],
        segments_acks: Mapping[int, int | None] | None = None,
        segments_end: int = 0,
    ) -> frozenset[int]:
        """Decide the out-of-sync peers, record them (fenced) when they changed, return them.

        Raises (StaleEpochError, ZooKeeper errors) when the set cannot be recorded: the caller then
        truncates nothing.
        """
        if self.lag is None:
            self.lag = ReplicaLag(self.policy)
        if self.current is None:
            self.current = self.store.out_of_sync()
        known = self.current & set(acks)
        wanted = self.lag.observe(
            own_end=own_end,
            acks=acks,
            alive=self.store.alive(),
            lag_bytes=lag_bytes,
            out_of_sync=known,
            segments_acks=segments_acks,
            segments_end=segments_end,
        )
        if wanted != self.current:
            self.current = self.store.mark(wanted)
        return wanted


def truncate(
    kafka: KafkaSettings,
    topics: TopicNames,
    partition_id: str,
    placement_id: int,
    peers: Sequence[int],
    *,
    own_covered_end: int,
    major_offsets: Sequence[int],
    segments: Sequence[ChainSegment] = (),
    sync: InSyncKeeper | None = None,
    admin: AdminClient | None = None,
) -> TailDecision:
    """Read the indexes, update the in-sync set, decide, and ``delete_records`` on the channels.

    ``admin``: the caller's admin client, whose offset readers (a consumer per group,
    ``shoal.kafka.indexes``) it keeps from one pass to the next and closes itself; None = a client
    made for this pass and closed at its end."""
    others = tuple(p for p in peers if p != placement_id)
    groups = tuple(topics.replica_group(partition_id, p) for p in others)
    own_group = topics.replica_group(partition_id, placement_id)
    wal_topic = topics.wal(partition_id, placement_id)
    seg_topic = topics.segments(partition_id, placement_id)
    ingest_topic = topics.ingest(partition_id)
    queries = [
        IndexQuery(wal_topic, groups),
        IndexQuery(seg_topic, groups),
        IndexQuery(ingest_topic, (topics.leader_group(partition_id),)),
        *(IndexQuery(topics.wal(partition_id, p)) for p in others),
        *(IndexQuery(topics.segments(partition_id, p), (own_group,)) for p in others),
    ]
    own = admin is None
    if admin is None:
        admin = clients.admin(kafka)
    try:  # its consumers are closed here, not by a garbage collection on some other thread
        found = read_indexes(admin, queries, timeout_s=10.0)
        if wal_topic not in found or seg_topic not in found:
            raise KafkaOperationError(f"cannot read the indexes of {partition_id}: its channels do not exist yet")
        wal, seg = found[wal_topic], found[seg_topic]
        wal_acks = [a for _, a in wal.acks]
        own_channel = (partition_id, placement_id)
        out: frozenset[int] = frozenset()
        if sync is not None and others:
            out = sync.update(
                own_end=own_covered_end,
                acks=dict(zip(others, wal_acks, strict=True)),
                lag_bytes={p: lag_bytes(segments, own_channel, a) for p, a in zip(others, wal_acks, strict=True)},
                segments_acks=dict(zip(others, [a for _, a in seg.acks], strict=True)),
                segments_end=max((s.manifest_offset for s in segments if s.manifest_offset is not None), default=-1)
                + 1,
            )
        flags = [p not in out for p in others]
        decision = decide_tail(
            wal_tail=wal.tail,
            wal_acks=wal_acks,
            own_covered_end=max(0, own_covered_end - KEEP_LAST),
            segments_tail=seg.tail,
            segments_acks=[a for _, a in seg.acks],
            major_offsets=major_offsets,
            in_sync=flags,
        )
        orphan_wal, orphan_seg = _orphan_tails(topics, partition_id, others, found, segments, decision.segments_acks)
        ingest = found.get(ingest_topic)
        ingest_tail = _ingest_tail(ingest)
        decision = TailDecision(
            decision.wal_tail,
            decision.segments_tail,
            decision.segments_acks,
            orphan_wal,
            orphan_seg,
            ingest_tail,
            out,
        )
        targets = []
        if decision.wal_tail is not None:
            targets.append(TopicPartition(wal_topic, 0, decision.wal_tail))
        if decision.segments_tail is not None:
            targets.append(TopicPartition(seg_topic, 0, decision.segments_tail))
        targets += [TopicPartition(topics.wal(partition_id, p), 0, o) for p, o in orphan_wal]
        targets += [TopicPartition(topics.segments(partition_id, p), 0, o) for p, o in orphan_seg]
        if ingest_tail is not None:
            targets.append(TopicPartition(ingest_topic, 0, ingest_tail))
        _delete_records(admin, targets, partition_id)
        return decision
    finally:
        if own:
            close_offset_readers(admin)


def _orphan_tails(
    topics: TopicNames,
    partition_id: str,
    others: Sequence[int],
    found: Mapping[str, ChannelIndexes],
    segments: Sequence[ChainSegment],
    in_sync_acks: Sequence[int | None],
) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    wal_out, seg_out = [], []
    for p in others:
        w = found.get(topics.wal(partition_id, p))
        if w is not None:
            new = decide_orphan_tail(
                channel=(partition_id, p),
                tail=w.tail,
                append=w.append,
                segments=segments,
                in_sync_segments_acks=in_sync_acks,
            )
            if new is not None:
                wal_out.append((p, new))
        s = found.get(topics.segments(partition_id, p))
        if s is not None:
            own_ack = s.acks[0][1] if s.acks else None
            if own_ack is not None and s.tail < own_ack <= s.append:
                seg_out.append((p, own_ack))
    return tuple(wal_out), tuple(seg_out)


def _ingest_tail(ingest: ChannelIndexes | None) -> int | None:
    if ingest is None or not ingest.acks:
        return None
    accepted = ingest.acks[0][1]
    return accepted if accepted is not None and ingest.tail < accepted <= ingest.append else None


def _delete_records(admin: AdminClient, targets: list[TopicPartition], partition_id: str) -> None:
    delete_records(admin, targets, partition_id)
    for tp in targets:
        log.info("tail of %s moved to %d", tp.topic, tp.offset)
