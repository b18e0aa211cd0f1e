"""The leader role of one partition replica (DESIGN.md section 4, LinDB local replication).

Loop (:meth:`PartitionLeader.step`), on the leader's own thread:

1. consume a batch of ingest messages (``read_committed``, group ``TopicNames.leader_group``): wait
   for the first one, then take every message already fetched (:func:`ingest_batch`);
2. re-validate each one (:mod:`storage_node.replica.validate`); refused ones go to the
   deadletter topic with headers naming the reason, the source topic, partition and offset
   (:mod:`.deadletter`);
3. stamp GTIDs: the epoch comes from the election, each row gets its own consecutive ``seq``;
   the WAL record's payload is the validated ingest stream itself (no re-encoding) and it is
   chained to the previous record by ``hash``;
4. in ONE Kafka transaction: produce the WAL records to this placement's channel and the refused
   messages to deadletter, and commit the ingest offsets (``send_offsets_to_transaction``), through
   the core's :class:`~shoal.kafka.transaction.TransactionalChannel` (commit on exit, abort on an
   exception, every call bounded). Its ``transactional.id`` is the channel topic, so a new
   incarnation fences a zombie (:mod:`.transaction`);
5. after the commit, append the stamped rows to the memtable; when the
   :class:`~storage_node.config.FlushPolicy` says so, hand its flush to a segment to the
   :class:`~.flusher.MemtableFlusher` (thread ``flush-<pid8>``) and go on consuming.

Before consuming, a step sleeps ``minor_stall_s`` while more than ``max_minors_before_stall``
minors await compaction (the writer stall, DESIGN.md section 9: :meth:`PartitionLeader.stall`),
and every ``gc_every_s`` it merges then deletes the segments the chain does not reference (source
3.5, :meth:`PartitionLeader.collect_unreferenced`).

Start-up (:meth:`PartitionLeader.open`) is recovery: open the channel (``init_transactions`` aborts
whatever a dead incarnation left open and fences it), then replay the channel from the offset the last durable
segment covers (:mod:`.recovery`), adopt the other placements' WAL channels
(:mod:`storage_node.replication.adopt`), fence their segments channels, start the flusher, the
segment publisher and the peer segment receiver, then consume ingest from the leader group's
committed offset.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from metadata.keyspace import KeyRange
from shoal.errors import KafkaOperationError, ShoalError, StaleEpochError
from shoal.kafka import clients
from shoal.kafka.admin import TRUNCATED_BY_TAIL, create_topic
from shoal.kafka.transaction import Transaction, TransactionalChannel
from shoal.wire.records import Gtid, IngestOffset, WalRecord
from shoal.worker import Backoff, Deadline, Worker, wait_any
from storage_node.config import LeaderConfig, consumer_overrides
from storage_node.errors import FencedError, NotLeadingError
from storage_node.replica import IngestValidator, PartitionReplica, Rejected, minor_backlog, versioned_rows
from storage_node.replication.adopt import adopt_channels
from storage_node.replication.collect import merge_unreferenced, unreferenced_segments
from storage_node.replication.merge_in import MergeJob, PeerSegmentReceiver, drain_merges
from storage_node.replication.publish import SegmentPublisher, fence_segments_channels
from storage_node.replication.tail import InSyncKeeper
from storage_node.roles.leader.deadletter import produce_deadletter
from storage_node.roles.leader.flusher import MemtableFlusher
from storage_node.roles.leader.recovery import (
    ChainPosition,
    GtidRegressionError,
    chain_high_gtid,
    check_above,
    committed_offset,
    first_seq,
    highest,
    replay_wal,
)
from storage_node.roles.leader.transaction import delivery_recorder, leader_error, message_offset, wal_channel

log = logging.getLogger(__name__)

T = TypeVar("T")


def ingest_batch(consumer: Consumer, max_messages: int, timeout_s: float) -> list[Message]:
    """Up to ``max_messages`` ingest messages, returned as soon as there is one.

    Waits up to ``timeout_s`` for the first message only, then takes what the consumer has already
    fetched without waiting. ``consume(n, timeout)`` blocks for the whole timeout unless ``n``
    messages arrive, which at a low rate put up to ``timeout_s`` between a write and its
    transaction (the leader's ``poll_timeout_s``). Under load the messages that arrived during the
    previous transaction are all fetched already, so transactions stay as large as before.
    """
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    return [first, *consumer.consume(max_messages - 1, 0)] if max_messages > 1 else [first]


class LeaderRoleState(enum.Enum):
    STARTING = "STARTING"
    LEADING = "LEADING"
    STOPPED = "STOPPED"
    """Stopped on request or because the election says it no longer leads."""
    FENCED = "FENCED"
    """A newer incarnation took the channel, or the epoch is older than the channel's: commits nothing more."""
    FAILED = "FAILED"


@dataclass
class LeaderStats:
    replayed_records: int = 0
    replayed_rows: int = 0
    transactions: int = 0
    wal_records: int = 0
    rows: int = 0
    deadlettered: int = 0
    decoded_limit_splits: int = 0
    """Transactions ended early because their messages' decoded rows reached
    ``max_transaction_decoded_bytes`` (the rest went to the next transaction)."""
    adopted_segments: int = 0
    merged_segments: int = 0
    segments: int = 0
    stalls: int = 0
    """Loop steps slowed because too many minors awaited compaction (writer stall)."""
    stall_episodes: int = 0
    startup_retries: int = 0
    """Start-up steps retried after a transient Kafka error."""


class PartitionLeader(Worker):
    """Leads one partition replica, on its own :class:`~shoal.worker.Worker` thread ``leader-<pid[:8]>``.

    ``epoch()`` returns the current leader epoch, or raises (e.g.
    ``PartitionElection.check_writable().epoch``) when this replica must not write. ``role_state``
    is the role's :class:`LeaderRoleState`; ``state`` the thread's :class:`~shoal.worker.WorkerState`.
    """

    def __init__(
        self,
        replica: PartitionReplica,
        config: LeaderConfig,
        epoch: Callable[[], int],
        *,
        key_range: KeyRange | None = None,
        peers: Callable[[], Sequence[int]] | None = None,
        sync: InSyncKeeper | None = None,
        listed: Callable[[], bool] | None = None,
    ) -> None:
        """``peers``: the partition's other placement ids (for Tail); None = never truncate.
        ``sync``: the partition's in-sync set (out-of-sync peers do not hold the Tail).
        ``listed``: whether the current METADATA (read at the source, after this term's epoch was
        taken) still lists the partition; None = not checked. A split parent that SPLIT_FINALIZE
        retired is led paused: its ingest topic is the straggler forwarder's (DESIGN.md section 8)."""
        super().__init__(f"leader-{replica.partition_id[:8]}")
        self.replica = replica
        self.config = config
        self.peers = peers
        self.sync = sync
        self.listed = listed
        self._epoch = epoch
        topics = config.topics
        self.partition_id = replica.partition_id
        self.placement_id = replica.placement_id
        self.ingest_topic = topics.ingest(replica.partition_id)
        self.wal_topic = topics.wal(replica.partition_id, replica.placement_id)
        self.deadletter_topic = topics.deadletter
        self.group_id = topics.leader_group(replica.partition_id)
        self.validator = IngestValidator(replica.table, key_range, config.max_ingest_bytes)
        self.stats = LeaderStats()
        self.role_state = LeaderRoleState.STARTING
        self.ready = threading.Event()
        self._channel: TransactionalChannel = wal_channel(config, self.wal_topic)
        self._consumer: Consumer | None = None
        self.publisher: SegmentPublisher | None = None
        self.merger: PeerSegmentReceiver | None = None
        self.flusher = MemtableFlusher(replica, self._flushed)
        self._merges: queue.Queue[MergeJob] = queue.Queue()
        self._chain = ChainPosition()
        self._floor: Gtid | None = None
        """The highest GTID of the segments this role holds (from their footers, see :mod:`.recovery`)."""
        self._epoch_now: int | None = None
        self._next_seq = 0
        self._stalled = False
        self._next_gc = 0.0
        self._crash = False
        self.ingest_paused = threading.Event()
        """Set by a split (:mod:`storage_node.roles.split`): consume no ingest, flush the memtable."""
        self.ingest_quiesced = threading.Event()
        """Set by this thread while paused with an empty memtable: every accepted row is in a segment."""

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> PartitionLeader:
        super().start()
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until recovery is done and the leader consumes; raise its error if it failed."""
        deadline_hit = not wait_any((self.ready, self.stopped), timeout)
        if self.error is not None:
            raise self.error
        if deadline_hit or not self.ready.is_set():
            raise TimeoutError(
                f"leader of {self.partition_id} not ready after {timeout}s (state {self.role_state.value})"
            )

    def abandon(self) -> None:
        """Test hook that simulates a crash: the thread exits at once, nothing is flushed or closed."""
        self._crash = True
        self.request_stop()
        self.join(30)
        self.flusher.stop()
        if self.publisher is not None:
            self.publisher.stop()
        if self.merger is not None:
            self.merger.stop()

    def run(self) -> None:
        try:
            self.open()
            self.role_state = LeaderRoleState.LEADING
            self.ready.set()
            while not self.stopping.is_set():
                self.step()
        except FencedError as exc:
            log.warning("%s: fenced: %s", self.replica.name, exc)
            self.role_state, self.error = LeaderRoleState.FENCED, exc
        except GtidRegressionError as exc:
            log.error("%s: %s", self.replica.name, exc)
            self.role_state, self.error = LeaderRoleState.FAILED, exc
        except StaleEpochError as exc:
            log.warning("%s: %s", self.replica.name, exc)
            self.role_state, self.error = LeaderRoleState.FENCED, exc
        except NotLeadingError:
            self.role_state = LeaderRoleState.STOPPED
        except BaseException:
            log.exception("%s: leader failed", self.replica.name)
            self.role_state = LeaderRoleState.FAILED
            raise  # the Worker records it as ``error`` (state FAILED)
        else:
            self.role_state = LeaderRoleState.STOPPED

    def on_exit(self) -> None:
        if self._crash:
            return
        if not self.flusher.stop(120):  # a flush in progress finishes: no frozen memtable is left behind
            log.error("%s: the memtable flush did not end in 120s", self.replica.name)
        if self.merger is not None:
            self.merger.stop()
        if self.publisher is not None:
            self.publisher.stop()
        if self._consumer is not None:
            with contextlib.suppress(KafkaException):
                self._consumer.close()
            self._consumer = None
        if self._channel.usable:
            self._channel.flush(5)
        self._channel.close()

    # -- start-up: topics, fencing, recovery -----------------------------------------------------

    def open(self) -> None:
        config = self.config
        policy = config.kafka.topics
        retry = self._startup_retry

        def create_topics() -> None:
            admin = clients.admin(config.kafka)
            create_topic(admin, self.ingest_topic, policy=policy, config=TRUNCATED_BY_TAIL, repair=True)
            create_topic(admin, self.deadletter_topic, policy=policy)
            create_topic(
                admin,
                self.wal_topic,
                policy=policy,
                config={"max.message.bytes": str(config.wal_max_message_bytes), **TRUNCATED_BY_TAIL},
                repair=True,  # its own channel: Kafka must not delete what the Tail has not passed
            )

        def claim() -> None:
            try:
                self._channel.open()  # fences any older incarnation, aborts its open transaction
            except KafkaOperationError as exc:
                what = f"cannot claim WAL channel {self.wal_topic}: {exc}"
                raise KafkaOperationError(what, exc.kafka_error) from exc

        retry("create topics", create_topics)
        retry("claim the WAL channel", claim)
        # replay reads every record before it appends one: a Kafka error leaves the memtable unchanged
        replayed = retry(
            "replay the WAL",
            lambda: replay_wal(self.replica, config.kafka, self.wal_topic, self.validator.schema, self._chain),
        )
        self.stats.replayed_records += replayed.records
        self.stats.replayed_rows += replayed.rows
        # the GTID floor survives a truncated WAL: the segments' own GTIDs (DESIGN.md section 7)
        self._raise_floor(retry("read the chain's highest GTID", lambda: chain_high_gtid(self.replica)))
        if self.peers is not None:
            peers = self.peers
            # adoption is idempotent: a channel adopted before the error is covered by the chain now
            adopted = retry(
                "adopt the other placements' WAL channels",
                lambda: adopt_channels(
                    self.replica,
                    config.kafka,
                    topics=config.topics,
                    peers=list(peers()),
                    epoch=self._current_epoch(),
                    schema=self.validator.schema,
                ),
            )
            self.stats.adopted_segments += len(adopted)
            if adopted:
                self._raise_floor(chain_high_gtid(self.replica))
            # an old leader's segment publisher may still run: its segments channel is fenced too
            retry(
                "fence the other placements' segments channels",
                lambda: fence_segments_channels(
                    config.kafka, config.topics, self.partition_id, self.placement_id, list(peers())
                ),
            )
        self.flusher.start()
        self.publisher = SegmentPublisher(
            self.replica,
            config.kafka,
            topics=config.topics,
            peers=self.peers,
            still_leading=self._still_leading,
            sync=self.sync,
            truncate_every_s=config.tail_every_s,
        ).start()
        if self.peers is not None:
            self.merger = PeerSegmentReceiver(
                self.replica,
                config.kafka,
                topics=config.topics,
                peers=self.peers,
                submit=self._merges.put,
            ).start()
        if self.listed is not None and not self.listed():
            # SPLIT_FINALIZE is fenced by the parent's epoch, and this term's epoch was taken before
            # this read: a finalize this read does not show can no longer commit. Rows accepted here
            # would reach no child; the forwarder takes them from the ingest topic instead.
            log.warning(
                "%s: METADATA no longer lists this partition (its split was finalized): leading with ingest paused",
                self.replica.name,
            )
            self.ingest_paused.set()
        consumer = clients.consumer(
            config.kafka,
            group_id=self.group_id,
            **consumer_overrides(config.max_ingest_bytes + 1024 * 1024),
        )
        tp = TopicPartition(self.ingest_topic, 0)
        committed = committed_offset(consumer, tp)
        consumer.assign([TopicPartition(self.ingest_topic, 0, committed if committed >= 0 else OFFSET_BEGINNING)])
        self._consumer = consumer
        log.info("%s: leading from ingest offset %s", self.replica.name, committed)

    def _startup_retry(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, retried with :class:`~shoal.worker.Backoff` while it raises a transient
        (``retriable``) :class:`KafkaOperationError` and ``startup_retry_s`` has not passed: a topic
        created a moment before answers NOT_LEADER_FOR_PARTITION until its leader is known."""
        deadline, backoff = Deadline(self.config.startup_retry_s), Backoff(initial_s=0.2, maximum_s=3.0)
        while True:
            try:
                return call()
            except KafkaOperationError as exc:
                if not exc.retriable or self.stopping.is_set() or deadline.expired():
                    raise
                delay = min(backoff.next_delay(), max(deadline.remaining(), 0.0))
                self.stats.startup_retries += 1
                log.warning("%s: cannot %s yet (retrying in %.1fs): %s", self.replica.name, what, delay, exc)
                if self.stopping.wait(delay):
                    raise

    # -- the loop ------------------------------------------------------------------------------

    def step(self) -> None:
        assert self._consumer is not None
        self.flusher.raise_failure()
        if self.ingest_paused.is_set():
            self._quiesce()
            return
        self.ingest_quiesced.clear()
        self.stall()
        self.collect_unreferenced()
        msgs = ingest_batch(self._consumer, self.config.max_messages_per_transaction, self.config.poll_timeout_s)
        data = [m for m in msgs if m.error() is None]
        for m in msgs:
            err = m.error()
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                log.warning("%s: ingest consumer: %s", self.replica.name, err)
        if data:
            self._process(data)
        if not self._merges.empty():
            self.flusher.wait_idle()  # merges change the chain: never while a flush does
            if drain_merges(self._merges, self.replica, self._current_epoch()):
                self.stats.merged_segments += 1
                if self.publisher is not None:
                    self.publisher.wake()
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        """Hand the memtable's flush to the flusher when the policy says so (the flusher module's rules):
        skipped while a flush is in flight, unless the memtable reached a size threshold (then wait)."""
        mem, policy = self.replica.memtable, self.config.flush
        if not policy.due(mem.rows, mem.nbytes, mem.age_s()):
            return
        if self.flusher.submit(self._current_epoch()):
            return
        if mem.rows >= policy.max_rows or mem.nbytes >= policy.max_bytes:
            self.flusher.wait_idle()
            self.flusher.submit(self._current_epoch())

    def _flushed(self) -> None:
        """On the flusher's thread, after a flush wrote a segment."""
        self.stats.segments += 1
        if self.publisher is not None:
            self.publisher.wake()

    def _quiesce(self) -> None:
        """Paused by a split: flush what the memtable holds, then report quiesced (nothing consumed)."""
        self.flusher.wait_idle()
        if not self.replica.memtable.empty and self.flusher.submit(self._current_epoch()):
            self.flusher.wait_idle()
        if self.replica.memtable.empty:
            self.ingest_quiesced.set()
        self.stopping.wait(self.config.poll_timeout_s)

    @property
    def accepted_through(self) -> Gtid | None:
        """The last GTID this role (or the WAL it replayed) stamped: the partition's last accepted GTID."""
        return self._chain.last_gtid

    # -- writer stall and garbage collection (run between batches, on this thread) -----------------

    def stall(self) -> None:
        """Writer stall (DESIGN.md section 9): slow ingest while more minors than the limit await compaction."""
        cfg = self.config
        if cfg.minor_stall_s <= 0:
            return
        backlog = minor_backlog(self.replica)
        if backlog <= cfg.max_minors_before_stall:
            if self._stalled:
                self._stalled = False
                log.info("%s: writer stall over (%d minors await compaction)", self.replica.name, backlog)
            return
        if not self._stalled:
            self._stalled = True
            self.stats.stall_episodes += 1
            log.warning(
                "%s: writer stalled: %d minors await compaction (limit %d); sleeping %.2fs per step",
                self.replica.name,
                backlog,
                cfg.max_minors_before_stall,
                cfg.minor_stall_s,
            )
        self.stats.stalls += 1
        self.stopping.wait(cfg.minor_stall_s)

    def collect_unreferenced(self) -> None:
        """Source 3.5 replicate_partition, MERGE_THEN_DELETE, on this thread, with no flush in flight."""
        now = time.monotonic()
        if now < self._next_gc:
            return
        self._next_gc = now + self.config.gc_every_s
        if not unreferenced_segments(self.replica.chain):
            return
        self.flusher.wait_idle()  # the merge changes the chain: never while a flush does
        epoch = self._current_epoch()
        try:
            n = merge_unreferenced(self.replica, epoch)
        except (ShoalError, OSError) as exc:
            log.error("%s: merging unreferenced segments failed: %s", self.replica.name, exc)
            return
        if n:
            self.stats.merged_segments += n
            if self.publisher is not None:
                self.publisher.wake()

    # -- the epoch -------------------------------------------------------------------------------

    def _still_leading(self) -> int:
        """The current epoch, or raise if this role is ending or the election says it no longer leads."""
        if self.stopping.is_set() or self.role_state is not LeaderRoleState.LEADING:
            raise NotLeadingError(self.replica.name, f"{self.replica.name}: the leader role is {self.role_state.value}")
        return self._epoch()

    @property
    def term(self) -> int | None:
        """The leader epoch this role last wrote with (None before its first batch)."""
        return self._epoch_now

    def _raise_floor(self, gtid: Gtid | None) -> None:
        """Hold ``gtid`` as a GTID this role must stamp above (its next seq moves past it if needed)."""
        self._floor = highest(self._floor, gtid)
        if self._epoch_now is not None:
            self._next_seq = max(self._next_seq, first_seq(self.replica.name, self._epoch_now, self._highest_gtid()))

    def _highest_gtid(self) -> Gtid | None:
        """The highest GTID this role holds: its WAL channel's last one and its segments'."""
        return highest(self._chain.last_gtid, self._floor)

    def _current_epoch(self) -> int:
        try:
            epoch = self._epoch()
        except ShoalError as exc:
            raise NotLeadingError(self.replica.name, str(exc)) from exc
        top = self._highest_gtid()
        if top is not None and epoch < top.epoch:
            raise StaleEpochError(f"{self.replica.name}: epoch {epoch} is older than the highest GTID {top} it holds")
        if epoch != self._epoch_now:
            self._next_seq = first_seq(self.replica.name, epoch, top)
            self._epoch_now = epoch
        return epoch

    # -- one transaction -------------------------------------------------------------------------

    def _process(self, msgs: Sequence[Message]) -> None:
        """One transaction: WAL records and deadletters produced, ingest offsets sent, committed.

        A failed transaction is aborted by the channel and retried from the first message (the
        ingest offsets were not committed); a fence or a wedged call ends the role.
        """
        assert self._consumer is not None
        epoch = self._current_epoch()
        seq, prev = self._next_seq, self._chain.last_hash
        check_above(self.replica.name, Gtid(epoch, seq), self._highest_gtid())
        accepted: list[tuple[WalRecord, pa.Table]] = []
        offsets: dict[int, int] = {}
        began = False
        decoded = 0
        rest: Message | None = None
        """The first message left for the next transaction (its rows would be too many to hold)."""
        try:
            with self._channel.transaction() as txn:
                began = True
                for i, msg in enumerate(msgs):
                    if decoded >= self.config.max_transaction_decoded_bytes:
                        rest, msgs = msg, msgs[:i]
                        break
                    result = self.validator.validate(msg.value(), msg.headers())
                    if isinstance(result, Rejected):
                        self._deadletter(txn, msg, result)
                        continue
                    if result.num_rows == 0:
                        continue
                    decoded += result.nbytes
                    gtid = Gtid(epoch, seq)
                    record = WalRecord.create(
                        partition_id=self.partition_id,
                        placement_id=self.placement_id,
                        gtid=gtid,
                        row_count=result.num_rows,
                        payload=bytes(msg.value() or b""),
                        prev_hash=prev,
                        ingest_offsets=(IngestOffset(self.ingest_topic, 0, message_offset(msg)),),
                    )
                    txn.produce(
                        self.wal_topic, record.to_bytes(), partition=0, on_delivery=delivery_recorder(offsets, i)
                    )
                    accepted.append((record, result))
                    seq += result.num_rows
                    prev = record.hash
                # the ingest offsets go to the coordinator while the WAL records are on their way
                # (both are in the transaction: a failed delivery aborts the offsets with it)
                last = msgs[-1]
                txn.send_offsets(
                    [TopicPartition(self.ingest_topic, 0, message_offset(last) + 1)],
                    self._consumer.consumer_group_metadata(),
                )
                remaining = txn.flush(30)
                if remaining:
                    raise KafkaOperationError(f"{remaining} WAL records not delivered")
                if len(offsets) != len(accepted) or any(o < 0 for o in offsets.values()):
                    raise KafkaOperationError(f"WAL delivery failed: {offsets}")
        except KafkaOperationError as exc:
            ending = leader_error(exc, self.wal_topic)
            if ending is not None:
                raise ending from exc
            if not began:
                what = f"cannot begin a transaction on {self.wal_topic}: {exc}"
                raise KafkaOperationError(what, exc.kafka_error) from exc
            log.warning("%s: transaction failed, retrying: %s", self.replica.name, exc)
            self._consumer.seek(TopicPartition(self.ingest_topic, 0, message_offset(msgs[0])))
            return
        self._next_seq, self._chain.last_hash = seq, prev
        wal_offsets = sorted(offsets.items())
        for (record, rows), (_i, offset) in zip(accepted, wal_offsets, strict=True):
            self.replica.append(versioned_rows(rows, record.gtid), offset)
            self._chain.last_gtid = record.last_gtid
            self.stats.wal_records += 1
            self.stats.rows += record.row_count
        self.stats.transactions += 1
        if rest is not None:  # the messages left over are read again by the next transaction
            self.stats.decoded_limit_splits += 1
            self._consumer.seek(TopicPartition(self.ingest_topic, 0, message_offset(rest)))

    def _deadletter(self, txn: Transaction, msg: Message, why: Rejected) -> None:
        produce_deadletter(
            txn,
            self.deadletter_topic,
            msg,
            why,
            source_topic=self.ingest_topic,
            partition_id=self.partition_id,
            table=self.replica.table.name,
            max_payload_bytes=self.config.max_deadletter_payload_bytes,
            replica_name=self.replica.name,
        )
        self.stats.deadlettered += 1
