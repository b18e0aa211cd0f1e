"""The producer: validate, route, batch and produce rows to the partitions' ingest topics.

``Producer(config)`` is a context manager. ``write(table, rows)`` and ``delete(table, keys)`` are
all-or-nothing before Kafka: every row is validated, routed and encoded first, and only then is
anything produced, so a bad row means nothing of that call was sent. Each Kafka message is one
Arrow IPC stream of many rows (``shoal.wire.ingest``); the Kafka producer is idempotent with
``acks=all``.

Delivery is reported per message (a :class:`DeliveryReport`): to the ``on_delivery`` callback, and
through the futures of the :class:`WriteResult` that ``write``/``delete`` return. A background thread
polls the Kafka client so futures resolve without the caller polling. ``flush()`` waits for Kafka and
raises :class:`DeliveryError` if any message failed since the last flush. ``sync()`` flushes, then waits
until each partition leader's consumer group has committed past the last offset written to its
ingest topic (the accepted-by-leader index, DESIGN.md section 3), then reads the deadletter topic for
messages of this producer that a leader refused instead (:mod:`producer.refusals`) and raises
:class:`MessagesRefusedError` naming them: such a message moves the committed offset too.

Partition maps are cached per table and kept current by a :class:`metadata.notify.TableWatcher`
(a split or any other committed change swaps the map in). They are also re-read when routing fails
or Kafka reports an unknown ingest topic, so a stale map is never fatal.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaException

from metadata.client import MetadataClient
from metadata.metadata_file import MetadataFile, retired_partitions
from metadata.notify import TableWatcher
from metadata.partition_map import CachedPartitionMap, PartitionMap
from producer.batching import split_messages
from producer.config import ProducerConfig
from producer.errors import (
    DeliveryError,
    MessagesRefusedError,
    ProducerClosedError,
    RefusalsLostError,
    RoutingError,
    SendError,
    SyncTimeoutError,
)
from producer.refusals import DeadletterWatch, RefusalReader, new_producer_id
from producer.routing import route
from producer.validation import Limits, to_ingest, validate_keys, validate_rows
from shoal.errors import KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.backlog import MAX_SPLIT_HOPS, unaccepted_ends
from shoal.kafka.errors import kafka_error_of
from shoal.wire.ingest import PRODUCER_HEADER, TABLE_HEADER
from shoal.worker import Worker

log = logging.getLogger(__name__)

_SYNC_READERS = 8
"""Threads reading leader groups' committed offsets for ``sync()`` (one blocking request each)."""

POLL_INTERVAL_S = 0.02
"""The delivery poller's wait per ``poll``: also how long ``close()`` can wait for it to notice the stop
(0.1 s put that on the end of every Spark sink task)."""

_UNKNOWN_TOPIC_ERRORS = {"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION"}


@dataclass(frozen=True)
class DeliveryReport:
    """The outcome of one Kafka message (one Arrow IPC batch of ``rows`` rows)."""

    table: str
    partition_id: str
    topic: str
    rows: int
    deletes: bool
    offset: int | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "partition_id": self.partition_id,
            "topic": self.topic,
            "rows": self.rows,
            "deletes": self.deletes,
            "offset": self.offset,
            "error": self.error,
        }


@dataclass(frozen=True)
class WriteResult:
    """What one ``write``/``delete`` call sent: one future per Kafka message.

    A future resolves to its :class:`DeliveryReport`, or raises :class:`DeliveryError` (with the
    report in ``.reports``) if Kafka did not accept the message.
    """

    table: str
    rows: int
    futures: tuple[Future[DeliveryReport], ...]

    @property
    def batches(self) -> int:
        return len(self.futures)

    def wait(self, timeout: float | None = None) -> list[DeliveryReport]:
        """Wait for every message of this call; raise DeliveryError if one failed, TimeoutError if not done."""
        _done, pending = wait_futures(self.futures, timeout=timeout)
        if pending:
            raise TimeoutError(f"{len(pending)} of {len(self.futures)} batches not delivered within {timeout}s")
        return [f.result() for f in self.futures]


class _PollWorker(Worker):
    """Serves the Kafka producer's delivery callbacks (``poll``) until stopped, or at interpreter
    exit: a daemon thread still inside librdkafka while the interpreter tears down could crash it."""

    def __init__(self, kafka: Any) -> None:
        super().__init__("shoal-producer-poll")
        self.kafka = kafka

    def start(self) -> _PollWorker:
        super().start()
        atexit.register(self.stop, 5.0)
        return self

    def step(self) -> None:
        try:
            self.kafka.poll(POLL_INTERVAL_S)
        except Exception:  # a user callback raising must not kill delivery reporting
            log.exception("error while polling the Kafka producer")

    def on_exit(self) -> None:
        atexit.unregister(self.stop)


OffsetsReader = Callable[[str, str], "int | None"]
"""(consumer group, topic) -> the group's committed offset on partition 0, or None if it has none."""


class Producer:
    """Writes rows to shoal tables. Thread-safe; use as a context manager or call ``close()``.

    A failed delivery is raised once, by the next ``flush()``/``sync()`` of whichever thread calls
    it first (and by its own :meth:`WriteResult.wait`). Threads sharing a producer that each rely on
    their own ``sync()`` should wait for their own :class:`WriteResult` too, or use a producer each:
    a failure another thread's ``sync()`` raised is not raised again."""

    def __init__(
        self,
        config: ProducerConfig,
        *,
        on_delivery: Callable[[DeliveryReport], None] | None = None,
        metadata: MetadataClient | None = None,
        map_loader: Callable[[str], MetadataFile] | None = None,
        kafka_producer: Any = None,
        admin: Any = None,
        offsets_reader: OffsetsReader | None = None,
        refusals: RefusalReader | None = None,
    ) -> None:
        self.config = config
        self.producer_id = new_producer_id()
        """Sent on every message (``shoal.producer``): how ``sync()`` tells this producer's refusals apart."""
        self._refusals = refusals
        self._refusals_started = False
        self._unchecked_since: float | None = None
        """Wall-clock time of this producer's first write no completed refusal check covers (None:
        every write was checked): a refusal that old may be gone with the deadletter topic's retention."""
        self._last_write_at = 0.0
        self._writing = 0
        """write() calls between their time stamp and their last produce: a check meanwhile may miss their messages."""
        self.topics = config.topics
        self._on_delivery = on_delivery
        self._metadata = metadata
        self._own_metadata = metadata is None and map_loader is None
        self._map_loader = map_loader
        self._kafka = kafka_producer
        self._admin = admin
        self._admin_owned = admin is None
        self._offsets_reader = offsets_reader
        self._limits = Limits(config.max_value_bytes, config.max_row_bytes)
        self._lock = threading.RLock()
        self._maps: dict[str, CachedPartitionMap] = {}
        self._watchers: dict[str, TableWatcher] = {}
        self._topics_ready: set[str] = set()
        self._last_offset: dict[str, tuple[str, int]] = {}  # ingest topic -> (partition_id, last offset)
        self._routed: dict[str, tuple[str, str]] = {}
        """ingest topic -> (table, partition_id) of every partition written to and not known to have
        split since (:meth:`_order_across_splits`)."""
        self._failed: list[DeliveryReport] = []
        self._in_flight = 0
        self._pending: set[Future[DeliveryReport]] = set()
        """Futures of the messages Kafka has not reported on yet."""
        self._closed = False
        self._poller: _PollWorker | None = None
        self._sync_pool: ThreadPoolExecutor | None = None
        self._offset_locks: dict[str, threading.Lock] = {}
        self._offsets_seen: dict[str, tuple[int | None, float]] = {}
        """ingest topic -> (its leader group's committed offset, when the request reading it was sent)."""

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            if exc_type is None and not self._closed:
                self.flush()
        finally:
            self.close()

    def close(self, timeout: float = 30.0) -> None:
        """Deliver what is queued (up to ``timeout``), stop watching metadata, release connections."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            watchers = list(self._watchers.values())
            self._watchers.clear()
        for watcher in watchers:
            watcher.stop()
        if self._kafka is not None:
            try:
                remaining = self._kafka.flush(timeout)
            except KafkaException as exc:  # a producer in a fatal state (a fenced transactional one)
                log.warning("producer closed without flushing: %s", kafka_error_of(exc) or exc)
                remaining = 0
            if remaining:
                log.warning("producer closed with %d messages not delivered", remaining)
        if self._poller is not None:
            self._poller.stop(timeout=5)
        if self._sync_pool is not None:
            self._sync_pool.shutdown(wait=True)
        if self._refusals is not None:
            self._refusals.close()
        if self._metadata is not None and self._own_metadata:
            self._metadata.close()
            self._metadata = None

    def _check_open(self) -> None:
        if self._closed:
            raise ProducerClosedError("the producer is closed")

    @property
    def kafka(self) -> Any:
        with self._lock:
            if self._kafka is None:
                self._kafka = clients.producer(self.config.kafka, **self.config.kafka_producer_overrides())
            if self._poller is None:
                self._poller = _PollWorker(self._kafka).start()
            return self._kafka

    @property
    def admin(self) -> Any:
        with self._lock:
            if self._admin is None:
                self._admin = clients.admin(self.config.kafka)
            return self._admin

    def _drop_admin(self) -> None:
        """Forget an admin client this producer made itself, so that the next offset read makes a fresh one.

        librdkafka's admin requests can keep timing out on a connection made before a broker restarted.
        """
        with self._lock:
            if self._offsets_reader is None and self._admin is not None and self._admin_owned:
                self._admin = None

    def _metadata_client(self) -> MetadataClient:
        with self._lock:
            if self._metadata is None:
                self._metadata = MetadataClient(self.config.metadata_config())
                self._own_metadata = True
            return self._metadata

    # -- partition maps -------------------------------------------------------------------------

    def partition_map(self, table: str) -> PartitionMap:
        """The cached partition map of ``table`` (loaded, and watched, on first use)."""
        self._check_open()
        with self._lock:
            cache = self._maps.get(table)
            if cache is None:
                loader = self._map_loader
                if loader is None:
                    client = self._metadata_client()
                    coordinator = client.coordinator

                    def loader(name: str = table) -> MetadataFile:
                        return coordinator.current(name)

                    cache = CachedPartitionMap(loader)
                    pmap = cache.get()
                    if self.config.watch_metadata:
                        self._watchers[table] = client.watch(table, cache.update, since_sequence=pmap.sequence)
                else:
                    fixed_loader = loader
                    cache = CachedPartitionMap(lambda: fixed_loader(table))
                self._maps[table] = cache
        return cache.get()

    def refresh(self, table: str) -> PartitionMap:
        """Drop the cached map of ``table`` and read the current one."""
        with self._lock:
            cache = self._maps.get(table)
        if cache is not None:
            cache.invalidate()
        return self.partition_map(table)

    # -- writing --------------------------------------------------------------------------------

    def write(self, table: str, rows: Any) -> WriteResult:
        """Validate, route, batch and produce ``rows`` (list of dicts, pyarrow Table or pandas DataFrame).

        Raises RowValidationError (naming row and column) before anything is sent if any row is bad.
        """
        self._check_open()
        pmap = self.partition_map(table)
        valid = validate_rows(pmap.file.table, rows, self._limits)
        return self._send(table, pmap, valid, deleted=False)

    def delete(self, table: str, keys: Any) -> WriteResult:
        """Send tombstones for the rows with these primary keys (see ``validation.validate_keys``)."""
        self._check_open()
        pmap = self.partition_map(table)
        valid = validate_keys(pmap.file.table, keys, self._limits)
        return self._send(table, pmap, valid, deleted=True)

    def _send(self, table: str, pmap: PartitionMap, rows: pa.Table, *, deleted: bool) -> WriteResult:
        tdef = pmap.file.table
        try:
            slices = route(pmap, rows, tdef.partition_key)
        except RoutingError:
            pmap = self.refresh(table)
            slices = route(pmap, rows, tdef.partition_key)
        batches = []
        for piece in slices:
            ingest = to_ingest(piece.rows, deleted=deleted)
            for message in split_messages(
                table,
                ingest,
                max_bytes=self.config.max_message_bytes,
                max_rows=self.config.max_rows_per_message,
            ):
                batches.append((piece.partition_id, message))
        self._order_across_splits(table, pmap)
        for partition_id in {pid for pid, _ in batches}:
            self._ensure_topic(self.topics.ingest(partition_id))
        with self._lock:
            for partition_id in {pid for pid, _ in batches}:
                self._routed[self.topics.ingest(partition_id)] = (table, partition_id)
        self._start_refusals()
        with self._lock:
            self._last_write_at = time.time()
            self._writing += 1
            if self._unchecked_since is None:
                self._unchecked_since = self._last_write_at
        try:
            return self._produce_batches(table, rows, batches, deleted=deleted)
        finally:
            with self._lock:
                self._writing -= 1
                self._last_write_at = time.time()  # its last message was produced after any check began before

    def _produce_batches(
        self, table: str, rows: pa.Table, batches: list[tuple[str, Any]], *, deleted: bool
    ) -> WriteResult:
        futures: list[Future[DeliveryReport]] = []
        kafka = self.kafka
        headers = [(TABLE_HEADER, table.encode("utf-8")), (PRODUCER_HEADER, self.producer_id.encode())]
        sent = 0
        for partition_id, message in batches:
            topic = self.topics.ingest(partition_id)
            future: Future[DeliveryReport] = Future()
            future.set_running_or_notify_cancel()
            callback = self._callback(table, partition_id, topic, message.num_rows, deleted, future)
            with self._lock:
                self._in_flight += 1
                self._pending.add(future)
            try:
                self._produce(kafka, topic, message.payload, headers, callback)
            except Exception as exc:
                with self._lock:  # never produced: nothing will report it, so sync() must not wait for it
                    self._in_flight -= 1
                    self._pending.discard(future)
                raise self._send_error(table, exc, tuple(futures), sent, rows.num_rows - sent) from exc
            futures.append(future)
            sent += message.num_rows
        return WriteResult(table, rows.num_rows, tuple(futures))

    def _start_refusals(self) -> None:
        """Before the first message: note where the deadletter topic ends (:meth:`sync` reads on from there)."""
        if not self.config.check_refusals:
            return
        with self._lock:
            if self._refusals_started:
                return
            if self._refusals is None:
                self._refusals = DeadletterWatch(self.config.kafka, self.topics, self.producer_id)
            self._refusals.start(self.config.topic_timeout_s)
            self._refusals_started = True

    @staticmethod
    def _send_error(
        table: str, exc: Exception, futures: tuple[Future[DeliveryReport], ...], sent: int, unsent: int
    ) -> SendError:
        kafka_error = kafka_error_of(exc)
        return SendError(
            f"table {table}: Kafka refused a message ({kafka_error or exc}); {sent} rows were sent before it "
            f"(they may still be accepted), {unsent} were not",
            table=table,
            futures=futures,
            rows_sent=sent,
            rows_unsent=unsent,
            kafka_error=kafka_error,
        )

    def _order_across_splits(self, table: str, pmap: PartitionMap) -> None:
        """Before routing by a map in which a partition this producer wrote to is gone (it split), wait
        until every write made so far to such a partition is accepted (:meth:`sync` for its topic).

        A write to a splitting partition can wait in its ingest topic until SPLIT_FINALIZE, and is
        then forwarded to a child (DESIGN.md section 8). The next write of the same key goes to the
        child directly: without this wait it could be accepted first, and the forwarded older write
        would then be accepted after it, with a higher GTID, and win (a deleted row would come
        back). Once the old writes are accepted (forwarded in the same transaction that commits the
        parent's leader group), they are in the child's ingest topic ahead of anything written now.
        Raises :class:`SyncTimeoutError` (nothing of this write sent) when they are not accepted within
        ``split_drain_timeout_s``.
        """
        listed = set(pmap.partition_ids())
        with self._lock:
            gone = [t for t, (tbl, pid) in self._routed.items() if tbl == table and pid not in listed]
        if not gone:
            return
        log.info("%s: partition(s) written to have split; waiting until those writes are accepted", table)
        deadline = self.config.sync_policy.clock() + self.config.split_drain_timeout_s
        self._sync(self.config.split_drain_timeout_s, only=set(gone))
        with self._lock:
            split = {self._routed[t][1] for t in gone if t in self._routed}
        self._await_forwarded_through(table, split, deadline)
        with self._lock:
            for topic in gone:
                self._routed.pop(topic, None)

    def _await_forwarded_through(self, table: str, split: set[str], deadline: float) -> None:
        """After the writes to the partitions ``split`` were accepted: wait, hop by hop, until each of
        their children that split too (and each of its children that did, ...) has forwarded every
        record its ingest topic holds. A parent's forwarder moved those writes to a child's topic;
        a child that split too forwards them again, after what is written now to its own child
        directly, where they would win with higher GTIDs. Not with a ``map_loader`` (no METADATA
        history: the Spark sink's driver waits on every split parent, ``spark_jobs.sink``)."""
        retired = {r.partition_id: r for r in retired_partitions(self._history(table))}
        hops = split
        for _hop in range(MAX_SPLIT_HOPS):
            hops = {c for p in hops if p in retired for c in (retired[p].low, retired[p].high) if c in retired}
            if not hops:
                return
            remaining = max(1.0, deadline - self.config.sync_policy.clock())
            backlog = unaccepted_ends(self.config.kafka, self.admin, self.topics, hops, remaining)
            self._await_accepted(backlog, self.config.split_drain_timeout_s, deadline)

    def _history(self, table: str) -> list[MetadataFile]:
        """Every METADATA version of ``table`` ([] with a ``map_loader``)."""
        if self._map_loader is not None:
            return []
        return self._metadata_client().coordinator.history(table)

    def _produce(self, kafka: Any, topic: str, payload: bytes, headers: list[Any], callback: Any) -> None:
        while True:
            try:
                kafka.produce(topic, value=payload, headers=headers, on_delivery=callback)
                return
            except BufferError:
                kafka.poll(0.5)  # the local queue is full: let deliveries drain it

    def _ensure_topic(self, topic: str) -> None:
        if topic in self._topics_ready or not self.config.create_topics:
            return
        from shoal.kafka.admin import TRUNCATED_BY_TAIL, create_topic

        create_topic(
            self.admin,
            topic,
            partitions=1,
            policy=self.config.kafka.topics,
            config=TRUNCATED_BY_TAIL,
            timeout_s=self.config.topic_timeout_s,
        )
        with self._lock:
            self._topics_ready.add(topic)

    def _callback(
        self, table: str, partition_id: str, topic: str, rows: int, deleted: bool, future: Future[DeliveryReport]
    ) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            offset = msg.offset() if err is None and msg is not None else None
            error = None if err is None else str(err)
            report = DeliveryReport(table, partition_id, topic, rows, deleted, offset, error)
            with self._lock:
                self._in_flight -= 1
                self._pending.discard(future)
                if err is None and offset is not None:
                    prev = self._last_offset.get(topic)
                    if prev is None or offset > prev[1]:
                        self._last_offset[topic] = (partition_id, offset)
                elif err is not None:
                    self._failed.append(report)
                    name = err.name() if hasattr(err, "name") else ""
                    if name in _UNKNOWN_TOPIC_ERRORS:
                        cache = self._maps.get(table)
                        if cache is not None:
                            cache.invalidate()  # the partition may be gone (split): re-read the map
                        self._topics_ready.discard(topic)
            if err is None:
                future.set_result(report)
            else:
                future.set_exception(DeliveryError(f"{topic}: {rows} rows not delivered: {err}", [report]))
            if self._on_delivery is not None:
                try:
                    self._on_delivery(report)
                except Exception:
                    log.exception("on_delivery callback failed")

        return on_delivery

    # -- waiting --------------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> None:
        """Wait until Kafka has acknowledged every message; raise DeliveryError if any failed since the last flush."""
        if self._kafka is not None:
            remaining = self._kafka.flush(-1 if timeout is None else timeout)
            if remaining:
                raise DeliveryError(f"{remaining} messages still in flight after {timeout}s")
        self._raise_failed()

    def _raise_failed(self) -> None:
        """Raise DeliveryError for the batches that failed since the last check."""
        with self._lock:
            failed, self._failed = self._failed, []
        if failed:
            first = failed[0]
            raise DeliveryError(
                f"{len(failed)} batch(es) ({sum(r.rows for r in failed)} rows) were not delivered; "
                f"first: {first.topic}: {first.error}",
                list(failed),
            )

    def written(self) -> dict[str, tuple[str, int]]:
        """Ingest topic -> (partition_id, last offset produced to it), for everything delivered so far."""
        with self._lock:
            return dict(self._last_offset)

    @property
    def refusals_from(self) -> int | None:
        """The deadletter offset this producer's refusal check reads from (noted before its first
        message), or None when it checks none (``check_refusals`` off, or nothing written yet)."""
        with self._lock:
            reader = self._refusals if self._refusals_started else None
        return None if reader is None else getattr(reader, "position", None)

    def sync(self, timeout: float = 60.0) -> None:
        """Wait until the leaders have accepted everything written so far.

        Waits for Kafka to acknowledge the messages written before the call (not the ones other
        threads write meanwhile: ``flush()`` would wait for those too, and under a steady stream
        of writes Kafka's queue is never empty), then polls the committed offset of each written
        partition's leader group (``TopicNames.leader_group``) on its ingest topic until it is
        past the last offset produced before the call. Each round reads every partition still
        lagging at once (one request per leader group, all in flight together), then sleeps the
        next :class:`~producer.config.SyncPolicy` interval. Raises SyncTimeoutError naming the
        lagging partitions after ``timeout`` seconds.

        Then, unless ``config.check_refusals`` is off, reads the deadletter topic from where the
        previous check stopped and raises :class:`MessagesRefusedError` listing the messages of this
        producer that a leader refused (their rows are not stored; everything else was accepted).
        """
        self._sync(timeout)

    def _sync(self, timeout: float, only: set[str] | None = None) -> None:
        """:meth:`sync`, for the ingest topics ``only`` when given."""
        deadline = self.config.sync_policy.clock() + timeout
        started = time.time()  # a write from here on is not covered by this sync's refusal check
        # the split drain of a write() only orders writes: a failure stays for the next flush()/sync()
        remaining = self._delivered_before(timeout, report_failures=only is None)
        if only is not None:
            remaining = {t: v for t, v in remaining.items() if t in only}
        self._await_accepted(remaining, timeout, deadline)
        if only is None:
            self._raise_refused(max(5.0, deadline - self.config.sync_policy.clock()), started)

    def await_accepted(self, written: Mapping[str, tuple[str, int]], timeout: float = 60.0) -> None:
        """Wait until the leaders accepted ``written`` ({ingest topic: (partition_id, last offset)},
        what :meth:`written` of other producers returned): what :meth:`sync` waits for after its
        own messages are delivered, for messages other producers sent (the Spark sink's driver
        waits once for all its write tasks, DESIGN.md section 9). SyncTimeoutError after
        ``timeout`` seconds; refusals are not read (see :class:`~producer.refusals.DeadletterWatch`)."""
        for topic, (partition_id, last) in written.items():
            if self.topics.ingest(partition_id) != topic:
                raise ValueError(f"{topic} is not the ingest topic of partition {partition_id!r:.40}")
            if isinstance(last, bool) or not isinstance(last, int) or last < 0:
                raise ValueError(f"{topic}: not an offset: {last!r:.40}")
        self._await_accepted(dict(written), timeout, self.config.sync_policy.clock() + timeout)

    def _await_accepted(self, remaining: dict[str, tuple[str, int]], timeout: float, deadline: float) -> None:
        """Poll the leader groups' committed offsets until each topic of ``remaining`` is past its offset."""
        policy = self.config.sync_policy
        committed: dict[str, int | None] = {}
        last_error: KafkaOperationError | None = None
        intervals = policy.intervals()
        while True:
            for topic, (_pid, last) in list(remaining.items()):
                seen = self._offsets_seen.get(topic)
                if seen is not None and seen[0] is not None and seen[0] > last:
                    del remaining[topic]  # committed offsets only grow: any read past ``last`` proves it
            if not remaining:
                break
            groups = {topic: self.topics.leader_group(pid) for topic, (pid, _) in remaining.items()}
            for topic, answer in self._committed_all(groups).items():
                if isinstance(answer, KafkaOperationError):
                    if answer.fatal:
                        raise answer
                    # a broker restart or a coordinator move: ask again (on a fresh admin client) until the deadline
                    last_error = answer
                    log.info("sync: %s; asking again on a fresh admin client", answer)
                    self._drop_admin()
                    continue
                committed[topic] = answer
                if answer is not None and answer > remaining[topic][1]:
                    del remaining[topic]
            if not remaining:
                break
            now = policy.clock()
            if now >= deadline:
                lagging = {t: (committed.get(t), last) for t, (_, last) in remaining.items()}
                detail = ", ".join(
                    f"{t} (leader group {self.topics.leader_group(pid)} committed {committed.get(t)}, needs > {last})"
                    for t, (pid, last) in sorted(remaining.items())
                )
                cause = f"; last offset read failed: {last_error}" if last_error is not None else ""
                raise SyncTimeoutError(
                    f"sync: {len(remaining)} partition(s) not accepted by their leader within {timeout}s "
                    f"(is a leader running?): {detail}{cause}",
                    lagging,
                )
            policy.sleep(min(next(intervals), max(0.0, deadline - now)))

    def _raise_refused(self, timeout: float, started: float) -> None:
        """MessagesRefusedError if a leader refused messages of this producer since the last check
        (what was written before ``started``, the wall-clock time the sync began, is covered)."""
        with self._lock:
            reader = self._refusals if self._refusals_started else None
            unchecked_since = self._unchecked_since
        if reader is None:
            return
        try:
            refusals = reader.read(timeout, unchecked_since=unchecked_since)
        except RefusalsLostError:
            self._checked(started)
            raise
        self._checked(started)
        if refusals:
            raise MessagesRefusedError(refusals)

    def _checked(self, started: float) -> None:
        """A refusal check covering every write before ``started`` completed."""
        with self._lock:
            if self._writing:
                return  # a write in progress may produce messages this check did not cover: keep its stamp
            self._unchecked_since = started if self._last_write_at >= started else None

    def _delivered_before(self, timeout: float, *, report_failures: bool = True) -> dict[str, tuple[str, int]]:
        """Wait for the messages produced so far; {ingest topic: (partition_id, last offset)} of
        everything delivered up to them. DeliveryError if one is not done in time, or (with
        ``report_failures``, which also clears them for the next check) if one failed."""
        with self._lock:
            pending = list(self._pending)
            targets = dict(self._last_offset)
        _done, late = wait_futures(pending, timeout=timeout)
        if late:
            raise DeliveryError(f"{len(late)} messages still in flight after {timeout}s")
        if report_failures:
            self._raise_failed()
        for future in pending:
            if not report_failures and future.exception() is not None:
                continue  # left in _failed: the next flush()/sync() reports it
            report = future.result()  # DeliveryError if it failed (reported by an earlier flush)
            if report.offset is not None and report.offset > targets.get(report.topic, ("", -1))[1]:
                targets[report.topic] = (report.partition_id, report.offset)
        return targets

    def _committed_all(self, groups: dict[str, str]) -> dict[str, int | KafkaOperationError | None]:
        """{ingest topic: its leader group's committed offset (None if none), or the error reading it}
        for ``groups`` ({ingest topic: leader group}); the groups are read concurrently."""
        since = time.monotonic()
        if self._offsets_reader is not None or len(groups) <= 1:
            return {topic: self._committed_since(group, topic, since) for topic, group in groups.items()}
        with self._lock:
            if self._sync_pool is None:
                self._sync_pool = ThreadPoolExecutor(_SYNC_READERS, thread_name_prefix="shoal-producer-sync")
            pool = self._sync_pool
        futures = {topic: pool.submit(self._committed_since, group, topic, since) for topic, group in groups.items()}
        return {topic: future.result() for topic, future in futures.items()}

    def _committed_since(self, group: str, topic: str, since: float) -> int | KafkaOperationError | None:
        """The committed offset of ``group`` on ``topic`` as read by a request sent at ``since`` or
        later: concurrent ``sync()`` calls share one read per topic instead of each sending its own."""
        with self._lock:
            lock = self._offset_locks.setdefault(topic, threading.Lock())
        with lock:
            seen = self._offsets_seen.get(topic)
            if seen is not None and seen[1] >= since:
                return seen[0]
            sent = time.monotonic()
            try:
                offset = self._committed(group, topic)
            except KafkaOperationError as exc:
                return exc
            self._offsets_seen[topic] = (offset, sent)
            return offset

    def _committed(self, group: str, topic: str) -> int | None:
        if self._offsets_reader is not None:
            return self._offsets_reader(group, topic)
        from shoal.kafka.indexes import committed_offsets

        # not ``stable``: a leader group has a transaction pending most of the time under load
        offsets = committed_offsets(self.admin, {group: [(topic, 0)]}, timeout_s=10, stable=False)
        return offsets.get(group, {}).get((topic, 0))
