"""The compaction service: a Structured Streaming query over the segments channels drives compaction.

DESIGN.md sections 5 and 9; EventQL seed 000 section 3.1. The query reads every segments channel
of the prefix (``subscribePattern``, ``read_committed``, manifests only, chunks skipped by header)
into a :class:`~spark_jobs.compaction.book.ChannelBook`. After each micro-batch, and every
``check_interval_s``, each partition is looked at:

1. its leader (placement and epoch) is read from ZooKeeper: the epoch at *start* fences the result;
2. the chain of the leader's channel gives the run since the latest major; the policy decides;
3. the major is computed with Spark (:mod:`~spark_jobs.compaction.compute`), its entry built with
   ``compaction_entry`` (base = newest included minor = the root read, included ids, the start
   epoch), written locally and published on the partition's compaction topic;
4. the leader's intake commits it, or refuses it if the epoch changed or root moved meanwhile
   (nothing stale is ever committed); a refused major is simply recomputed on a later round.

The book is rebuilt from the channels at every start (they keep everything from each latest major
on), so the query uses a fresh checkpoint and nothing is lost across restarts.
"""

from __future__ import annotations

import logging
import math
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metadata.client import MetadataClient, MetadataConfig
from metadata.election import read_epoch
from metadata.table import TableDefinition
from shoal.errors import ConfigError, ShoalError
from shoal.ids import new_segment_id, validate_table_name
from shoal.kafka.clients import spark_kafka_options
from shoal.topics import TopicNames
from shoal.wire.records import ManifestRecord as WireManifest
from shoal.worker import Deadline
from spark_jobs.compaction.book import ChannelBook, ChannelView
from spark_jobs.compaction.compute import SegmentSource, compute_major, compute_major_local, write_major
from spark_jobs.compaction.policy import CompactionPolicy, decide, minor_run
from spark_jobs.compaction.publish import CHUNK_BYTES, publish_major
from spark_jobs.errors import CompactionJobError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompactionConfig:
    connection: MetadataConfig
    policy: CompactionPolicy = field(default_factory=CompactionPolicy)
    table: str | None = None
    work_dir: Path | None = None
    """Where computed majors are written before publishing (a temp dir by default)."""
    check_interval_s: float = 30.0
    commit_timeout_s: float = 120.0
    """How long a published major may stay uncommitted before the partition is considered again."""
    local_max_bytes: int = 64 * 1024 * 1024
    """Majors whose input segments total at most this many bytes are computed in this process
    (``compute_major_local``: same reads, checks and merge order) instead of by a Spark job, whose
    fixed cost is seconds; 0 = always Spark. At 48.8 MB of input (``bench/compaction.py``) the
    local path held about 7x the input at its peak (Arrow tables plus the chunk bytes); above the
    limit Spark's executors share the work."""

    def __post_init__(self) -> None:
        if self.table is not None:
            validate_table_name(self.table)
        if not all(0 < s < math.inf for s in (self.check_interval_s, self.commit_timeout_s)):
            raise ConfigError("check_interval_s and commit_timeout_s must be finite numbers > 0")
        if self.local_max_bytes < 0:
            raise ConfigError("local_max_bytes must be >= 0")


@dataclass(frozen=True)
class PreparedMajor:
    """A computed major, written locally, ready to publish for the leader of ``epoch``."""

    table: str
    partition_id: str
    manifest: WireManifest
    path: Path
    reason: str
    folded: tuple[str, ...]


@dataclass
class CompactionOutcome:
    partition_id: str
    segment_id: str
    reason: str
    rows: int
    bytes: int
    epoch: int
    base_segment_id: str | None
    folded: int
    committed: bool | None = None


class CompactionService:
    """Decides, computes and publishes majors. ``run()`` blocks; ``run_once()`` is ``--once``."""

    def __init__(self, spark: SparkSession, config: CompactionConfig, *, clock: Callable[[], float] = time.time):
        self.spark = spark
        self.config = config
        self.topics = TopicNames(config.connection.topic_prefix)
        self.book = ChannelBook(self.topics)
        self.clock = clock
        self.outcomes: list[CompactionOutcome] = []
        self.failures: list[tuple[str, str]] = []
        """(partition_id, error) of every compaction attempt that failed (the service keeps going)."""
        self._pending: dict[str, tuple[str, float, int]] = {}
        """partition -> (published major, when, its epoch), until it shows up on the leader's channel."""
        self._client: MetadataClient | None = None
        self._tables: dict[str, TableDefinition] = {}
        self._lock = threading.RLock()
        self._owned_work_dir: Path | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def client(self) -> MetadataClient:
        if self._client is None:
            self._client = MetadataClient(self.config.connection)
        return self._client

    @property
    def work_dir(self) -> Path:
        if self.config.work_dir is not None:
            self.config.work_dir.mkdir(parents=True, exist_ok=True)
            return self.config.work_dir
        if self._owned_work_dir is None:
            self._owned_work_dir = Path(tempfile.mkdtemp(prefix="shoal-compaction-"))
        return self._owned_work_dir

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._owned_work_dir is not None:
            shutil.rmtree(self._owned_work_dir, ignore_errors=True)
            self._owned_work_dir = None

    def __enter__(self) -> CompactionService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the streaming query -------------------------------------------------------------------

    def manifests_stream(self) -> DataFrame:
        from pyspark.sql import functions as F

        pattern = re.escape(self.topics.prefix) + r"\.segments\..+"
        return (
            self.spark.readStream.format("kafka")
            .options(**spark_kafka_options(self.config.connection.kafka))
            .option("kafka.isolation.level", "read_committed")
            .option("subscribePattern", pattern)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .option("failOnDataLoss", "false")
            .load()
            .where(
                F.exists("headers", lambda h: (h["key"] == "shoal.kind") & (h["value"].cast("string") == "manifest"))
            )
            .select("topic", "offset", "value")
        )

    def on_batch(self, df: DataFrame, batch_id: int, *, evaluate: bool = True) -> None:
        added = 0
        for row in df.collect():  # manifests only: a few hundred bytes each
            try:
                manifest = WireManifest.from_bytes(bytes(row["value"]))
            except ShoalError as exc:
                self.book.invalid += 1
                log.error("%s offset %d: manifest does not decode: %s", row["topic"], row["offset"], exc)
                continue
            added += self.book.add(row["topic"], int(row["offset"]), manifest)
        log.info("compaction: batch %d, %d manifests", batch_id, added)
        self.learn_tables()
        if evaluate:
            self.evaluate()

    def start(self, checkpoint: Path, *, once: bool) -> StreamingQuery:
        writer = (
            self.manifests_stream()
            .writeStream.foreachBatch(lambda df, bid: self.on_batch(df, bid, evaluate=not once))
            .option("checkpointLocation", str(checkpoint))
            .queryName("shoal_compaction")
        )
        writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime="5 seconds")
        return writer.start()

    def refresh(self) -> None:
        """Read every segments channel as it is now into the book (an availableNow run of the query)."""
        checkpoint = Path(tempfile.mkdtemp(prefix="shoal-compaction-ck-"))
        try:
            query = self.start(checkpoint, once=True)
            query.awaitTermination()
            if query.exception() is not None:
                raise CompactionJobError(f"reading the segments channels failed: {query.exception()}")
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)

    def run_once(self, *, wait: bool = True) -> list[CompactionOutcome]:
        """Read the channels as they are now, compact what needs it, (optionally) wait for the commits."""
        self.refresh()
        done = self.evaluate()
        if wait:
            for outcome in done:
                outcome.committed = self.wait_committed(outcome.partition_id, outcome.segment_id)
        return done

    def run(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set: the streaming query plus a periodic check (age thresholds)."""
        checkpoint = Path(tempfile.mkdtemp(prefix="shoal-compaction-ck-"))
        query = self.start(checkpoint, once=False)
        try:
            while not stop.wait(self.config.check_interval_s):
                if not query.isActive:
                    raise CompactionJobError(f"the compaction query stopped: {query.exception()}")
                self.evaluate()
        finally:
            query.stop()
            shutil.rmtree(checkpoint, ignore_errors=True)

    # -- deciding ------------------------------------------------------------------------------

    def learn_tables(self) -> None:
        """Read the definition of every table the book names that this process has not read yet.

        Called as manifests arrive, so a compaction finds its table's definition in memory: the
        first METADATA read of a process (a Kafka store consumer) costs more than computing a
        small major. A table that cannot be read now is read again when it is compacted."""
        with self._lock:
            for name in sorted(set(self.book.partitions().values()) - set(self._tables)):
                if self.config.table is not None and name != self.config.table:
                    continue
                try:
                    self._table(name)
                except ShoalError as exc:
                    log.warning("compaction: cannot read the definition of table %s yet: %s", name, exc)

    def _table(self, name: str) -> TableDefinition:
        if name not in self._tables:
            self._tables[name] = self.client.coordinator.current(name).table
        return self._tables[name]

    def _leader_view(self, partition_id: str) -> tuple[ChannelView, int] | None:
        rec = read_epoch(self.client.zk, self.client.layout, partition_id)
        if rec.placement_id is None:
            return None
        view = self.book.view(partition_id, rec.placement_id)
        return None if view is None else (view, rec.epoch)

    def evaluate(self) -> list[CompactionOutcome]:
        """Compact every partition (of ``--table``) that the policy says needs it now."""
        done = []
        with self._lock:
            for partition_id, table in sorted(self.book.partitions().items()):
                if self.config.table is not None and table != self.config.table:
                    continue
                try:
                    prepared = self.prepare(partition_id)
                    if prepared is not None:
                        done.append(self.publish(prepared))
                except Exception as exc:  # Spark, Kafka or chain errors: this partition waits for the next round
                    self.failures.append((partition_id, f"{type(exc).__name__}: {str(exc)[:1000]}"))
                    log.exception("compaction of partition %s failed", partition_id)
        return done

    def prepare(self, partition_id: str, *, force: bool = False) -> PreparedMajor | None:
        """Decide for one partition; if due (or ``force``), compute and write its major (not published)."""
        from shoal.segments import SegmentRecord, compaction_entry, segments_to_compact
        from shoal.segments.channel import to_wire

        found = self._leader_view(partition_id)
        if found is None:
            return None
        view, epoch = found
        pending = self._pending.get(partition_id)
        waiting = pending is not None and pending[0] not in view.manifests and pending[2] == epoch
        if waiting and not force and pending is not None and self.clock() - pending[1] < self.config.commit_timeout_s:
            return None  # the last major is not committed (nor surely refused: same epoch) yet
        folded = segments_to_compact(view.chain)
        if not folded:
            return None
        if not folded[0].is_major:
            log.warning("partition %s: no major reachable on %s; not compacting", partition_id, view.topic)
            return None
        minors = [view.manifests[e.segment_id][1] for e in folded[1:]]
        reason = decide(
            self.config.policy, minor_run([(m.size_bytes, m.created_at_ms) for m in minors]), int(self.clock() * 1000)
        )
        if reason is None and not force:
            return None
        reason = reason or "forced"
        table = self._table(view.table)
        sources = [SegmentSource.of(view.topic, *view.manifests[e.segment_id]) for e in folded]
        kafka = self.config.connection.kafka
        # tombstones stay (policy: a row merged later with an older GTID must not bring a deleted key back)
        if sum(s.size_bytes for s in sources) <= self.config.local_max_bytes:
            rows = compute_major_local(kafka, sources, table, drop_tombstones=False)
        else:
            rows = compute_major(self.spark, kafka, sources, table, drop_tombstones=False)
        segment_id = new_segment_id()
        written = write_major(self.work_dir, segment_id, rows, table)
        entry = compaction_entry(view.chain, segment_id, placement_id=view.placement_id, epoch=epoch)
        record = SegmentRecord(
            entry=entry, sha256=written.sha256, row_count=written.row_count, size_bytes=written.size_bytes
        )
        manifest = to_wire(
            record,
            table=table.name,
            partition_id=partition_id,
            topics=self.topics,
            latest_major_offset=None,
            chunk_bytes=CHUNK_BYTES,
        )
        log.info(
            "partition %s: major %s of %d segments (%s), %d rows, epoch %d",
            partition_id,
            segment_id,
            len(folded),
            reason,
            written.row_count,
            epoch,
        )
        return PreparedMajor(
            table.name, partition_id, manifest, written.path, reason, tuple(e.segment_id for e in folded)
        )

    def publish(self, prepared: PreparedMajor) -> CompactionOutcome:
        m = prepared.manifest
        try:
            publish_major(self.config.connection.kafka, self.topics, m, prepared.path)
        finally:
            prepared.path.unlink(missing_ok=True)
        self._pending[prepared.partition_id] = (m.segment_id, self.clock(), m.epoch)
        outcome = CompactionOutcome(
            prepared.partition_id,
            m.segment_id,
            prepared.reason,
            m.row_count,
            m.size_bytes,
            m.epoch,
            m.base_segment_id,
            len(prepared.folded),
        )
        self.outcomes.append(outcome)
        return outcome

    def wait_committed(self, partition_id: str, segment_id: str, timeout_s: float | None = None) -> bool:
        """True once the leader published the major on its segments channel (it committed it)."""
        from shoal.kafka.readers import read_manifests

        deadline = Deadline(timeout_s if timeout_s is not None else self.config.commit_timeout_s)
        while True:
            rec = read_epoch(self.client.zk, self.client.layout, partition_id)
            if rec.placement_id is not None:
                topic = self.topics.segments(partition_id, rec.placement_id)
                try:
                    seen = read_manifests(self.config.connection.kafka, topic, timeout_s=10)
                except ShoalError:
                    seen = []
                if any(cm.manifest.segment_id == segment_id for cm in seen):
                    return True
            if deadline.expired():
                return False
            deadline.sleep(1.0)


def describe(outcomes: list[CompactionOutcome]) -> list[dict[str, Any]]:
    return [dict(o.__dict__) for o in outcomes]
