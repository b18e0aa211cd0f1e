"""The follower role of a partition replica (DESIGN.md section 6; EventQL seed 000 section 3.5).

A replica that does not lead consumes the current leader's segments channel with the consumer
group ``TopicNames.replica_group(partition_id, own placement)`` and, per manifest, applies the
receive procedure (:func:`storage_node.replication.receive.apply_segment`), on its own
:class:`~shoal.worker.Worker` thread ``follow-<pid[:8]>``:

- SEGMENT_EXISTS: skip the chunks, ack;
- FAST_FORWARD / FAST_FORWARD_ADD: stream the chunks to disk (never parsed), verify size and
  sha256, fsync, add the entry and move the root, THEN ack;
- OUT_OF_ORDER: no ack; seek back to the latest major manifest (``latest_major_offset``) and
  replay from there;
- INVALID (corrupt chunk or file, foreign or malformed manifest): reported (log + counter), no ack;
  the segment is fetched again by seeking back to its manifest (a few times, then skipped);
- OVERLOADED: pause the consumer for a while, then fetch the same manifest again.

After a major is applied, the segments it folds (weakly referenced) are deleted at once: the major
is durable locally (:mod:`storage_node.replication.collect`).

An ack is ``commit`` of the offset just past the segment's last chunk, synchronously, so a
replica's committed offset on a channel is exactly the set of segments durable on it (the source's
``acked_servers``). The channels are written in transactions, so a commit marker follows a
transaction's last record: once the consumer reached the end of the channel (a partition EOF,
delivered after every record before it) and every record it delivered is durable, the Ack moves to
that end, the consumer's position past the markers, as Kafka's own position does; Kafka's tools
then show lag 0 on an idle channel. No data record lies between, so the Ack's meaning is unchanged.
The Ack on the leader's WAL channel and the Consume index follow the same rule with the WAL tail's EOF.
The leader is read from the election's epoch znode (its placement id); when it
changes, the follower switches to the new leader's channel, from that group's committed offset
(a channel it never acked on: from its latest major, :meth:`PartitionFollower._latest_major_start`).
The old leader's WAL records in the overlay stay readable until a segment covers them (the new
leader adopts them, DESIGN.md section 7), so fresh reads do not go back in time across a handover
(on an old leader that now follows, its memtable's rows move to the overlay: ``retire_memtable``);
any still uncovered ``retired_overlay_grace_s`` after the change, at the end of the new leader's
segments channel, are dropped and counted (``ReceiveStats.overlay_dropped``).

Bootstrap (:mod:`storage_node.replication.bootstrap`): when the replica is BOOTSTRAPPING, or
positioning on a channel shows its Ack below the channel's Tail (LinDB's handshake rule), the
follower does not trust its committed offsets: it lowers its Acks to what it holds, reads the
segments channel from the latest major (fast-forward, not re-insert) and the WAL channel from what
those segments cover, and reports progress until it is caught up. A replica still recorded as the
leader (it restarted before its session expired) bootstraps from its own channels.

An INVALID segment given up after ``max_refetches`` is not replayed again: the manifests based on
it are skipped too (no ack) until a major that is not referenced arrives and is fast-forward-added,
so the follower neither loops OUT_OF_ORDER nor acks what it does not hold. The overlay keeps the
WAL channel's hash chain and GTID order across records: a record that does not chain from the last
accepted one is reported and skipped, the chain position stays at the last accepted record.

An old leader's major that the new leader never published (a compaction committed as the term
ended) leaves the local root ahead of the leader's chain: at the channel's end, after a grace
period, or as soon as the leader publishes a segment based on one the major folds, the major is
dropped and root goes back to the leader's segment, or the replica bootstraps when the folded
segments are gone (:meth:`PartitionFollower._drop_unpublished_major`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from shoal.errors import KafkaOperationError, ShoalError
from shoal.kafka import clients
from shoal.kafka.admin import create_topic
from shoal.kafka.indexes import channel_indexes
from shoal.kafka.settings import KafkaSettings
from shoal.segments import ReceiveOutcome, file_sha256, read_segment, write_segment_bytes
from shoal.segments.channel import KIND_CHUNK, KIND_MANIFEST, from_wire, message_kind
from shoal.segments.errors import (
    ChecksumMismatchError,
    CorruptSegmentError,
    InvalidSegmentEntryError,
    SegmentFileError,
)
from shoal.segments.parquet_io import segment_path
from shoal.topics import TopicNames
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import Gtid, HashChainError, SegmentChunk, WalRecord, verify_chain
from shoal.wire.records import ManifestRecord as WireManifest
from shoal.worker import Deadline, Worker
from storage_node.config import consumer_overrides
from storage_node.errors import ChunkError
from storage_node.replica import PartitionReplica, PendingRows, WalOverlay, versioned_rows
from storage_node.replication import bootstrap
from storage_node.replication.collect import collect_on_follower
from storage_node.replication.publish import SEGMENTS_TOPIC_CONFIG, push_segments
from storage_node.replication.receive import ApplyResult, InFlightBudget, ReceiveStats, apply_segment

log = logging.getLogger(__name__)

LeaderLookup = Callable[[], int | None]
"""The current leader's placement id (None while there is none, or when it is this replica)."""


@dataclass(frozen=True)
class FollowerConfig:
    kafka: KafkaSettings
    topics: TopicNames = field(default_factory=TopicNames)
    leader_check_s: float = 1.0
    poll_timeout_s: float = 0.5
    chunk_timeout_s: float = 30.0
    max_refetches: int = 3
    """INVALID segments are fetched again this many times before being skipped (and reported)."""
    overload_pause_s: float = 1.0
    out_of_order_pause_s: float = 2.0
    tail_wal: bool = True
    """Tail the leader's WAL channel into an in-memory overlay (fresh reads on this follower)."""
    unpublished_major_grace_s: float = 10.0
    """At the end of the leader's channel, how long a local root major that folds the leader's last
    segment may wait for the leader to publish it before it is judged never published and dropped
    (a new leader republishes its chain within a second or two of taking over)."""
    retired_overlay_grace_s: float = 10.0
    """After a leader change, how long the old leader's WAL records in the overlay stay readable
    without a segment covering them, counted from the change and judged only at the end of the new
    leader's segments channel (its adoption segment normally covers them within a second or two)."""


class PartitionFollower(Worker):
    """Consumes the leader's segments channel into a replica, on its own thread."""

    def __init__(
        self,
        replica: PartitionReplica,
        config: FollowerConfig,
        leader: LeaderLookup,
        *,
        budget: InFlightBudget | None = None,
    ) -> None:
        super().__init__(f"follow-{replica.partition_id[:8]}")
        self.replica = replica
        self.config = config
        self._leader = leader
        self.budget = budget or InFlightBudget()
        self.stats = ReceiveStats()
        self.group_id = config.topics.replica_group(replica.partition_id, replica.placement_id)
        self.leader_placement_id: int | None = None
        self.topic: str | None = None
        self._consumer: Consumer | None = None
        self._wal: Consumer | None = None
        self._wal_topic: str | None = None
        self._wal_prev_hash: bytes | None = None
        self._wal_next: Gtid | None = None
        """The lowest GTID the next WAL record may carry (after the last accepted record's rows)."""
        self._wal_acked = -1
        self._next_leader_check = 0.0
        self._refetches: dict[str, int] = {}
        self._given_up: set[str] = set()
        """Segments skipped as INVALID after ``max_refetches``, and those based on them (never acked)."""
        self._bootstrap_topic: str | None = None
        """The segments channel the current bootstrap positioned on (None: not bootstrapping)."""
        self._repair: set[str] = set()
        self._acked = -1
        self._out_of_order: dict[str, int] = {}
        self._delivered = -1
        """One past the last record the segments consumer delivered (-1: none since it was positioned)."""
        self._eof: int | None = None
        """Where the segments consumer last reached the channel's end (its position past markers)."""
        self._wal_delivered = -1
        self._wal_eof: int | None = None
        self._wal_present: frozenset[int] = frozenset()
        """Offsets of the leader's channel the overlay still held when the tail was opened again
        after a rewind (:meth:`_tail_again`): read again, they are not added twice."""
        self._last_sid: str | None = None
        """The last segment the leader's channel delivered and this replica holds (None: none since
        the follower positioned on the channel): the leader's root as far as this replica knows."""
        self._behind_since: tuple[str, float] | None = None
        """(the leader's last segment, when it was first seen below the local root at the channel's end)."""
        self._retired_since: float | None = None
        """When the overlay last kept a former leader's records at a leader change (None: it holds
        only the current leader's)."""

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> PartitionFollower:
        super().start()
        return self

    def run(self) -> None:
        try:
            self._repair = scrub(self.replica)
            if self._repair:
                log.error(
                    "%s: %d segment files are missing or corrupt; fetching them again: %s",
                    self.replica.name,
                    len(self._repair),
                    sorted(self._repair),
                )
            self._collect()  # weak segments left by a crash between a major's apply and their deletion
            # rows of a leader term that ended here: the next leader adopts them; until a segment
            # covers them they are read from the overlay
            self.replica.retire_memtable()
            while not self.stopping.is_set():
                self._step()
        except BaseException:
            log.exception("%s: follower failed", self.replica.name)
            raise  # the Worker records it as ``error`` (state FAILED)

    def on_exit(self) -> None:
        self._close_consumer()

    def _step(self) -> None:
        """One round; a Kafka or disk error is logged and the round retried (from the same manifest)."""
        offset: int | None = None
        try:
            self._check_leader()
            if self._consumer is None:
                self.stopping.wait(self.config.poll_timeout_s)
                return
            msg = self._poll(self.config.poll_timeout_s if self._wal is None else 0.1)
            if msg is not None:
                offset = int(msg.offset() or 0)
                self._handle(msg)
            else:
                self._ack_past_markers()
                self._reconcile_at_end()
            self._tail_wal()
            self._expire_retired()
            self._check_caught_up()
        except (ShoalError, KafkaException, OSError, ChunkError) as exc:
            self.stats.errors += 1
            log.warning("%s: follower step failed, retrying: %s", self.replica.name, exc)
            self.stopping.wait(1.0)
            if self._consumer is None:
                self.leader_placement_id = None  # follow again at the next leader check
                self._next_leader_check = 0.0
            elif offset is not None:
                with contextlib.suppress(KafkaException):
                    self._seek(offset)

    # -- leader tracking ---------------------------------------------------------------------

    def _check_leader(self) -> None:
        now = time.monotonic()
        if now < self._next_leader_check:
            return
        self._next_leader_check = now + self.config.leader_check_s
        try:
            leader = self._leader()
        except ShoalError as exc:
            log.warning("%s: cannot read the leader: %s", self.replica.name, exc)
            return
        bootstrapping = self.replica.catch_up.bootstrapping
        if leader == self.replica.placement_id and not bootstrapping:
            leader = None
        if leader == self.leader_placement_id and not (bootstrapping and self._bootstrap_topic != self.topic):
            return
        # the old leader's records stay readable until a segment of the new leader covers them
        # (its adoption), so reads here do not lose rows they already returned
        self._close_consumer(keep_overlay=True)
        if self.replica.overlay is not None and self.replica.overlay.records:
            self._retired_since = now
        self.leader_placement_id = leader
        if leader is not None:
            try:
                self._follow(leader)
            except BaseException:
                self._close_consumer(keep_overlay=True)
                self.leader_placement_id = None
                raise

    def _follow(self, leader: int) -> None:
        topic = self.config.topics.segments(self.replica.partition_id, leader)
        admin = clients.admin(self.config.kafka)
        create_topic(admin, topic, policy=self.config.kafka.topics, config=SEGMENTS_TOPIC_CONFIG)
        consumer = clients.consumer(
            self.config.kafka,
            group_id=self.group_id,
            **{**consumer_overrides(4 * 1024 * 1024), "enable.partition.eof": True},
        )
        tp = TopicPartition(topic, 0)
        try:
            committed = int(consumer.committed([tp], timeout=30)[0].offset)
        except KafkaException as exc:
            consumer.close()
            raise KafkaOperationError(f"cannot read the committed offset of {self.group_id} on {topic}: {exc}") from exc
        self._acked, self._delivered, self._eof = committed, -1, None
        self._bootstrap_topic, self._last_sid = None, None
        try:
            reason = self._bootstrap_reason(topic, leader, committed)
            if reason is not None:
                start = self._begin_bootstrap(consumer, topic, leader, reason)
            elif committed >= 0 and not self._repair:
                start = committed
            else:
                # a repair reads again what holds this replica's chain: from the latest major on (what
                # is before it is folded into it; read from the beginning, an older major it no longer
                # lists moved the root back and off the segment repaired), or from its Ack when that
                # is before the major (the segments in between are applied as after any restart)
                start = self._latest_major_start(topic)
                if self._repair and committed >= 0 and start >= 0:
                    start = min(start, committed)
        except BaseException:
            consumer.close()
            raise
        consumer.assign([TopicPartition(topic, 0, start)])
        self._consumer, self.topic = consumer, topic
        if self.config.tail_wal and self._bootstrap_topic is None:  # a bootstrap opens it after the segments
            self._open_wal(leader)
        log.info("%s: following placement %d on %s from offset %s", self.replica.name, leader, topic, start)

    # -- bootstrap (storage_node.replication.bootstrap) -------------------------------------------

    def _bootstrap_reason(self, topic: str, leader: int, committed: int) -> str | None:
        """BOOTSTRAPPING already, an empty replica with an Ack on the channel, or an Ack below a
        channel's Tail (LinDB's handshake rule)."""
        if self.replica.catch_up.bootstrapping:
            return self.replica.catch_up.snapshot().reason or "requested"
        segments = channel_indexes(self.config.kafka, topic, timeout_s=10)
        wal_topic = self.config.topics.wal(self.replica.partition_id, leader)
        try:
            wal = channel_indexes(self.config.kafka, wal_topic, (self.group_id,), timeout_s=10)
            wal_ack, wal_tail = wal.ack(self.group_id), wal.tail
        except KafkaOperationError:  # the leader has not created its WAL channel yet
            wal_ack, wal_tail = None, 0
        return bootstrap.bootstrap_reason(
            bootstrap.ReplicaPosition(
                empty=self.replica.empty,
                # an empty replica with an Ack on this channel lost its data dir: it bootstraps (and
                # lowers that Ack) instead of resuming past what it no longer holds; the node's own
                # check never runs for a split's LOAD target, which follows its staging channel
                acked_history=committed > 0,
                segments_ack=committed if committed >= 0 else None,
                segments_tail=segments.tail,
                wal_ack=wal_ack,
                wal_tail=wal_tail,
            )
        )

    def _latest_major_start(self, topic: str) -> int:
        """Where a replica that never acked on a leader's channel starts reading it: at the latest
        major (:func:`bootstrap.find_latest_major`), as a bootstrap does, else from the beginning.

        The segments before that major on the channel are folded into it or belong to an older term
        of this placement's leadership. Read from the beginning, such an older major, no longer in
        the history of this replica's latest major, was fast-forward-added and moved the root back:
        scans went back in time until the replay reached the newer major (source 3.4: a leader
        offers from its most recent major on)."""
        try:
            segments = channel_indexes(self.config.kafka, topic, timeout_s=10)
            latest = bootstrap.find_latest_major(self.config.kafka, topic, tail=segments.tail, end=segments.append)
        except (ShoalError, KafkaException) as exc:
            log.warning("%s: cannot find the latest major on %s, reading it all: %s", self.replica.name, topic, exc)
            return OFFSET_BEGINNING
        return latest if latest is not None else OFFSET_BEGINNING

    def _begin_bootstrap(self, consumer: Consumer, topic: str, leader: int, reason: str) -> int:
        """Position on the latest major; lower the Acks to what this replica holds; set the targets."""
        bootstrap.request_bootstrap(self.replica, reason)
        segments = channel_indexes(self.config.kafka, topic, timeout_s=10)
        latest = bootstrap.find_latest_major(self.config.kafka, topic, tail=segments.tail, end=segments.append)
        start = bootstrap.start_offset(segments.tail, latest)
        wal_topic = self.config.topics.wal(self.replica.partition_id, leader)
        covered = self._leader_channel_end(leader)
        try:
            wal_end = channel_indexes(self.config.kafka, wal_topic, timeout_s=10).append
        except KafkaOperationError:
            wal_end = 0
        offsets = [TopicPartition(topic, 0, start)]
        if wal_end > 0:
            offsets.append(TopicPartition(wal_topic, 0, covered))
        consumer.commit(offsets=offsets, asynchronous=False)  # Ack = what is durable here, nothing more
        self._acked, self._wal_acked = start, covered
        self._bootstrap_topic = topic
        self.replica.catch_up.targets(topic, start, segments.append, covered, wal_end)
        log.warning(
            "%s: bootstrapping (%s) from %s offset %d (latest major %s) to %d; WAL %s [%d, %d)",
            self.replica.name,
            reason,
            topic,
            start,
            latest,
            segments.append,
            wal_topic,
            covered,
            wal_end,
        )
        return start

    def _check_caught_up(self) -> None:
        catch_up = self.replica.catch_up
        if not catch_up.bootstrapping or self._bootstrap_topic is None or self._bootstrap_topic != self.topic:
            return
        snap = catch_up.snapshot()
        leader = self.leader_placement_id
        if self._acked >= snap.target_offset and self._wal is None and self.config.tail_wal and leader is not None:
            self._open_wal(leader)  # segments first, then the WAL channel from what they cover
        wal = -1
        if self._wal is not None and leader is not None:
            wal = max(self._wal_delivered, self._wal_eof or 0, self._wal_acked, self._leader_channel_end(leader))
            catch_up.progress(wal_fetched=wal)
        done = bootstrap.caught_up(
            segments_acked=self._acked,
            segments_target=snap.target_offset,
            wal_position=wal,
            wal_target=snap.wal_target,
            tail_wal=self.config.tail_wal,
        )
        if done:
            catch_up.finish()
            self._bootstrap_topic = None
            info = catch_up.snapshot().as_dict()
            log.warning("%s: bootstrap done, eligible again: %s", self.replica.name, info)

    def _close_consumer(self, *, keep_overlay: bool = False) -> None:
        """Close both consumers; the overlay is emptied unless ``keep_overlay`` (a leader change:
        :meth:`_expire_retired` drops the old leader's records)."""
        for c in (self._consumer, self._wal):
            if c is not None:
                with contextlib.suppress(KafkaException, RuntimeError):
                    c.close()
        self._consumer, self.topic, self._wal, self._wal_topic = None, None, None, None
        if self.replica.overlay is not None and not keep_overlay:
            self.replica.overlay.clear()
            self._retired_since = None

    # -- the leader's WAL channel: overlay (Consume index) and Ack index ---------------------------

    def _leader_channel_end(self, leader: int) -> int:
        """One past the last offset of the leader's WAL channel that this replica's segments cover."""
        channel = (self.replica.partition_id, leader)
        return max((r.end_offset for r in self.replica.chain.coverage() if r.channel == channel), default=0)

    def _open_wal(self, leader: int, *, keep_present: bool = False) -> None:
        """Tail the leader's WAL channel from what segments cover, into the replica's overlay.
        ``keep_present``: the overlay keeps the records of that channel it holds, and the tail skips
        them (after a rewind; otherwise they are dropped and tailed again)."""
        topic = self.config.topics.wal(self.replica.partition_id, leader)
        consumer = clients.consumer(
            self.config.kafka,
            group_id=self.config.topics.consume_group(self.replica.partition_id, self.replica.placement_id),
            **{**consumer_overrides(64 * 1024 * 1024), "enable.partition.eof": True},
        )
        start = self._leader_channel_end(leader)
        consumer.assign([TopicPartition(topic, 0, start)])
        self._wal, self._wal_topic, self._wal_prev_hash, self._wal_next = consumer, topic, None, None
        self._wal_acked, self._wal_delivered, self._wal_eof = -1, -1, None
        if self.replica.overlay is None:
            self.replica.overlay = WalOverlay()
        channel = (self.replica.partition_id, leader)
        if keep_present:
            self._wal_present = frozenset(self.replica.overlay.offsets(channel))
        else:
            self._wal_present = frozenset()
            self.replica.overlay.drop_channels(lambda c: c != channel)  # tailed again from what segments cover

    def _expire_retired(self) -> None:
        """Drop a former leader's overlay records that no segment covered in time.

        The new leader adopts every committed record of the old leader's WAL channel into a segment
        (``storage_node.replication.adopt``) or already holds it in one, and the follower's apply
        drops each record a segment covers. Records left ``retired_overlay_grace_s`` after the
        change, with the new leader's segments channel read to its end, are not coming (an unclean
        election whose leader lacks them): they are dropped, counted and logged."""
        since, overlay = self._retired_since, self.replica.overlay
        if since is None:
            return
        current = None if self.leader_placement_id is None else (self.replica.partition_id, self.leader_placement_id)
        if overlay is None or not overlay.channels() - {current}:
            self._retired_since = None
            return
        if self._eof is None or time.monotonic() - since < self.config.retired_overlay_grace_s:
            return
        records, rows = overlay.drop_channels(lambda c: c == current)
        self._retired_since = None
        self.stats.overlay_dropped += records
        log.warning(
            "%s: dropped %d former leaders' WAL records (%d rows) from the overlay: no segment of placement "
            "%s covered them within %.0f s",
            self.replica.name,
            records,
            rows,
            self.leader_placement_id,
            self.config.retired_overlay_grace_s,
        )

    def _overlay_rows(self, record: WalRecord, schema: pa.Schema, offset: int) -> pa.Table | None:
        """A tailed WAL record's rows, versioned with its GTIDs, decoded by the first read that wants
        them; None (reported here) when the record chained but its rows do not decode."""
        try:
            return versioned_rows(record.rows(schema), record.gtid)
        except ShoalError as exc:
            self.stats.invalid += 1
            log.error(
                "%s: WAL record at offset %s of %s is invalid: %s", self.replica.name, offset, self._wal_topic, exc
            )
            return None

    def _tail_wal(self) -> None:
        if self._wal is None or self.leader_placement_id is None:
            return
        msgs = self._wal.consume(200, 0.05)
        channel = (self.replica.partition_id, self.leader_placement_id)
        overlay = self.replica.overlay
        data = [m for m in msgs if m.error() is None]
        for m in msgs:
            err = m.error()
            if err is None:
                self._wal_delivered, self._wal_eof = int(m.offset() or 0) + 1, None
            elif err.code() == KafkaError._PARTITION_EOF:
                self._wal_eof = int(m.offset() or 0)
        if data and overlay is not None:
            coverage = self.replica.chain.coverage()
            table = self.replica.table
            schema = ingest_schema(table.arrow_schema(), table.primary_key)
            for m in data:
                try:
                    record = WalRecord.from_bytes(m.value())
                    self._check_wal_chain(record)
                    # it chains: it is the leader's record, so the chain moves on even if its rows
                    # do not decode (a record that does not chain leaves the position where it was)
                    self._wal_prev_hash = record.hash
                    self._wal_next = Gtid(record.gtid.epoch, record.gtid.seq + max(record.row_count, 1))
                    # decoded by the first read that wants them: most records leave the overlay
                    # (covered by a fast-forwarded segment) before any scan does
                    offset = int(m.offset() or 0)
                    rows = PendingRows(record.row_count, partial(self._overlay_rows, record, schema, offset))
                except ShoalError as exc:
                    self.stats.invalid += 1
                    log.error(
                        "%s: WAL record at offset %s of %s is invalid: %s",
                        self.replica.name,
                        m.offset(),
                        self._wal_topic,
                        exc,
                    )
                    continue
                if offset in self._wal_present:
                    continue  # still in the overlay from before the rewind (:meth:`_tail_again`)
                overlay.add(channel, offset, rows, coverage)
                self.stats.wal_records_tailed += 1
            with contextlib.suppress(KafkaException):
                self._wal.commit(asynchronous=True)  # the Consume (Replica) index, for monitoring
        self._ack_wal()

    def _check_wal_chain(self, record: WalRecord) -> None:
        """The record names the tailed channel, chains from the last accepted one (hash) and its
        GTID follows its rows (``verify_chain`` of one record cannot compare its channel with anything)."""
        channel = (self.replica.partition_id, self.leader_placement_id)
        if (record.partition_id, record.placement_id) != channel:
            raise HashChainError(
                0, record.gtid, f"names partition {record.partition_id} placement {record.placement_id}, not {channel}"
            )
        verify_chain([record], prev_hash=self._wal_prev_hash)
        after = self._wal_next
        gtid = record.gtid
        if after is not None and (gtid.epoch, gtid.seq) < (after.epoch, after.seq):
            raise HashChainError(0, gtid, f"gtid does not follow the previous record's rows (expected >= {after})")

    def _ack_wal(self) -> None:
        """Ack index on the leader's WAL channel = what this replica's durable segments cover, or the
        tail's position past the commit markers when the tail is at the end and every record it
        delivered is covered (no data record lies between)."""
        if self._consumer is None or self._wal_topic is None or self.leader_placement_id is None:
            return
        end = self._leader_channel_end(self.leader_placement_id)
        eof = self._wal_eof
        if eof is not None and self._wal_delivered <= end < eof:
            end = eof
            if self._wal is not None:
                with contextlib.suppress(KafkaException):  # the Consume index, past the markers too
                    self._wal.commit(offsets=[TopicPartition(self._wal_topic, 0, eof)], asynchronous=True)
        if end > self._wal_acked:
            self._consumer.commit(offsets=[TopicPartition(self._wal_topic, 0, end)], asynchronous=False)
            self._wal_acked = end

    # -- consuming ---------------------------------------------------------------------------

    def _poll(self, timeout: float) -> Message | None:
        assert self._consumer is not None
        msg = self._consumer.poll(timeout)
        if msg is None:
            return None
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                self._eof = int(msg.offset() or 0)
                if self._bootstrap_topic is not None:
                    self.replica.catch_up.progress(fetched=self._eof)
            else:
                log.warning("%s: segments consumer: %s", self.replica.name, err)
            return None
        self._delivered, self._eof = int(msg.offset() or 0) + 1, None
        if self._bootstrap_topic is not None:
            self.replica.catch_up.progress(fetched=self._delivered)
        return msg

    def _seek(self, offset: int) -> None:
        assert self._consumer is not None and self.topic is not None
        self._consumer.assign([TopicPartition(self.topic, 0, offset)])
        self._delivered, self._eof = -1, None

    def _ack_past_markers(self) -> None:
        """At the channel's end with every delivered record acked: Ack = the position past the markers."""
        eof = self._eof
        consumer, topic = self._consumer, self.topic
        if eof is not None and consumer is not None and topic is not None and self._delivered <= self._acked < eof:
            consumer.commit(offsets=[TopicPartition(topic, 0, eof)], asynchronous=False)
            self._acked = eof

    def _ack(self, next_offset: int) -> None:
        """Commit ``next_offset`` (only forwards: a replay from the latest major never lowers the Ack)."""
        assert self._consumer is not None and self.topic is not None
        if next_offset <= self._acked:
            return
        self._consumer.commit(offsets=[TopicPartition(self.topic, 0, next_offset)], asynchronous=False)
        self._acked = next_offset
        self.stats.acks += 1

    def _handle(self, msg: Message) -> None:
        kind = message_kind(msg.headers())
        offset = int(msg.offset() or 0)
        if kind == KIND_CHUNK:
            return  # chunks of a segment skipped after a seek; nothing to do
        if kind != KIND_MANIFEST:
            self._report(offset, f"message without a known {kind!r} kind header")
            return
        assert self.leader_placement_id is not None
        try:
            wire = WireManifest.from_bytes(msg.value())
            manifest = from_wire(wire, sender_placement_id=self.leader_placement_id, topics=self.config.topics)
        except (ShoalError, InvalidSegmentEntryError) as exc:
            self._report(offset, f"manifest does not decode: {exc}")
            return
        last = [offset]
        chunks = self._chunks(wire, last)
        if wire.segment_id in self._repair:
            self._repair_file(wire, chunks, offset, last)
            return
        if self._skip_given_up(manifest.segment_id, manifest.base_segment_id, manifest.is_major, offset):
            return
        try:
            result = apply_segment(
                self.replica, manifest, chunks, leader_placement_id=self.leader_placement_id, budget=self.budget
            )
        except ChunkError as exc:
            result = ApplyResult(ReceiveOutcome.INVALID, f"segment {wire.segment_id}: {exc}")
        self.stats.count(result)
        sid = wire.segment_id
        outcome = result.outcome
        if outcome.acks:
            broken = False
            if outcome is ReceiveOutcome.SEGMENT_EXISTS:
                broken = self._skip_chunks(chunks, sid)  # then ack past them
            elif self._bootstrap_topic is not None:
                self.replica.catch_up.progress(segment_bytes=result.bytes_written)
            if manifest.is_major and outcome is not ReceiveOutcome.SEGMENT_EXISTS:
                self._given_up.clear()  # a new major replaces whatever was skipped
            self._ack(last[0] + 1)
            self._last_sid = sid
            self._refetches.pop(sid, None)
            self._out_of_order.pop(sid, None)
            if outcome in (ReceiveOutcome.FAST_FORWARD, ReceiveOutcome.FAST_FORWARD_ADD) and manifest.is_major:
                self._collect()
            if broken:
                self._seek(last[0] + 1)  # the record that broke the chunks is read as what it is
        elif outcome is ReceiveOutcome.INVALID:
            n = self._refetches.get(sid, 0) + 1
            self._refetches[sid] = n
            log.error("%s: INVALID segment at offset %d (attempt %d): %s", self.replica.name, offset, n, result.reason)
            if n <= self.config.max_refetches:
                self.stats.refetches += 1
                self._seek(offset)  # fetch it again
            else:
                self._given_up.add(sid)
                log.error(
                    "%s: segment %s skipped after %d attempts; waiting for a major that replaces it",
                    self.replica.name,
                    sid,
                    n,
                )
        elif outcome is ReceiveOutcome.OVERLOADED:
            log.info("%s: OVERLOADED, pausing: %s", self.replica.name, result.reason)
            self.stopping.wait(self.config.overload_pause_s)
            self._seek(offset)
        elif outcome is ReceiveOutcome.OUT_OF_ORDER:
            n = self._out_of_order.get(sid, 0) + 1
            self._out_of_order[sid] = n
            target = wire.latest_major_offset
            log.warning(
                "%s: OUT_OF_ORDER at offset %d (%s); replaying from %s",
                self.replica.name,
                offset,
                result.reason,
                target,
            )
            base = manifest.base_segment_id
            if n > 1 and (self._diverged(base) or self._drop_unpublished_major(base)):
                self.stopping.wait(self.config.out_of_order_pause_s)
                self._seek(offset)  # the same manifest again, now based on the (rewound) root
                return
            if n > 1:
                self.stopping.wait(self.config.out_of_order_pause_s)
            self._seek(target if target is not None and target < offset else OFFSET_BEGINNING)

    def _skip_chunks(self, chunks: Iterator[bytes], sid: str) -> bool:
        """Read past the chunks of a segment this replica holds already; True when a record among
        them is not its next chunk (garbage on the channel, or a chunk that did not arrive): the
        chunks are not needed, so the follower goes on from that record instead of reading the
        manifest again for ever."""
        try:
            for _ in chunks:
                pass
        except ChunkError as exc:
            self.stats.invalid += 1
            log.error(
                "%s: segment %s is held already; its chunks on the channel are broken: %s", self.replica.name, sid, exc
            )
            return True
        return False

    def _skip_given_up(self, sid: str, base: str | None, is_major: bool, offset: int) -> bool:
        """A segment given up as INVALID, or a minor based on one, is skipped without an ack and not
        replayed (its chunks are skipped as they arrive): only a major can replace it."""
        if not self._given_up or is_major:
            return False
        if sid not in self._given_up and base not in self._given_up:
            return False
        if sid not in self._given_up:
            self._given_up.add(sid)
            log.error(
                "%s: segment %s at offset %d is based on a skipped segment; skipped too", self.replica.name, sid, offset
            )
        return True

    def _collect(self) -> None:
        """Source 3.5 follower procedure, DELETE: the major is durable here, drop what it folds."""
        try:
            self.stats.deleted += len(collect_on_follower(self.replica))
        except ShoalError as exc:
            log.warning("%s: segment garbage collection failed: %s", self.replica.name, exc)

    def _diverged(self, base: str | None) -> bool:
        """After a replay from the latest major did not help: rewind root to ``base`` if it is on our chain.

        That happens to an old leader that returns, or to a follower that received segments the new
        leader never got: the new leader adopted the rows of those segments from the old leader's
        WAL channel, so the local segments above ``base`` are left unreferenced and the leader's
        chain is followed from ``base`` on.
        """
        chain = self.replica.chain
        if base is None or base not in {s.segment_id for s in chain.walk()} or base == chain.root:
            return False
        above = []
        for s in chain.walk():
            if s.segment_id == base:
                break
            above.append(s.segment_id)
        self._keep_readable(above)
        self.replica.rewind(base)
        self.stats.rewinds += 1
        self._tail_again()
        try:  # PUSH what the leader lacks; it merges them (its rows were adopted already: defence in depth)
            pushed = [r for r in self.replica.detached() if r.segment_id in above]
            self.stats.pushed += push_segments(
                self.replica,
                pushed,
                kafka=self.config.kafka,
                topics=self.config.topics,
            )
        except ShoalError as exc:
            log.warning("%s: pushing detached segments failed: %s", self.replica.name, exc)
        log.warning(
            "%s: chain diverged from the leader's; root rewound to %s, detached %s", self.replica.name, base, above
        )
        return True

    def _keep_readable(self, segment_ids: list[str]) -> None:
        """Before a rewind: the rows of the segments leaving the chain go to the overlay, as records
        of the channels they cover, so reads do not go back in time until the leader's segment that
        holds them arrives (and drops them as covered), or :meth:`_expire_retired` drops them."""
        if self.replica.overlay is None:
            self.replica.overlay = WalOverlay()
        for sid in segment_ids:
            entry = self.replica.chain.get(sid)
            if entry is None:
                continue
            try:
                rows = read_segment(self.replica.directory, sid).replace_schema_metadata(None)
            except (ShoalError, OSError) as exc:  # a damaged file must not stop the rewind for ever
                log.warning("%s: detached segment %s is unreadable, not kept readable: %s", self.replica.name, sid, exc)
                continue
            for r in entry.covered:
                self.replica.overlay.add(r.channel, r.end_offset - 1, rows)
        self._retired_since = time.monotonic()

    def _reconcile_at_end(self) -> None:
        """At the end of the leader's channel the local root is the leader's last segment, unless
        this replica holds a major the leader never published (:meth:`_drop_unpublished_major`)."""
        last = self._last_sid
        if self._eof is None or last is None or self.replica.catch_up.bootstrapping:
            return
        if self.replica.chain.root == last:
            self._behind_since = None
            return
        now = time.monotonic()
        if self._behind_since is None or self._behind_since[0] != last:
            self._behind_since = (last, now)
        if now - self._behind_since[1] >= self.config.unpublished_major_grace_s:
            self._behind_since = None
            self._drop_unpublished_major(last, minors_above=False)

    def _drop_unpublished_major(self, leader_sid: str | None, *, minors_above: bool = True) -> bool:
        """Drop the local major that folds the leader's segment ``leader_sid`` but that the leader
        never published, with the minors above it; True if it did.

        An old leader can commit a compaction and lose the leadership before publishing it (the
        intake commits, then a handover or a crash ends the term). The new leader refuses that major
        as stale (its epoch ended) and goes on from the segments below it, so the local chain is
        ahead of the leader's: segments the leader bases on ``leader_sid`` would be OUT_OF_ORDER
        here for ever (the major's folded segments, ``leader_sid`` among them, may already be
        deleted, so :meth:`_diverged` cannot rewind), and ``shoal verify`` reports the replica as
        different. A major holds no row of its own (it folds segments; rows of folded segments the
        new leader lacks were adopted from the old leader's WAL channel), so it is dropped without a
        push. Minors the old leader flushed above it (only when ``minors_above``: once the leader
        published past ``leader_sid``) are pushed to the leader, as :meth:`_diverged` does, and
        dropped once pushed. Root goes back to ``leader_sid`` when that entry is still here;
        otherwise the chain is emptied and the replica bootstraps (fast-forward from the leader's
        latest major, not eligible until caught up).
        """
        chain = self.replica.chain
        above: list[str] = []
        major = None
        for s in chain.walk():
            if s.is_major:
                major = s
                break
            above.append(s.segment_id)
        if leader_sid is None or major is None or leader_sid not in major.included_segment_ids:
            return False
        if above and not minors_above:
            return False
        on_chain = leader_sid in {s.segment_id for s in chain.walk()}
        if not on_chain:
            # durably BOOTSTRAPPING before the root moves to NULL: a replica emptied this way must
            # not serve its empty chain, nor campaign with it after a crash in between
            bootstrap.request_bootstrap(
                self.replica, f"local major {major.segment_id} was never published by the leader"
            )
        self.replica.rewind(leader_sid if on_chain else None)
        kept: set[str] = set()
        if above:
            pushed = [r for r in self.replica.detached() if r.segment_id in above]
            try:
                self.stats.pushed += push_segments(
                    self.replica, pushed, kafka=self.config.kafka, topics=self.config.topics
                )
            except ShoalError as exc:
                kept = set(above)  # unreferenced, as after a rewind: merged if this replica leads again
                log.warning("%s: pushing the minors above an unpublished major failed: %s", self.replica.name, exc)
        drop = [major.segment_id, *above] if on_chain else [r.segment_id for r in self.replica.detached()]
        self.replica.delete_segments([s for s in drop if s not in kept])
        self.stats.rewinds += 1
        log.warning(
            "%s: local major %s (epoch %d) was never published by the leader, whose chain ends at %s; dropped it%s; %s",
            self.replica.name,
            major.segment_id,
            major.epoch,
            leader_sid,
            f" and the minors above it {above}" if above else "",
            "root moved back to it" if on_chain else "its folded segments are gone here: bootstrapping",
        )
        if on_chain:
            self._tail_again()
        return True

    def _tail_again(self) -> None:
        """After a rewind: tail the leader's WAL channel again from what the chain now covers (the
        records the detached segments covered left the overlay when those segments arrived); the
        records the overlay still holds stay readable meanwhile and are not added twice."""
        if self._wal is not None and self.leader_placement_id is not None:
            self._wal.close()
            self._wal = None
            self._open_wal(self.leader_placement_id, keep_present=True)

    def _chunks(self, wire: WireManifest, last: list[int]) -> Iterator[bytes]:
        """The manifest's chunks, in order, as they arrive (updates ``last[0]`` to each chunk's offset)."""
        for index in range(wire.chunk_count):
            deadline = Deadline(self.config.chunk_timeout_s)
            msg = None
            while msg is None:
                if self.stopping.is_set() or deadline.expired():
                    raise ChunkError(wire.segment_id, index, f"chunk {index} of {wire.chunk_count} did not arrive")
                msg = self._poll(self.config.poll_timeout_s)
            if message_kind(msg.headers()) != KIND_CHUNK:
                raise ChunkError(
                    wire.segment_id, index, f"expected chunk {index}, got another message at offset {msg.offset()}"
                )
            try:
                chunk = SegmentChunk.from_bytes(msg.value())
            except ShoalError as exc:
                raise ChunkError(wire.segment_id, index, f"chunk {index} does not decode: {exc}") from exc
            if (chunk.segment_id, chunk.index, chunk.count) != (wire.segment_id, index, wire.chunk_count):
                raise ChunkError(
                    wire.segment_id,
                    index,
                    f"chunk {chunk.segment_id}[{chunk.index}/{chunk.count}] where {index} was expected",
                )
            last[0] = int(msg.offset() or 0)
            yield chunk.data

    def _repair_file(self, wire: WireManifest, chunks: Iterator[bytes], offset: int, last: list[int]) -> None:
        """Write a chain segment's missing or corrupt file again from the channel (verified, fsynced)."""
        record = self.replica.record(wire.segment_id)
        if record is None or record.sha256 != wire.checksum:
            self._repair.discard(wire.segment_id)
            return
        try:
            write_segment_bytes(
                self.replica.directory,
                wire.segment_id,
                chunks,
                expected_sha256=record.sha256,
                expected_size=record.size_bytes,
            )
        except (ChecksumMismatchError, CorruptSegmentError, ChunkError) as exc:
            self.stats.invalid += 1
            n = self._refetches.get(wire.segment_id, 0) + 1
            self._refetches[wire.segment_id] = n
            if n > self.config.max_refetches:
                self._repair.discard(wire.segment_id)
                self._refetches.pop(wire.segment_id, None)
                log.error(
                    "%s: repairing segment %s failed %d times (%s); given up: scans refuse its file until a "
                    "major replaces it or a scrub finds it again",
                    self.replica.name,
                    wire.segment_id,
                    n,
                    exc,
                )
                self._seek(last[0] + 1)
                return
            self.stats.refetches += 1
            log.error("%s: repairing segment %s failed, fetching again: %s", self.replica.name, wire.segment_id, exc)
            self.stopping.wait(self.config.overload_pause_s)
            self._seek(offset)
            return
        self._repair.discard(wire.segment_id)
        self._refetches.pop(wire.segment_id, None)
        self.stats.repaired += 1
        log.warning("%s: segment %s fetched again and repaired", self.replica.name, wire.segment_id)
        self._ack(last[0] + 1)

    def _report(self, offset: int, why: str) -> None:
        self.stats.invalid += 1
        log.error("%s: INVALID message at offset %d of %s: %s", self.replica.name, offset, self.topic, why)


def scrub(replica: PartitionReplica) -> set[str]:
    """Ids of the chain's segments (latest major to root) whose file is missing or fails its sha256."""
    bad: set[str] = set()
    for entry in replica.chain.since_latest_major():
        record = replica.record(entry.segment_id)
        if record is None:
            continue
        try:
            ok = file_sha256(segment_path(replica.directory, entry.segment_id)) == record.sha256
        except SegmentFileError:
            ok = False
        if not ok:
            bad.add(entry.segment_id)
    return bad
