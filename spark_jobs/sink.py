"""The shoal sink: ``df.writeStream.format("shoal")`` and ``df.write.format("shoal")``.

DESIGN.md section 9 (Sink). Executors (``write``) turn each Arrow record batch Spark hands them into
``Producer.write`` calls (validation, routing by key, Arrow IPC to the ingest topics, idempotent
with acks=all), flush, and report the last offset they produced to each ingest topic. By default
(``sync``) the driver's ``commit`` waits once, for every task together, until the partition leaders
accepted those offsets and refused none of the messages (``Producer.await_accepted`` and the
deadletter topic), before it records anything: a task does not wait for its own rows, so the next
task starts while the leaders take the last one's. Spark retries a failed task but never a failed
commit (the query stops), so the commit tries a wait or a fence that failed for a reason that may
pass again, until ``commitTimeout`` (:func:`retrying`). A streaming query's driver then records the
batch id in ZooKeeper (:mod:`spark_jobs.commit_log`); ``write`` reads it and skips a replay of the
batch recorded last. So:

* a batch killed mid-way (no commit) is written again when Spark replays it: rows are keyed
  upserts, so rows written twice with the same values leave the table as if written once;
* a batch that was committed but whose Spark commit-log entry is lost is replayed by Spark and
  skipped by the sink: it cannot undo newer writes to the same keys (Paimon #9666);
* a batch replayed by a run planned with a newer partition map than its first attempt's (a split
  finalized in between) goes to the children directly, while the first attempt's rows may still
  wait on the parent's ingest topic for its forwarder: the commit records such a batch (one whose
  tasks routed with a map the last recorded batch's did not) only once every split parent's
  records are forwarded (:func:`retired_backlog`), so no older copy lands after a newer batch.

Task attempts are fenced (:func:`sink_transactional_id`). Every streaming write task writes in one
Kafka transaction whose id is the query's and the Spark partition's, and leaders read the ingest
topics ``read_committed``. A task attempt first runs ``init_transactions``, which fences every
older attempt of its partition (an executor Spark declared lost but still running, a speculative
copy, an attempt of an earlier batch), and only then reads the commit log. The driver fences the
id of every partition of a batch before it waits for the leaders, and of every partition a
recorded batch of the query ever had (the commit log keeps the most): a transaction a
task of an earlier run left open (a run restarted with fewer partitions) is aborted then, instead
of holding the ingest topics' last stable offset, and so this batch's rows, until
``transactionTimeout``. It records the batch, then fences the batch's partitions again: an attempt
started after the first fence (during the wait) may have read the log before the record, and one
that starts after the second finds the batch recorded. So an attempt that still writes after its
batch was recorded cannot commit: its rows never reach a leader, and no older value lands over a
newer batch's.

A batch write (``df.write``) has no batch id: it is an idempotent upsert of the DataFrame's rows,
written without a transaction.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)

from metadata.client import MetadataClient, MetadataConfig
from metadata.metadata_file import MetadataFile
from shoal.errors import KafkaOperationError
from shoal.kafka.transaction import TransactionalChannel, fence_all
from shoal.worker import Backoff
from spark_jobs.commit_log import BatchCommitLog, validate_query_id
from spark_jobs.errors import SinkCommitError
from spark_jobs.settings import SinkSettings

if TYPE_CHECKING:
    from producer import ProducerConfig

log = logging.getLogger(__name__)

FENCE_CALL_TIMEOUT_S = 30.0
"""librdkafka's bound on one fence's ``init_transactions``."""

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def sink_transactional_id(topic_prefix: str, query_id: str, partition_id: int) -> str:
    """The transactional id of one Spark partition of one streaming query: every attempt of that
    partition, in every batch, shares it, so each one fences the ones before it."""
    if isinstance(partition_id, bool) or not isinstance(partition_id, int) or partition_id < 0:
        raise SinkCommitError(f"Spark partition id must be a non-negative int, got {partition_id!r:.40}")
    return f"{topic_prefix}.sink.{validate_query_id(query_id)}.{partition_id}"


@dataclass
class ShoalCommitMessage(WriterCommitMessage):
    """What one write task did: rows and Kafka messages sent, or that it skipped a committed batch."""

    query_id: str | None
    batch_id: int | None
    rows: int
    messages: int
    skipped: bool = False
    partition_id: int | None = None
    """The task's Spark partition (its transactional id's, :func:`sink_transactional_id`)."""
    written: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Ingest topic -> (partition id, last offset the task produced to it): what the driver waits for."""
    producer_id: str | None = None
    """The task producer's id (``shoal.producer`` header): its refusals on the deadletter topic."""
    refusals_from: int | None = None
    """The deadletter offset noted before the task's first message (None: refusals not checked)."""
    maps: tuple[int, ...] = ()
    """METADATA sequences of the partition maps the task routed with (:func:`retired_backlog`)."""


class _MapLoader:
    """The partition map the driver planned with, then (after a routing failure) the current one."""

    def __init__(self, file: MetadataFile, connection: MetadataConfig) -> None:
        self.file = file
        self.connection = connection
        self.used = False
        self.sequences: set[int] = set()
        """The METADATA sequences of every map handed out."""

    def __call__(self, table: str) -> MetadataFile:
        if not self.used:
            self.used = True
            file = self.file
        else:
            with MetadataClient(self.connection) as client:
                file = client.coordinator.current(table)
        self.sequences.add(file.sequence)
        return file


def producer_config(settings: SinkSettings) -> ProducerConfig:
    from producer import ProducerConfig

    c = settings.connection
    return ProducerConfig(c.connection, zk_timeout_s=c.zk_timeout_s, watch_metadata=False)


def gathered(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """``batches`` as tables of at least ``rows`` rows each (the last may be smaller), in order;
    empty batches are dropped. A table is yielded as soon as it is full, so at most ``rows`` rows
    plus one batch are held."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        held += batch.num_rows
        if held >= rows:
            yield pa.Table.from_batches(pending)
            pending, held = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


@dataclass(frozen=True)
class Written:
    """What :func:`write_batches` sent: rows, Kafka messages, and what the driver waits for."""

    rows: int = 0
    messages: int = 0
    offsets: dict[str, tuple[str, int]] = field(default_factory=dict)
    producer_id: str | None = None
    refusals_from: int | None = None
    maps: tuple[int, ...] = ()


def write_batches(
    settings: SinkSettings,
    file: MetadataFile,
    batches: Iterator[pa.RecordBatch],
    *,
    channel: TransactionalChannel | None = None,
) -> Written:
    """Produce every row of ``batches`` to ``settings.table``, delivered (acks=all) but not waited
    for at the leaders: the driver does that once for all tasks (:func:`await_tasks`). Columnar:
    Spark's batches are gathered into writes of ``settings.write_rows`` rows (:func:`gathered`).

    With an open ``channel`` every row goes out in one transaction of it, committed before this
    returns (a fenced channel raises, and nothing it produced becomes readable)."""
    from producer import Producer

    producer: Producer | None = None
    rows = messages = 0
    loader = _MapLoader(file, settings.connection)

    def produce_all() -> None:
        nonlocal producer, rows, messages
        for part in gathered(batches, settings.write_rows):
            if producer is None:
                producer = Producer(
                    producer_config(settings),
                    map_loader=loader,
                    kafka_producer=None if channel is None else channel.producer,
                )
            result = producer.write(settings.table, part)
            rows += result.rows
            messages += result.batches
        if producer is not None:
            producer.flush()

    try:
        if channel is None:
            produce_all()
        else:
            with channel.transaction():
                produce_all()
        if producer is None:
            return Written()
        return Written(
            rows,
            messages,
            producer.written(),
            producer.producer_id,
            producer.refusals_from,
            tuple(sorted(loader.sequences)),
        )
    finally:
        if producer is not None:
            producer.close()


def await_tasks(
    settings: SinkSettings,
    messages: list[ShoalCommitMessage],
    what: str,
    *,
    timeout_s: float | None = None,
    parents: bool = False,
    parents_since: int | None = None,
) -> None:
    """On the driver: wait until the partition leaders accepted every offset the tasks ``messages``
    report, then read the deadletter topic for refusals of their messages. SinkCommitError (so
    nothing is recorded) when a leader does not accept in ``timeout_s`` (``settings.sync_timeout_s``)
    or refused a message: its rows are not stored (DESIGN.md sections 4.2 and 9). The error is
    ``retriable`` for a timeout or a non-fatal Kafka error, not for a refusal. ``parents``: wait too
    until every record on a split parent's ingest topic is forwarded (:func:`retired_backlog`)."""
    from producer import Producer
    from producer.errors import ProducerError, SyncTimeoutError
    from producer.refusals import DeadletterWatch

    targets: dict[str, tuple[str, int]] = {}
    timeout = settings.sync_timeout_s if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout
    try:
        backlog = retired_backlog(settings, timeout, since=parents_since) if parents else {}
        for written in [*(m.written for m in messages), backlog]:
            for topic, (partition_id, last) in written.items():
                if topic not in targets or last > targets[topic][1]:
                    targets[topic] = (partition_id, last)
        if not targets:
            return
        config = producer_config(settings)
        with Producer(config) as producer:
            producer.await_accepted(targets, timeout)
            # a parent's forwarder moved those rows to a child's topic; a child that split too forwards
            # them again, after what the next batch writes to its own child directly: hop by hop
            from shoal.kafka.backlog import MAX_SPLIT_HOPS

            for _hop in range(MAX_SPLIT_HOPS):
                if not backlog:
                    break
                backlog = retired_backlog(settings, max(1.0, deadline - time.monotonic()), since=parents_since)
                if backlog:
                    producer.await_accepted(backlog, max(1.0, deadline - time.monotonic()))
        checked = {m.producer_id: m.refusals_from for m in messages if m.written and m.producer_id}
        starts = [at for at in checked.values() if at is not None]
        if not starts or not config.check_refusals:
            return
        watch = DeadletterWatch(config.kafka, config.topics, set(checked))
        try:
            watch.start(config.topic_timeout_s, at=min(starts))
            refusals = watch.read(max(5.0, deadline - time.monotonic()))
        finally:
            watch.close()
    except (ProducerError, KafkaOperationError, ValueError) as exc:
        retriable = isinstance(exc, SyncTimeoutError) or (isinstance(exc, KafkaOperationError) and not exc.fatal)
        raise SinkCommitError(f"{what}: {exc}; nothing is recorded", retriable=retriable) from exc
    if refusals:
        first = refusals[0]
        raise SinkCommitError(
            f"{what}: the leaders refused {len(refusals)} message(s), whose rows are not stored; first: "
            f"{first.topic} offset {first.offset} ({first.reason}: {first.detail}); nothing is recorded"
        )


def retired_backlog(
    settings: SinkSettings, timeout_s: float, *, since: int | None = None
) -> dict[str, tuple[str, int]]:
    """{ingest topic of a split parent of the table: (its partition id, offset of its last record)}
    for every parent (gone from METADATA by SPLIT_FINALIZE) whose leader group, committed by its
    straggler forwarder, is not past every record its topic holds.

    A write task routes with the partition map of its query run. Rows an attempt of a batch wrote to
    a parent that split meanwhile wait on its topic until the forwarder moves them to a child; a
    run planned with a newer map writes the replay of that batch, and the batches after it, to the
    children directly. Recorded before those older copies are forwarded, the next batch's newer
    values could be accepted first, and the forwarded copies would win with higher GTIDs (what
    ``Producer._order_across_splits`` prevents within one producer, DESIGN.md section 8)."""
    from metadata.metadata_file import retired_partitions
    from shoal.kafka import clients
    from shoal.kafka.backlog import unaccepted_ends
    from shoal.kafka.indexes import close_offset_readers
    from shoal.topics import TopicNames

    with MetadataClient(settings.connection) as client:
        history = client.coordinator.history(settings.table)
    # ``since``: the oldest map sequence an earlier write of the query can have routed with; a parent
    # already gone from that map took none of its rows. Not waiting on it also keeps a parent retired
    # long ago (its leader group's offset expired with offsets.retention.minutes) out of the commit.
    retired_at: dict[str, int] = {}
    for prev, file in itertools.pairwise(history):
        gone = {e.partition_id for e in prev.partitions} - {e.partition_id for e in file.partitions}
        for pid in gone:
            retired_at.setdefault(pid, file.sequence)
    parents = [
        r.entry.partition_id
        for r in retired_partitions(history)
        if since is None or retired_at.get(r.entry.partition_id, since + 1) > since
    ]
    if not parents:
        return {}
    kafka = settings.connection.kafka
    admin = clients.admin(kafka)
    try:
        return unaccepted_ends(kafka, admin, TopicNames(settings.connection.topic_prefix), parents, timeout_s)
    finally:
        close_offset_readers(admin)


_T = TypeVar("_T")


def retrying(settings: SinkSettings, what: str, step: Callable[[float], _T], *, deadline: float) -> _T:
    """Run ``step(timeout)`` until it does not raise a ``retriable`` SinkCommitError, or until the
    monotonic ``deadline`` (the commit's ``commit_timeout_s``): Spark retries a failed write task
    but never a failed commit, which fails the query. ``timeout`` is ``settings.sync_timeout_s``,
    or what is left before the deadline if less. Waits 1 s, doubling up to 15 s, between tries."""
    backoff = Backoff(initial_s=1.0, maximum_s=15.0, jitter=False)
    tries = 0
    while True:
        tries += 1
        left = deadline - time.monotonic()
        try:
            return step(max(1.0, min(settings.sync_timeout_s, left)))
        except SinkCommitError as exc:
            left = deadline - time.monotonic()
            if not exc.retriable or left <= backoff.peek():
                if tries > 1:
                    raise SinkCommitError(
                        f"{exc} (after {tries} tries in commitTimeout)", retriable=exc.retriable
                    ) from exc
                raise
            log.warning("%s failed (try %d, %.0f s left of commitTimeout), trying again: %s", what, tries, left, exc)
        time.sleep(backoff.next_delay())


def _message(query_id: str | None, batch_id: int | None, partition_id: int | None, w: Written) -> ShoalCommitMessage:
    return ShoalCommitMessage(
        query_id,
        batch_id,
        w.rows,
        w.messages,
        partition_id=partition_id,
        written=w.offsets,
        producer_id=w.producer_id,
        refusals_from=w.refusals_from,
        maps=w.maps,
    )


def _task_batch() -> tuple[str | None, int | None, int]:
    """The task's streaming query id, batch id and Spark partition id."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return None, None, 0
    query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY)
    batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
    return query_id or None, int(batch) if batch else None, ctx.partitionId()


def _channel(settings: SinkSettings, transactional_id: str) -> TransactionalChannel:
    """A write task's channel: its transaction holds the task's whole partition of a micro-batch."""
    return TransactionalChannel(
        settings.connection.kafka,
        transactional_id,
        **{"transaction.timeout.ms": int(settings.transaction_timeout_s * 1000)},
    )


class ShoalStreamWriter(DataSourceStreamWriter, DataSourceArrowWriter):
    """Streaming writer: Arrow batches in (``DataSourceArrowWriter``), batch ids fenced in ZooKeeper."""

    def __init__(self, settings: SinkSettings, file: MetadataFile) -> None:
        self.settings = settings
        self.file = file

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ShoalCommitMessage:
        query_id, batch_id, partition_id = _task_batch()
        return self.write_task(iterator, query_id, batch_id, partition_id)

    def write_task(
        self, iterator: Iterator[pa.RecordBatch], query_id: str | None, batch_id: int | None, partition_id: int
    ) -> ShoalCommitMessage:
        """One task attempt: fence the older attempts of ``partition_id`` (``init_transactions``),
        then read the commit log, then write in one transaction (the module docstring)."""
        if query_id is None or batch_id is None:
            return _message(query_id, batch_id, partition_id, write_batches(self.settings, self.file, iterator))
        connection = self.settings.connection
        channel = _channel(self.settings, sink_transactional_id(connection.topic_prefix, query_id, partition_id))
        try:
            channel.open()
            with BatchCommitLog(connection) as commits:
                replay = commits.check(query_id, batch_id, self.settings.table)
            if replay:
                for _ in iterator:  # Spark replays the batch the sink committed last: write nothing
                    pass
                log.warning("query %s batch %d was committed already: replay skipped", query_id, batch_id)
                return ShoalCommitMessage(query_id, batch_id, 0, 0, skipped=True, partition_id=partition_id)
            written = write_batches(self.settings, self.file, iterator, channel=channel)
        finally:
            channel.close()
        return _message(query_id, batch_id, partition_id, written)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        ours = [m for m in messages if isinstance(m, ShoalCommitMessage)]
        query_ids = {m.query_id for m in ours if m.query_id}
        if not query_ids:
            log.info(
                "batch %d of table %s: no write task reported a query id; nothing to record",
                batchId,
                self.settings.table,
            )
            return
        if len(query_ids) > 1:
            raise SinkCommitError(f"batch {batchId}: write tasks report several query ids {sorted(query_ids)}")
        query_id = query_ids.pop()
        used = {m.partition_id for m in ours if m.partition_id is not None}
        routed = frozenset(s for m in ours for s in m.maps)
        what = f"batch {batchId} of query {query_id}"
        deadline = time.monotonic() + self.settings.commit_timeout_s
        with BatchCommitLog(self.settings.connection) as commits:
            earlier = commits.partitions(query_id)
            # rows an earlier attempt routed by another map may wait on a split parent's topic: this
            # batch is recorded only once they are forwarded (retired_backlog)
            before = commits.routed_with(query_id)
            parents = before is None or not routed <= before
            # every partition a recorded batch of the query had: a transaction a task of an earlier
            # run left open is aborted (PySpark runs each commit in a fresh Python process, so
            # this driver cannot remember that it did so already)
            fenced = used | set(range(earlier))
            retrying(
                self.settings,
                f"{what}: fence",
                lambda t: self._fence_tasks(query_id, batchId, fenced, timeout_s=t),
                deadline=deadline,
            )
            if self.settings.sync:
                retrying(
                    self.settings,
                    f"{what}: wait for the leaders",
                    lambda t: await_tasks(
                        self.settings,
                        ours,
                        what,
                        timeout_s=t,
                        parents=parents,
                        parents_since=None if before is None else min(before, default=None),
                    ),
                    deadline=deadline,
                )
            recorded = commits.record(
                query_id,
                batchId,
                table=self.settings.table,
                partitions=max([earlier, *(p + 1 for p in used)]),
                maps=routed or None,
            )
            # an attempt of this batch started after the first fence (a speculative copy during the
            # wait) may have read the log before the record: fenced after it, it cannot commit, and
            # one that starts now finds the batch recorded
            retrying(
                self.settings,
                f"{what}: fence after the record",
                lambda t: self._fence_tasks(query_id, batchId, used, recorded=True, timeout_s=t),
                deadline=max(deadline, time.monotonic() + self.settings.sync_timeout_s),
            )
        rows = sum(m.rows for m in ours)
        skipped = all(m.skipped for m in ours)
        log.info(
            "query %s batch %d to %s: %d rows%s%s",
            query_id,
            batchId,
            self.settings.table,
            rows,
            " (replay skipped)" if skipped else "",
            "" if recorded else " (already recorded)",
        )

    def _fence_tasks(
        self,
        query_id: str,
        batch_id: int,
        partition_ids: set[int],
        *,
        recorded: bool = False,
        timeout_s: float = FENCE_CALL_TIMEOUT_S,
    ) -> None:
        """Fence every attempt of ``partition_ids``: an attempt that read the commit log before the
        record and still writes cannot commit after it, and a transaction left open is aborted.
        SinkCommitError, ``retriable`` unless Kafka's error is fatal. ``timeout_s``: what is left of
        the try (:func:`retrying`), bounding each fence's calls (at most :data:`FENCE_CALL_TIMEOUT_S`)."""
        prefix = self.settings.connection.topic_prefix
        ids = [sink_transactional_id(prefix, query_id, p) for p in sorted(partition_ids)]
        try:
            fence_all(
                self.settings.connection.kafka,
                ids,
                what=f"batch {batch_id} write task",
                call_timeout_s=max(1.0, min(FENCE_CALL_TIMEOUT_S, timeout_s)),
            )
        except KafkaOperationError as exc:
            outcome = (
                "the batch is recorded, but an attempt of it that read the commit log before the record "
                "may still commit its rows"
                if recorded
                else "the batch is not recorded"
            )
            raise SinkCommitError(f"batch {batch_id}: {exc}; {outcome}", retriable=not exc.fatal) from exc

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        rows = sum(m.rows for m in messages if isinstance(m, ShoalCommitMessage))
        log.warning(
            "batch %d to %s aborted after %d rows were produced; Spark will replay it (upserts are idempotent)",
            batchId,
            self.settings.table,
            rows,
        )


class ShoalBatchWriter(DataSourceArrowWriter):
    """``df.write.format("shoal")``: an upsert of every row (append mode)."""

    def __init__(self, settings: SinkSettings, file: MetadataFile) -> None:
        self.settings = settings
        self.file = file

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ShoalCommitMessage:
        return _message(None, None, None, write_batches(self.settings, self.file, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        ours = [m for m in messages if isinstance(m, ShoalCommitMessage)]
        if self.settings.sync:
            what = f"write to {self.settings.table}"
            retrying(
                self.settings,
                f"{what}: wait for the leaders",
                lambda t: await_tasks(self.settings, ours, what, timeout_s=t),
                deadline=time.monotonic() + self.settings.commit_timeout_s,
            )
        log.info("wrote %d rows to %s", sum(m.rows for m in ours), self.settings.table)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, ShoalCommitMessage))
        log.warning(
            "write to %s aborted after %d rows were produced (upserts: rerun to complete)", self.settings.table, rows
        )
