"""The leader role of one partition replica (DESIGN.md section 4, LinDB local replication).

Loop, on the leader's own thread:

1. consume a batch of ingest messages (``read_committed``, group ``TopicNames.leader_group``);
2. re-validate each one (:mod:`storage_node.partition.validate`); refused ones go to the
   deadletter topic with headers naming the reason, the source topic, partition and offset;
3. stamp GTIDs: the epoch comes from the election, each row gets its own consecutive ``seq``;
   the WAL record's payload is the validated ingest stream itself (no re-encoding) and it is
   chained to the previous record by ``hash``;
4. in ONE Kafka transaction: produce the WAL records to this placement's channel and the refused
   messages to deadletter, and commit the ingest offsets (``send_offsets_to_transaction``). The
   producer's ``transactional.id`` is the channel topic, so a new incarnation fences a zombie;
5. after the commit, append the stamped rows to the memtable; flush it to a segment when the
   :class:`~storage_node.config.FlushPolicy` says so.

Before consuming, a step sleeps ``minor_stall_s`` while more than ``max_minors_before_stall``
minors await compaction (the writer stall of issue 6), and every ``gc_every_s`` it merges then
deletes the segments the chain does not reference (source 3.5, :mod:`~storage_node.replication.collect`).

Start-up is recovery: ``init_transactions`` (aborts whatever a dead incarnation left open and
fences it), then replay the channel from the offset the last durable segment covers (the record
just before it gives the chain's previous hash and last GTID), then consume ingest from the
leader group's committed offset. Ingest offsets and WAL records are committed atomically, so the
replayed memtable plus the segments hold exactly the accepted writes.
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
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from metadata.keyspace import KeyRange
from shoal.errors import KafkaOperationError, ShoalError, StaleEpochError
from shoal.kafka_admin import admin_client, create_topic
from shoal.segments.versioned import stamp
from shoal.wire.ingest import DELETED_COLUMN
from shoal.wire.records import GENESIS_HASH, Gtid, IngestOffset, WalRecord, verify_chain
from storage_node.config import LeaderConfig
from storage_node.partition.compaction import minor_backlog
from storage_node.partition.replica import PartitionReplica
from storage_node.partition.validate import IngestValidator, Rejected
from storage_node.replication.adopt import adopt_channels
from storage_node.replication.collect import merge_unreferenced, unreferenced_segments
from storage_node.replication.merge_in import MergeJob, PeerSegmentReceiver, drain_merges
from storage_node.replication.publish import SegmentPublisher
from storage_node.wal import read_channel, read_record_at

log = logging.getLogger(__name__)

_FENCED_CODES = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


class LeaderRoleState(enum.Enum):
    STARTING = "STARTING"
    LEADING = "LEADING"
    STOPPED = "STOPPED"
    """Stopped on request or because the election says it no longer leads."""
    FENCED = "FENCED"
    """A newer incarnation took the channel, or the epoch is older than the channel's: commits nothing more."""
    FAILED = "FAILED"


class WedgedProducerError(KafkaOperationError):
    """A transactional call did not return within its bound: the producer is abandoned.

    librdkafka's ``send_offsets_to_transaction`` can ignore its own timeout after a broker restart
    (confluentinc/librdkafka#5456, #5511) and block forever. The leader role then ends as FAILED; the
    node resigns the election and the next leader of this channel (usually this node again) starts
    a new producer whose ``init_transactions`` fences the stuck one.
    """


class FencedError(ShoalError):
    """This leader's channel was taken over (Kafka fenced its transactional producer)."""


@dataclass
class LeaderStats:
    replayed_records: int = 0
    replayed_rows: int = 0
    transactions: int = 0
    wal_records: int = 0
    rows: int = 0
    deadlettered: int = 0
    adopted_segments: int = 0
    merged_segments: int = 0
    segments: int = 0
    stalls: int = 0
    """Loop steps slowed because too many minors awaited compaction (writer stall)."""
    stall_episodes: int = 0


def versioned_rows(rows: pa.Table, gtid: Gtid) -> pa.Table:
    """Ingest rows (table columns + ``_shoal_deleted``) -> stored rows with their GTID columns."""
    idx = rows.schema.get_field_index(DELETED_COLUMN)
    deleted = rows.column(idx).combine_chunks()
    return stamp(rows.remove_column(idx), epoch=gtid.epoch, first_seq=gtid.seq, deleted=deleted)


class PartitionLeader:
    """Leads one partition replica. ``epoch()`` returns the current leader epoch, or raises
    (e.g. ``PartitionElection.check_writable().epoch``) when this replica must not write."""

    def __init__(
        self,
        replica: PartitionReplica,
        config: LeaderConfig,
        epoch: Callable[[], int],
        *,
        key_range: KeyRange | None = None,
        peers: Callable[[], Sequence[int]] | None = None,
    ) -> None:
        """``peers``: the partition's other placement ids (for Tail); None = never truncate."""
        self.replica = replica
        self.config = config
        self.peers = peers
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
        self.state = LeaderRoleState.STARTING
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.stopped = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self.publisher: SegmentPublisher | None = None
        self.merger: PeerSegmentReceiver | None = None
        self._merges: queue.Queue[MergeJob] = queue.Queue()
        self._last_hash: bytes = GENESIS_HASH
        self._last_gtid: Gtid | None = None
        self._epoch_now: int | None = None
        self._next_seq = 0
        self._stalled = False
        self._next_gc = 0.0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> PartitionLeader:
        self._thread = threading.Thread(target=self._main, daemon=True, name=f"leader-{self.partition_id[:8]}")
        self._thread.start()
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until recovery is done and the leader consumes; raise its error if it failed."""
        deadline_hit = not _wait_any((self.ready, self.stopped), timeout)
        if self.error is not None:
            raise self.error
        if deadline_hit or not self.ready.is_set():
            raise TimeoutError(f"leader of {self.partition_id} not ready after {timeout}s (state {self.state.value})")

    def request_stop(self) -> None:
        """Ask the loop to end after the current batch (does not wait)."""
        self._stop.set()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def abandon(self) -> None:
        """Test hook that simulates a crash: the thread exits at once, nothing is flushed or closed."""
        self._crash = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.publisher is not None:
            self.publisher.stop()
        if self.merger is not None:
            self.merger.stop()

    _crash = False

    def _main(self) -> None:
        try:
            self._open()
            self.state = LeaderRoleState.LEADING
            self.ready.set()
            while not self._stop.is_set():
                self._step()
        except FencedError as exc:
            log.warning("%s: fenced: %s", self.replica.name, exc)
            self.state, self.error = LeaderRoleState.FENCED, exc
        except StaleEpochError as exc:
            log.warning("%s: %s", self.replica.name, exc)
            self.state, self.error = LeaderRoleState.FENCED, exc
        except _NotLeader:
            self.state = LeaderRoleState.STOPPED
        except BaseException as exc:
            log.exception("%s: leader failed", self.replica.name)
            self.state, self.error = LeaderRoleState.FAILED, exc
        else:
            self.state = LeaderRoleState.STOPPED
        finally:
            if not self._crash:
                self._close()
            self.stopped.set()

    def _close(self) -> None:
        if self.merger is not None:
            self.merger.stop()
        if self.publisher is not None:
            self.publisher.stop()
        if self._consumer is not None:
            with contextlib.suppress(KafkaException):
                self._consumer.close()
            self._consumer = None
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None

    # -- start-up: topics, fencing, recovery -----------------------------------------------------

    def _client_config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.config.bootstrap_servers, **dict(self.config.kafka_config)}

    def _open(self) -> None:
        admin = admin_client(self.config.bootstrap_servers, dict(self.config.kafka_config))
        rf = self.config.topic_replication_factor
        create_topic(admin, self.ingest_topic, replication_factor=rf)
        create_topic(admin, self.deadletter_topic, replication_factor=rf)
        create_topic(
            admin,
            self.wal_topic,
            replication_factor=rf,
            config={"max.message.bytes": str(self.config.wal_max_message_bytes), "retention.ms": "-1"},
        )
        producer = Producer(
            {
                **self._client_config(),
                "transactional.id": self.wal_topic,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.max.bytes": self.config.wal_max_message_bytes,
                "transaction.timeout.ms": self.config.transaction_timeout_ms,
            }
        )
        try:
            producer.init_transactions(30)  # fences any older incarnation, aborts its open transaction
        except KafkaException as exc:
            raise KafkaOperationError(f"cannot claim WAL channel {self.wal_topic}: {exc}") from exc
        self._producer = producer
        self._recover()
        if self.peers is not None:
            adopted = adopt_channels(
                self.replica,
                bootstrap_servers=self.config.bootstrap_servers,
                topics=self.config.topics,
                peers=list(self.peers()),
                epoch=self._current_epoch(),
                schema=self.validator.schema,
                kafka_config=dict(self.config.kafka_config),
            )
            self.stats.adopted_segments += len(adopted)
        self.publisher = SegmentPublisher(
            self.replica,
            bootstrap_servers=self.config.bootstrap_servers,
            topics=self.config.topics,
            kafka_config=dict(self.config.kafka_config),
            topic_replication_factor=rf,
            peers=self.peers,
            still_leading=self._still_leading,
        ).start()
        if self.peers is not None:
            self.merger = PeerSegmentReceiver(
                self.replica,
                bootstrap_servers=self.config.bootstrap_servers,
                topics=self.config.topics,
                peers=self.peers,
                submit=self._merges.put,
                kafka_config=dict(self.config.kafka_config),
                topic_replication_factor=rf,
            ).start()
        consumer = Consumer(
            {
                **self._client_config(),
                "group.id": self.group_id,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.message.max.bytes": self.config.max_ingest_bytes + 1024 * 1024,
            }
        )
        tp = TopicPartition(self.ingest_topic, 0)
        committed = _committed_offset(consumer, tp)
        consumer.assign([TopicPartition(self.ingest_topic, 0, committed if committed >= 0 else OFFSET_BEGINNING)])
        self._consumer = consumer
        log.info("%s: leading from ingest offset %s", self.replica.name, committed)

    def _recover(self) -> None:
        """LinDB recovery: replay the channel from what the durable segments cover into the memtable."""
        start = self.replica.covered_end()
        prev: bytes | None = GENESIS_HASH
        if start > 0:
            last = read_record_at(self.config.bootstrap_servers, self.wal_topic, start - 1)
            if last is None:
                log.warning("%s: WAL record %d (end of segment coverage) is gone", self.replica.name, start - 1)
                prev = None
            else:
                prev, self._last_hash, self._last_gtid = last.hash, last.hash, last.last_gtid
        records = list(read_channel(self.config.bootstrap_servers, self.wal_topic, start))
        verify_chain([r.record for r in records], prev_hash=prev)
        schema = self.validator.schema
        for item in records:
            rec = item.record
            if (rec.partition_id, rec.placement_id) != (self.partition_id, self.placement_id):
                raise KafkaOperationError(f"WAL channel {self.wal_topic} holds a record of another placement")
            rows = rec.rows(schema)
            self.replica.append(versioned_rows(rows, rec.gtid), item.offset)
            self._last_hash, self._last_gtid = rec.hash, rec.last_gtid
            self.stats.replayed_records += 1
            self.stats.replayed_rows += rec.row_count
        log.info("%s: replayed %d WAL records from offset %d", self.replica.name, len(records), start)

    # -- the loop ------------------------------------------------------------------------------

    def _step(self) -> None:
        assert self._consumer is not None
        self._maybe_stall()
        self._maybe_merge_unreferenced()
        msgs = self._consumer.consume(self.config.max_messages_per_transaction, self.config.poll_timeout_s)
        data = [m for m in msgs if m.error() is None]
        for m in msgs:
            err = m.error()
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                log.warning("%s: ingest consumer: %s", self.replica.name, err)
        if data:
            self._process(data)
        if not self._merges.empty() and drain_merges(self._merges, self.replica, self._current_epoch()):
            self.stats.merged_segments += 1
            if self.publisher is not None:
                self.publisher.wake()
        mem = self.replica.memtable
        if self.config.flush.due(mem.rows, mem.nbytes, mem.age_s()) and self.replica.flush(self._current_epoch()):
            self.stats.segments += 1
            if self.publisher is not None:
                self.publisher.wake()

    def _maybe_stall(self) -> None:
        """Writer stall (issue 6): slow ingest while more minors than the limit await compaction."""
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
            log.warning("%s: writer stalled: %d minors await compaction (limit %d); sleeping %.2fs per step",
                        self.replica.name, backlog, cfg.max_minors_before_stall, cfg.minor_stall_s)  # fmt: skip
        self.stats.stalls += 1
        self._stop.wait(cfg.minor_stall_s)

    def _maybe_merge_unreferenced(self) -> None:
        """Source 3.5 replicate_partition, MERGE_THEN_DELETE, on this thread (it never races a flush)."""
        now = time.monotonic()
        if now < self._next_gc:
            return
        self._next_gc = now + self.config.gc_every_s
        if not unreferenced_segments(self.replica.chain):
            return
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

    def _still_leading(self) -> int:
        """The current epoch, or raise if this role is ending or the election says it no longer leads."""
        if self._stop.is_set() or self.state is not LeaderRoleState.LEADING:
            raise _NotLeader(f"{self.replica.name}: the leader role is {self.state.value}")
        return self._epoch()

    @property
    def term(self) -> int | None:
        """The leader epoch this role last wrote with (None before its first batch)."""
        return self._epoch_now

    def _current_epoch(self) -> int:
        try:
            epoch = self._epoch()
        except ShoalError as exc:
            raise _NotLeader(str(exc)) from exc
        last = self._last_gtid.epoch if self._last_gtid is not None else None
        if last is not None and epoch < last:
            raise StaleEpochError(
                f"{self.replica.name}: epoch {epoch} is older than the channel's last GTID epoch {last}"
            )
        if epoch != self._epoch_now:
            self._epoch_now = epoch
            self._next_seq = self._last_gtid.seq + 1 if self._last_gtid and self._last_gtid.epoch == epoch else 0
        return epoch

    def _process(self, msgs: Sequence[Message]) -> None:
        assert self._producer is not None and self._consumer is not None
        epoch = self._current_epoch()
        seq, prev = self._next_seq, self._last_hash
        accepted: list[tuple[WalRecord, pa.Table]] = []
        offsets: dict[int, int] = {}
        producer = self._producer
        self._begin()
        try:
            for i, msg in enumerate(msgs):
                result = self.validator.validate(msg.value(), msg.headers())
                if isinstance(result, Rejected):
                    self._deadletter(msg, result)
                    continue
                if result.num_rows == 0:
                    continue
                gtid = Gtid(epoch, seq)
                record = WalRecord.create(
                    partition_id=self.partition_id,
                    placement_id=self.placement_id,
                    gtid=gtid,
                    row_count=result.num_rows,
                    payload=bytes(msg.value() or b""),
                    prev_hash=prev,
                    ingest_offsets=(IngestOffset(self.ingest_topic, 0, _offset(msg)),),
                )
                producer.produce(self.wal_topic, record.to_bytes(), partition=0, on_delivery=_recorder(offsets, i))
                accepted.append((record, result))
                seq += result.num_rows
                prev = record.hash
            remaining = producer.flush(30)
            if remaining:
                raise KafkaOperationError(f"{remaining} WAL records not delivered")
            if len(offsets) != len(accepted) or any(o < 0 for o in offsets.values()):
                raise KafkaOperationError(f"WAL delivery failed: {offsets}")
            last = msgs[-1]
            group = self._consumer.consumer_group_metadata()
            self._bounded(
                "send_offsets_to_transaction",
                lambda: producer.send_offsets_to_transaction(
                    [TopicPartition(self.ingest_topic, 0, _offset(last) + 1)], group, 30
                ),
            )
            self._bounded("commit_transaction", lambda: producer.commit_transaction(30))
        except KafkaException as exc:
            self._on_txn_error(exc, msgs[0])
            return
        except WedgedProducerError:
            raise
        except KafkaOperationError:
            self._abort(msgs[0])
            return
        self._next_seq, self._last_hash = seq, prev
        wal_offsets = sorted(offsets.items())
        for (record, rows), (_i, offset) in zip(accepted, wal_offsets, strict=True):
            self.replica.append(versioned_rows(rows, record.gtid), offset)
            self._last_gtid = record.last_gtid
            self.stats.wal_records += 1
            self.stats.rows += record.row_count
        self.stats.transactions += 1

    def _bounded(self, what: str, call: Callable[[], object]) -> None:
        try:
            _run_bounded(call, what, self.config.transaction_call_timeout_s)
        except WedgedProducerError as exc:
            self._producer = None  # never touched again: a new incarnation fences it
            raise WedgedProducerError(f"{self.wal_topic}: {exc}") from exc

    def _begin(self) -> None:
        assert self._producer is not None
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            self._raise_if_fenced(exc)
            raise KafkaOperationError(f"cannot begin a transaction on {self.wal_topic}: {exc}") from exc

    def _deadletter(self, msg: Message, why: Rejected) -> None:
        assert self._producer is not None
        value = msg.value()
        headers: list[tuple[str, str | bytes | None]] = [
            ("shoal.reason", why.reason.encode()),
            ("shoal.detail", why.detail[:2000].encode("utf-8", "replace")),
            ("shoal.source.topic", self.ingest_topic.encode()),
            ("shoal.source.partition", str(msg.partition()).encode()),
            ("shoal.source.offset", str(msg.offset()).encode()),
            ("shoal.partition_id", self.partition_id.encode()),
            ("shoal.table", self.replica.table.name.encode()),
        ]
        if value is not None and len(value) > self.config.max_deadletter_payload_bytes:
            headers.append(("shoal.payload_dropped_bytes", str(len(value)).encode()))
            value = None
        self._producer.produce(self.deadletter_topic, value, headers=headers)
        self.stats.deadlettered += 1
        log.warning("%s: ingest offset %d -> deadletter: %s: %s", self.replica.name, msg.offset(), why.reason,
                    why.detail[:200])  # fmt: skip

    def _raise_if_fenced(self, exc: KafkaException) -> None:
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and (err.code() in _FENCED_CODES or err.fatal()):
            self._producer = None  # a fenced producer is unusable
            raise FencedError(f"{self.wal_topic}: {err}") from exc

    def _on_txn_error(self, exc: KafkaException, first: Message) -> None:
        self._raise_if_fenced(exc)
        log.warning("%s: transaction failed, retrying: %s", self.replica.name, exc)
        self._abort(first)

    def _abort(self, first: Message) -> None:
        assert self._producer is not None and self._consumer is not None
        producer = self._producer
        try:
            self._bounded("abort_transaction", lambda: producer.abort_transaction(30))
        except KafkaException as exc:
            self._raise_if_fenced(exc)
            raise KafkaOperationError(f"cannot abort a transaction on {self.wal_topic}: {exc}") from exc
        self._consumer.seek(TopicPartition(self.ingest_topic, 0, _offset(first)))


def _run_bounded(call: Callable[[], object], what: str, timeout_s: float) -> None:
    """Run ``call`` on a daemon thread; re-raise its exception; WedgedProducerError if it is still
    running after ``timeout_s`` (the thread is left behind: it holds only the abandoned producer)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True, name=f"txn-{what}")
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        raise WedgedProducerError(f"{what} did not return within {timeout_s:.0f}s")
    if outcome[0] is not None:
        raise outcome[0]


def _committed_offset(consumer: Consumer, tp: TopicPartition, timeout_s: float = 60.0) -> int:
    """The group's committed offset (or a negative logical offset), retrying while the group
    coordinator is still loading (a fresh cluster creates ``__consumer_offsets`` on first use)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return int(consumer.committed([tp], timeout=30)[0].offset)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if time.monotonic() > deadline or not isinstance(err, KafkaError) or err.fatal():
                raise KafkaOperationError(f"cannot read the committed offset of {tp.topic}: {exc}") from exc
            time.sleep(0.5)


def _offset(msg: Message) -> int:
    offset = msg.offset()
    return -1 if offset is None else int(offset)


class _NotLeader(Exception):
    pass


def _recorder(offsets: dict[int, int], index: int) -> Callable[[KafkaError | None, Message], None]:
    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        offsets[index] = -1 if err is not None else _offset(msg)

    return on_delivery


def _wait_any(events: Sequence[threading.Event], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e.is_set() for e in events):
            return True
        time.sleep(0.02)
    return any(e.is_set() for e in events)
