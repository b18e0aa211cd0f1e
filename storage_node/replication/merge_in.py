"""Leader side of "old leader pushes its unreplicated segments": receive and MERGE (source 3.5).

DESIGN.md section 7: "An old leader that comes back pushes its unreplicated segments to the new
leader through its own segments channel, and the new leader merges them." The leader consumes the
segments channels of the partition's other placements (group ``replica_group(pid, own placement)``,
so its committed offsets there are its acks of pushed segments) and decides per manifest with
:func:`~shoal.segments.decide_leader_receive`:

- SEGMENT_EXISTS (referenced, or already here): skip, ack;
- MERGE: stream the chunks to disk (verified, fsynced), then hand the record to the leader's own
  thread, which lists it detached, re-inserts its rows keeping their GTIDs as a new segment on root
  and deletes it (:meth:`PartitionReplica.merge_detached`); ack once that is durable;
- INVALID: reported, not acked.

A pushed segment whose bytes are corrupt or whose merge fails (a full disk, a SQLite error) is not
skipped: the channel is sought back to its manifest and read again after ``retry_pause_s``. Going on
would ack the next segment's offset, past the failed one, and the Tail would then delete it from the
pusher's channel. A pushed segment whose chunks are broken on the channel (a record among them that
is not its next chunk, a manifest before its last chunk) is read again the same way, up to
``max_attempts`` reads in all; one still not merged then, refused (INVALID) although its manifest
decodes, or refused by the merge (:meth:`PartitionReplica.merge_detached`: columns that are not the
table's, rows of an epoch above this leader's; its file is deleted) holds the channel's Ack at its
manifest (:attr:`PeerSegmentReceiver.held`): later segments are merged, but the Ack never passes
it, so the pusher keeps its copy and does not count its push as merged; reading the channel again
(a new leader term) tries it again.

At a channel's end with every delivered record acked, the Ack moves past the transaction markers
(as a follower's does): a pusher waits for an Ack at its channel's end before it counts a push as
merged (:mod:`storage_node.roles.lifecycle`), and the last record of a transaction is followed by
its commit marker.

The receiver runs on its own :class:`~shoal.worker.Worker` thread ``merge-<pid[:8]>``; merges run on the
leader's thread (between ingest batches) so they never race a flush for the root.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from shoal.errors import SchemaError, ShoalError
from shoal.kafka import clients
from shoal.kafka.admin import create_topic
from shoal.kafka.settings import KafkaSettings
from shoal.segments import (
    ReceiveOutcome,
    SegmentRecord,
    decide_leader_receive,
    write_segment_bytes,
)
from shoal.segments.chain import SegmentEntry
from shoal.segments.channel import KIND_CHUNK, KIND_MANIFEST, from_wire, message_kind
from shoal.segments.errors import ChecksumMismatchError, CorruptSegmentError, InvalidSegmentEntryError
from shoal.segments.parquet_io import delete_segment_file
from shoal.topics import TopicNames
from shoal.wire.records import ManifestRecord as WireManifest
from shoal.wire.records import SegmentChunk
from shoal.worker import Worker
from storage_node.config import consumer_overrides
from storage_node.errors import ChunkError
from storage_node.replica import PartitionReplica
from storage_node.replication.publish import SEGMENTS_TOPIC_CONFIG
from storage_node.replication.receive import DEFAULT_MAX_IN_FLIGHT_BYTES

log = logging.getLogger(__name__)


@dataclass
class MergeJob:
    """A received, durable segment for the leader's thread to merge."""

    record: SegmentRecord
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


@dataclass
class MergeStats:
    manifests: int = 0
    merged: int = 0
    exists: int = 0
    invalid: int = 0
    retries: int = 0


class PeerSegmentReceiver(Worker):
    """Consumes the other placements' segments channels for a leader; merges what they push."""

    def __init__(
        self,
        replica: PartitionReplica,
        kafka: KafkaSettings,
        *,
        topics: TopicNames,
        peers: Callable[[], Sequence[int]],
        submit: Callable[[MergeJob], None],
        retry_pause_s: float = 2.0,
        max_attempts: int = 5,
    ) -> None:
        super().__init__(f"merge-{replica.partition_id[:8]}")
        self.retry_pause_s = retry_pause_s
        self.max_attempts = max_attempts
        self.replica = replica
        self.kafka = kafka
        self.topics = topics
        self.peers = peers
        self.submit = submit
        self.stats = MergeStats()
        self._consumer: Consumer | None = None
        self._owners: dict[str, int] = {}
        self._assembling: dict[str, _Assembly] = {}
        """Per peer channel (topic): the pushed segment whose chunks are arriving."""
        self._delivered: dict[str, int] = {}
        """Per peer channel: one past the last record delivered."""
        self._acked: dict[str, int] = {}
        """Per peer channel: the offset last committed."""
        self.held: dict[str, int] = {}
        """Per peer channel: the manifest offset of the first pushed segment not merged; the Ack
        stays at or below it."""
        self._attempts: dict[tuple[str, int], int] = {}

    def start(self) -> PeerSegmentReceiver:
        super().start()
        return self

    def run(self) -> None:
        try:
            self._open()
            while not self.stopping.is_set():
                msg = self._poll(0.5)
                if msg is not None:
                    self._handle(msg)
        except BaseException:
            log.exception("%s: peer segment receiver failed", self.replica.name)
            raise  # the Worker records it as ``error`` (state FAILED)

    def on_exit(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                self._consumer.close()

    def _open(self) -> None:
        pid = self.replica.partition_id
        peers = [p for p in self.peers() if p != self.replica.placement_id]
        admin = clients.admin(self.kafka)
        self._owners = {self.topics.segments(pid, p): p for p in peers}
        for topic in self._owners:
            create_topic(admin, topic, policy=self.kafka.topics, config=SEGMENTS_TOPIC_CONFIG)
        consumer = clients.consumer(
            self.kafka,
            group_id=self.topics.replica_group(pid, self.replica.placement_id),
            **{**consumer_overrides(), "enable.partition.eof": True},
        )
        tps = [TopicPartition(t, 0) for t in self._owners]
        if tps:
            committed = consumer.committed(tps, timeout=30)
            consumer.assign(
                [TopicPartition(tp.topic, 0, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING) for tp in committed]
            )
        self._consumer = consumer

    def _poll(self, timeout: float) -> Message | None:
        assert self._consumer is not None
        msg = self._consumer.poll(timeout)
        if msg is None:
            return None
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                self._ack_past_markers(str(msg.topic()), int(msg.offset() or 0))
            else:
                log.warning("%s: peer segments consumer: %s", self.replica.name, err)
            return None
        self._delivered[str(msg.topic())] = int(msg.offset() or 0) + 1
        return msg

    def _ack_past_markers(self, topic: str, eof: int) -> None:
        """At ``topic``'s end with every delivered record acked: Ack = the position past the markers."""
        if topic not in self._owners or topic in self._assembling or topic in self.held:
            return
        acked = self._acked.get(topic, -1)
        if self._delivered.get(topic, -1) <= acked < eof:
            self._ack(topic, eof)

    def _handle(self, msg: Message) -> None:
        """One message of a peer's segments channel. Each channel has its own assembly state, so
        the chunk streams of two peers may interleave on the shared consumer."""
        topic, offset = str(msg.topic()), int(msg.offset() or 0)
        sender = self._owners.get(topic)
        if sender is None:
            return
        kind = message_kind(msg.headers())
        if kind == KIND_MANIFEST:
            self._on_manifest(topic, sender, offset, msg.value())
        elif kind == KIND_CHUNK:
            self._on_chunk(topic, offset, msg.value())

    def _on_manifest(self, topic: str, sender: int, offset: int, value: bytes | None) -> None:
        unfinished = self._assembling.pop(topic, None)
        if unfinished is not None:
            unfinished.discard()
            self.stats.invalid += 1
            log.error(
                "%s: pushed segment %s: a manifest at %s@%d came before its last chunk",
                self.replica.name,
                unfinished.wire.segment_id,
                topic,
                offset,
            )
            if unfinished.keep and self._failed(topic, unfinished):
                return  # read again from the unfinished segment's manifest
        self.stats.manifests += 1
        try:
            wire = WireManifest.from_bytes(value)
            manifest = from_wire(wire, sender_placement_id=sender, topics=self.topics)
        except (ShoalError, InvalidSegmentEntryError) as exc:
            self.stats.invalid += 1
            log.error("%s: INVALID manifest at %s@%d: %s", self.replica.name, topic, offset, exc)
            return
        decision = decide_leader_receive(
            self.replica.chain,
            manifest,
            expected_partition_id=self.replica.partition_id,
            replica_placement_ids=frozenset(self._owners.values()),
            loading=False,
            in_flight_bytes=0,
            max_in_flight_bytes=DEFAULT_MAX_IN_FLIGHT_BYTES,
        )
        if decision.outcome is ReceiveOutcome.SEGMENT_EXISTS:
            assembly = _Assembly(wire, sender, decision.entry, offset, keep=False)
        elif decision.outcome is ReceiveOutcome.MERGE and decision.entry is not None:
            assembly = _Assembly(wire, sender, decision.entry, offset, keep=True, directory=self.replica.directory)
        else:
            self.stats.invalid += 1
            log.error(
                "%s: pushed segment %s: %s %s",
                self.replica.name,
                wire.segment_id,
                decision.outcome.value,
                decision.reason,
            )
            self._hold(topic, offset, wire.segment_id)
            return  # its chunks find no assembly and are skipped; the Ack stays at its manifest
        self._assembling[topic] = assembly
        if assembly.complete:
            self._finish(topic)

    def _on_chunk(self, topic: str, offset: int, value: bytes | None) -> None:
        assembly = self._assembling.get(topic)
        if assembly is None:
            return  # a chunk of a segment that is skipped unacked (INVALID), or a stray one
        try:
            assembly.add(offset, value)
        except ChunkError as exc:
            self._assembling.pop(topic).discard()
            self.stats.invalid += 1
            log.error("%s: pushed segment %s: %s", self.replica.name, assembly.wire.segment_id, exc)
            if assembly.keep:  # one this leader holds already needs no chunk: later acks may pass it
                self._failed(topic, assembly)
            return
        if assembly.complete:
            self._finish(topic)

    def _finish(self, topic: str) -> None:
        assembly = self._assembling.pop(topic)
        wire = assembly.wire
        if not assembly.keep:
            self.stats.exists += 1
            self._ack(topic, assembly.last_offset + 1)
            return
        assert assembly.entry is not None
        try:
            written = write_segment_bytes(
                self.replica.directory,
                wire.segment_id,
                assembly.chunks(),
                expected_sha256=wire.checksum,
                expected_size=wire.size_bytes,
            )
        except (ChecksumMismatchError, CorruptSegmentError) as exc:
            self.stats.invalid += 1
            log.error("%s: pushed segment %s is corrupt: %s", self.replica.name, wire.segment_id, exc)
            self._again(topic, assembly.manifest_offset)
            return
        finally:
            assembly.discard()
        job = MergeJob(
            SegmentRecord(
                entry=assembly.entry, sha256=written.sha256, row_count=written.row_count, size_bytes=written.size_bytes
            )
        )
        self.submit(job)
        while not job.done.wait(0.5):
            if self.stopping.is_set():
                return
        if isinstance(job.error, SchemaError):  # refused: its columns or epochs are not this leader's to merge
            self.stats.invalid += 1
            log.error("%s: pushed segment %s is refused: %s", self.replica.name, wire.segment_id, job.error)
            if self.replica.record(wire.segment_id) is None:  # nothing lists it: the file is ours to drop
                delete_segment_file(self.replica.directory, wire.segment_id)
            self._hold(topic, assembly.manifest_offset, wire.segment_id)
            return
        if job.error is not None:
            log.error("%s: merging pushed segment %s failed: %s", self.replica.name, wire.segment_id, job.error)
            self._again(topic, assembly.manifest_offset)
            return
        self.stats.merged += 1
        log.info("%s: merged segment %s pushed by placement %d", self.replica.name, wire.segment_id, assembly.sender)
        self._ack(topic, assembly.last_offset + 1)

    def _failed(self, topic: str, assembly: _Assembly) -> bool:
        """A pushed segment to merge whose chunks broke: read it again (True), or, after
        ``max_attempts``, hold the channel's Ack at its manifest (False)."""
        key = (topic, assembly.manifest_offset)
        attempts = self._attempts.get(key, 0) + 1
        self._attempts[key] = attempts
        if attempts < self.max_attempts:
            self._again(topic, assembly.manifest_offset)
            return True
        self._hold(topic, assembly.manifest_offset, assembly.wire.segment_id)
        return False

    def _hold(self, topic: str, manifest_offset: int, segment_id: str) -> None:
        """Never ack ``topic`` past ``manifest_offset`` (a pushed segment that was not merged)."""
        if manifest_offset < self.held.get(topic, manifest_offset + 1):
            self.held[topic] = manifest_offset
            log.error(
                "%s: pushed segment %s at %s@%d is not merged: the Ack on that channel stays at its manifest, "
                "so its pusher keeps it",
                self.replica.name,
                segment_id,
                topic,
                manifest_offset,
            )

    def _again(self, topic: str, manifest_offset: int) -> None:
        """Read ``topic`` again from a failed segment's manifest, after a pause: never ack past it."""
        assert self._consumer is not None
        self.stats.retries += 1
        log.warning(
            "%s: reading %s again from offset %d in %.1fs",
            self.replica.name,
            topic,
            manifest_offset,
            self.retry_pause_s,
        )
        self._consumer.seek(TopicPartition(topic, 0, manifest_offset))
        self._delivered[topic] = manifest_offset + 1  # delivered, not acked: no Ack past markers until it is
        self.stopping.wait(self.retry_pause_s)

    def _ack(self, topic: str, next_offset: int) -> None:
        assert self._consumer is not None
        next_offset = min(next_offset, self.held.get(topic, next_offset))
        if next_offset <= self._acked.get(topic, -1):
            return
        self._consumer.commit(offsets=[TopicPartition(topic, 0, next_offset)], asynchronous=False)
        self._acked[topic] = next_offset


class _Assembly:
    """The chunks of one pushed segment as they arrive on its channel (in order, possibly interleaved
    with other channels' messages). ``keep``: spool them (MERGE); else only count them (SEGMENT_EXISTS).
    Spooled in memory up to ``SPOOL_MEMORY_BYTES``, then in a temporary file of the replica directory."""

    SPOOL_MEMORY_BYTES = 8 * 1024 * 1024

    def __init__(
        self,
        wire: WireManifest,
        sender: int,
        entry: SegmentEntry | None,
        manifest_offset: int,
        *,
        keep: bool,
        directory: Path | None = None,
    ) -> None:
        self.wire = wire
        self.sender = sender
        self.entry = entry
        self.keep = keep
        self.manifest_offset = manifest_offset
        self.last_offset = manifest_offset
        self.next_index = 0
        self._spool: IO[bytes] | None = None
        if keep:
            spool_dir = None if directory is None else str(directory)
            # closed by discard(), when the segment is written or dropped
            self._spool = tempfile.SpooledTemporaryFile(max_size=self.SPOOL_MEMORY_BYTES, dir=spool_dir)  # noqa: SIM115
        self._sizes: list[int] = []

    @property
    def complete(self) -> bool:
        return self.next_index >= self.wire.chunk_count

    def add(self, offset: int, value: bytes | None) -> None:
        wire, index = self.wire, self.next_index
        try:
            chunk = SegmentChunk.from_bytes(value)
        except ShoalError as exc:
            raise ChunkError(wire.segment_id, index, f"chunk {index}: {exc}") from exc
        if (chunk.segment_id, chunk.index) != (wire.segment_id, index):
            raise ChunkError(
                wire.segment_id,
                index,
                f"expected chunk {index} of {wire.segment_id}, got {chunk.index} of {chunk.segment_id}",
            )
        if self._spool is not None:
            self._spool.write(chunk.data)
            self._sizes.append(len(chunk.data))
        self.next_index += 1
        self.last_offset = offset

    def chunks(self) -> Iterator[bytes]:
        assert self._spool is not None
        self._spool.seek(0)
        for size in self._sizes:
            yield self._spool.read(size)

    def discard(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None


def drain_merges(jobs: queue.Queue[MergeJob], replica: PartitionReplica, epoch: int) -> int:
    """Run queued merges (on the leader's thread); returns how many succeeded."""
    n = 0
    while True:
        try:
            job = jobs.get_nowait()
        except queue.Empty:
            return n
        try:
            replica.merge_detached(job.record, epoch)
            n += 1
        except Exception as exc:
            job.error = exc
        finally:
            job.done.set()
