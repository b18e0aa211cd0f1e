"""The leader's compaction intake: commit the majors the Spark compaction service computed.

Source: EventQL segment based replication (seed 000), section 3.1 (compaction; only the leader
compacts: "the new segment's base is the most recent minor segment it includes"); DESIGN.md
sections 5 and 9 (the leader commits a compaction, fenced by its epoch).

The compaction service (``spark_jobs.compaction``) publishes a major as one Avro manifest followed
by its chunks, in one Kafka transaction, on ``TopicNames.compaction(partition_id)`` (same framing
as a segments channel: header ``shoal.kind`` = ``manifest`` / ``chunk``). One
:class:`CompactionIntake` runs next to each leader, on its own :class:`~shoal.worker.Worker`
thread ``compaction-intake-<replica>``:

1. read a manifest (``read_committed``); refuse anything that is not a major of this partition;
2. stream its chunks to disk with ``write_segment_bytes`` (size and sha256 verified before the
   file appears, never parsed on the way);
3. ``replica.commit_major(record, leader_epoch=<the leader's current epoch>)``. A stale major (made
   in another epoch, or root moved since the service read the chain) raises
   CompactionConflictError: the file is deleted, the conflict counted, nothing committed. A major
   whose keys and versions are not the merge of the segments it replaces (read from the leader's
   own files) raises MajorContentError: deleted and counted (``wrong_content``), nothing committed.
   A replaced segment whose file is missing or damaged here is read again from this placement's
   segments channel (sha256-checked; ``restored``) and the check made then; without a whole copy
   there the major is refused, never committed unchecked;
4. commit the consumer offset past the major (group ``<prefix>.compaction-intake.<pid>.<placement>``)
   either way, so a refused major is not retried.

The segment publisher then replicates the committed major like any segment.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from shoal.errors import ShoalError
from shoal.kafka import clients
from shoal.kafka.admin import create_topic
from shoal.kafka.readers import read_segment_file
from shoal.kafka.settings import KafkaSettings
from shoal.segments import SegmentRecord
from shoal.segments.errors import (
    CompactionConflictError,
    MajorContentError,
    ReplacedSegmentUnreadableError,
    SegmentError,
)
from shoal.segments.parquet_io import delete_segment_file, write_segment_bytes
from shoal.topics import TopicNames
from shoal.wire.records import ManifestRecord as WireManifest
from shoal.wire.records import SegmentChunk
from shoal.worker import Deadline, Worker
from storage_node.config import consumer_overrides
from storage_node.errors import IntakeRejected
from storage_node.replica import PartitionReplica

log = logging.getLogger(__name__)

KIND_HEADER = "shoal.kind"
KIND_MANIFEST = b"manifest"
KIND_CHUNK = b"chunk"


def intake_group(topics: TopicNames, partition_id: str, placement_id: int) -> str:
    """Consumer group of one placement's intake on the partition's compaction topic."""
    return f"{topics.prefix}.compaction-intake.{partition_id}.{placement_id}"


@dataclass
class IntakeStats:
    committed: int = 0
    conflicts: int = 0
    rejected: int = 0
    wrong_content: int = 0
    """majors refused because their rows are not the merge of the segments they replace"""
    restored: int = 0
    """replaced segments whose file was missing or damaged here, read again from the own segments
    channel so the major could be checked against them"""
    last_error: str | None = None


def _kind(msg: Message) -> bytes | None:
    raw: Any = msg.headers() or ()
    for name, value in raw.items() if isinstance(raw, dict) else raw:
        if name == KIND_HEADER:
            return value.encode() if isinstance(value, str) else value
    return None


class CompactionIntake(Worker):
    """Consumes a partition's compaction topic and commits each major through the leader's replica."""

    def __init__(
        self,
        replica: PartitionReplica,
        epoch: Callable[[], int],
        kafka: KafkaSettings,
        *,
        topics: TopicNames,
        poll_s: float = 0.5,
        chunk_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(f"compaction-intake-{replica.name}")
        self.replica = replica
        self.epoch = epoch
        self.kafka = kafka
        self.topics = topics
        self.topic = topics.compaction(replica.partition_id)
        self.group = intake_group(topics, replica.partition_id, replica.placement_id)
        self.poll_s = poll_s
        self.chunk_timeout_s = chunk_timeout_s
        self.stats = IntakeStats()
        self.ready = threading.Event()
        self._consumer: Any = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> CompactionIntake:
        super().start()
        return self

    def __enter__(self) -> CompactionIntake:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run(self) -> None:
        try:
            create_topic(clients.admin(self.kafka), self.topic, policy=self.kafka.topics)
            self._consumer = clients.consumer(self.kafka, group_id=self.group, **consumer_overrides())
            self._consumer.subscribe([self.topic])
            self.ready.set()
            while not self.stopping.is_set():
                msg = self._consumer.poll(self.poll_s)
                if msg is None:
                    continue
                if msg.error() is not None:
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        log.warning("%s: %s", self.topic, msg.error())
                    continue
                self._handle(msg)
        except Exception as exc:
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("%s: compaction intake stopped", self.replica.name)

    def on_exit(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                self._consumer.close()

    # -- one major -----------------------------------------------------------------------------

    def _handle(self, msg: Message) -> None:
        if _kind(msg) != KIND_MANIFEST:
            self._commit(msg)  # a chunk without its manifest (a refused major's tail): skip it
            return
        last = msg
        try:
            manifest = WireManifest.from_bytes(msg.value())
            self._check(manifest)
            chunks = self._chunks(manifest)
            try:
                written = write_segment_bytes(
                    self.replica.directory,
                    manifest.segment_id,
                    (c.data for c in chunks),
                    expected_sha256=manifest.checksum,
                    expected_size=manifest.size_bytes,
                )
            finally:
                last = chunks.last or msg
            self._commit_major(manifest, written.row_count)
        except IntakeRejected as exc:
            self.stats.rejected += 1
            self.stats.last_error = str(exc)
            log.error("%s: compaction record at offset %d refused: %s", self.replica.name, msg.offset(), exc)
        except (ShoalError, SegmentError) as exc:
            self.stats.rejected += 1
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
            log.error("%s: compaction record at offset %d unusable: %s", self.replica.name, msg.offset(), exc)
        self._commit(last)

    def _check(self, m: WireManifest) -> None:
        if m.partition_id != self.replica.partition_id or m.table != self.replica.table.name:
            raise IntakeRejected(
                m.segment_id, f"major {m.segment_id} is for {m.table}/{m.partition_id}, not {self.replica.name}"
            )
        if not m.is_major:
            raise IntakeRejected(m.segment_id, f"segment {m.segment_id} on the compaction topic is not a major")
        if m.segment_id in self.replica.chain:
            raise IntakeRejected(m.segment_id, f"major {m.segment_id} is already in the chain")

    def _chunks(self, m: WireManifest) -> _ChunkStream:
        return _ChunkStream(self._consumer, m, self.chunk_timeout_s, self.stopping)

    def _commit_major(self, m: WireManifest, row_count: int) -> None:
        from shoal.segments.channel import from_wire, record_of

        record = record_of(from_wire(m, sender_placement_id=m.placement_id, topics=self.topics))
        if record.row_count != row_count:  # listed as it is, every follower would refuse it (receive.py)
            self._discard(m.segment_id)
            raise IntakeRejected(
                m.segment_id, f"major {m.segment_id}: file holds {row_count} rows, manifest says {record.row_count}"
            )
        try:
            epoch = self._leader_epoch()
            self._commit_checked(record, epoch)
        except CompactionConflictError as exc:
            self._discard(m.segment_id)
            self.stats.conflicts += 1
            self.stats.last_error = str(exc)
            log.warning("%s: stale compaction %s not committed: %s", self.replica.name, m.segment_id, exc)
            return
        except MajorContentError as exc:  # a compaction bug: committed, it would lose rows once truncated
            self._discard(m.segment_id)
            self.stats.wrong_content += 1
            self.stats.rejected += 1
            self.stats.last_error = str(exc)
            log.error("%s: compaction %s refused: %s", self.replica.name, m.segment_id, exc)
            return
        except BaseException:
            self._discard(m.segment_id)
            raise
        self.stats.committed += 1
        log.info(
            "%s: committed major %s (%d rows, base %s, epoch %d)",
            self.replica.name,
            m.segment_id,
            row_count,
            m.base_segment_id,
            epoch,
        )

    def _commit_checked(self, record: SegmentRecord, epoch: int) -> None:
        """``commit_major``; a segment it replaces whose file is missing or damaged here is read
        again from this placement's segments channel (sha256-checked against the segment list) and
        the commit tried again, once per replaced segment. A file the channel has no whole copy of
        raises ReplacedSegmentUnreadableError: the major is refused, never committed unchecked."""
        tried: set[str] = set()
        while True:
            try:
                self.replica.commit_major(record, leader_epoch=epoch)
                return
            except ReplacedSegmentUnreadableError as exc:
                if exc.segment_id in tried:
                    raise
                tried.add(exc.segment_id)
                log.warning("%s: %s; reading it again from the segments channel", self.replica.name, exc)
                self._restore(exc)

    def _restore(self, exc: ReplacedSegmentUnreadableError) -> None:
        topic = self.topics.segments(self.replica.partition_id, self.replica.placement_id)
        copy = read_segment_file(self.kafka, topic, exc.segment_id)
        if copy is None:
            raise exc
        self.replica.restore_file(exc.segment_id, copy[1])
        self.stats.restored += 1
        log.warning("%s: segment %s read again from %s and repaired", self.replica.name, exc.segment_id, topic)

    def _leader_epoch(self) -> int:
        try:
            return self.epoch()
        except ShoalError as exc:  # no longer the writable leader (SUSPENDED / LOST): commit nothing
            raise CompactionConflictError(f"this replica is not the writable leader: {exc}") from exc

    def _discard(self, segment_id: str) -> None:
        if segment_id not in self.replica.chain:
            with contextlib.suppress(SegmentError):
                delete_segment_file(self.replica.directory, segment_id)

    def _commit(self, msg: Message) -> None:
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        if topic is None or partition is None or offset is None:
            return
        try:
            self._consumer.commit(offsets=[TopicPartition(topic, partition, offset + 1)], asynchronous=False)
        except KafkaException as exc:
            log.warning("%s: cannot commit intake offset: %s", self.topic, exc)


class _ChunkStream:
    """The chunks following a manifest, in order, pulled from the consumer as the file is written."""

    def __init__(self, consumer: Any, manifest: WireManifest, timeout_s: float, stop: threading.Event) -> None:
        self.consumer = consumer
        self.manifest = manifest
        self.timeout_s = timeout_s
        self.stop = stop
        self.last: Message | None = None

    def __iter__(self) -> Iterator[SegmentChunk]:
        m = self.manifest
        for index in range(m.chunk_count):
            msg = self._next()
            self.last = msg
            if _kind(msg) != KIND_CHUNK:
                raise IntakeRejected(
                    m.segment_id, f"major {m.segment_id}: expected chunk {index} of {m.chunk_count}, got a manifest"
                )
            chunk = SegmentChunk.from_bytes(msg.value())
            if chunk.segment_id != m.segment_id or chunk.index != index or chunk.count != m.chunk_count:
                raise IntakeRejected(
                    m.segment_id,
                    f"major {m.segment_id}: expected chunk {index}/{m.chunk_count}, got {chunk.segment_id} "
                    f"{chunk.index}/{chunk.count}",
                )
            yield chunk

    def _next(self) -> Message:
        deadline = Deadline(self.timeout_s)
        while not self.stop.is_set():
            msg = self.consumer.poll(0.5)
            if msg is None:
                if deadline.expired():
                    break
                continue
            if msg.error() is not None:
                continue
            return msg
        raise IntakeRejected(self.manifest.segment_id, f"major {self.manifest.segment_id}: chunks did not arrive")
