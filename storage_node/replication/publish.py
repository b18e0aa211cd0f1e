"""The leader's segment publisher (DESIGN.md section 4.3 and 6; EventQL seed 000 section 3.5).

Chain-driven: every entry of the chain from the latest major to root (oldest first, source 3.4's
order) that is not yet on this placement's segments channel is published as a manifest (with the
segment's GTID range, read from its two GTID columns) followed by
its file in chunks, all in ONE Kafka transaction on the core's
:class:`~shoal.kafka.transaction.TransactionalChannel` (``transactional.id`` = the channel topic, so
a new incarnation of the placement fences an old one, and readers with ``read_committed`` never see
half a segment; every blocking call is bounded, and a channel abandoned in a wedged call is opened
again, which fences the stuck producer). Because it follows the chain rather than the flush calls,
a major committed later by the compaction intake, or a segment adopted at failover, is published
too.

The publisher runs on its own :class:`~shoal.worker.Worker` thread ``publish-<pid[:8]>`` and never
blocks ingest: the leader only calls :meth:`wake`.
At start it reads the manifests already on the channel (chunks are skipped by their header), so a
restarted leader does not publish a segment twice. It also remembers the offset of every manifest
it saw or wrote; every manifest carries the offset of the chain's latest major
(``latest_major_offset``) for followers that must replay (OUT_OF_ORDER) and for a bootstrap, and
truncation of the channel (``tail``) keeps everything from it on. Only the chain's own latest major
counts: the channel may still hold a major of an earlier term of this placement that the chain no
longer references (dropped as never published by the leader of the term between).

Every ``truncate_every_s`` the publisher moves the Tail of both channels and then deletes the
segments folded into the latest major once every other replica acked that major (source 3.5
``replicate_partition``: DELETE; :mod:`storage_node.replication.collect`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Message
from confluent_kafka.admin import AdminClient

from shoal.errors import KafkaOperationError, ShoalError
from shoal.kafka import clients
from shoal.kafka.admin import TRUNCATED_BY_TAIL, create_topic
from shoal.kafka.errors import ends_producer
from shoal.kafka.indexes import close_offset_readers
from shoal.kafka.readers import read_manifests
from shoal.kafka.settings import KafkaSettings
from shoal.kafka.transaction import Transaction, TransactionalChannel, fence
from shoal.segments import SegmentRecord
from shoal.segments.channel import (
    DEFAULT_CHUNK_BYTES,
    KIND_CHUNK,
    KIND_HEADER,
    KIND_MANIFEST,
    to_wire,
)
from shoal.segments.gtids import segment_gtid_range
from shoal.segments.parquet_io import segment_path
from shoal.topics import TopicNames
from shoal.wire.records import SegmentChunk
from shoal.worker import Worker
from storage_node.errors import FencedError, LocalSegmentMismatchError
from storage_node.replica import PartitionReplica
from storage_node.replication.collect import collect_on_leader
from storage_node.replication.tail import InSyncKeeper, TailDecision, chain_segments, published_end, truncate

log = logging.getLogger(__name__)

SEGMENTS_TOPIC_CONFIG = {**TRUNCATED_BY_TAIL, "max.message.bytes": str(2 * 1024 * 1024)}


@dataclass
class PublishStats:
    published: int = 0
    bytes: int = 0
    failures: int = 0
    deleted: int = 0
    """Weakly referenced segments deleted once every replica acked the major folding them."""
    tail_passes: int = 0
    tail_failures: int = 0
    tail_clients: int = 0
    """Admin clients made for the Tail passes: one, and one more after each failed pass."""


class SegmentPublisher(Worker):
    """Publishes a leader replica's chain on its segments channel, on its own thread."""

    def __init__(
        self,
        replica: PartitionReplica,
        kafka: KafkaSettings,
        *,
        topics: TopicNames,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        poll_s: float = 1.0,
        peers: Callable[[], Sequence[int]] | None = None,
        truncate_every_s: float = 5.0,
        still_leading: Callable[[], object] | None = None,
        call_timeout_s: float = 60.0,
        sync: InSyncKeeper | None = None,
    ) -> None:
        """``call_timeout_s``: the bound of every transactional call (a wedged one abandons the channel,
        which the next pass opens again, fencing the stuck producer)."""
        super().__init__(f"publish-{replica.partition_id[:8]}")
        self.replica = replica
        self.kafka = kafka
        self.topics = topics
        self.topic = topics.segments(replica.partition_id, replica.placement_id)
        self.chunk_bytes = chunk_bytes
        self.poll_s = poll_s
        self.peers = peers
        self.still_leading = still_leading
        """Raises when this placement no longer leads (the election's check): then nothing is truncated."""
        self.truncate_every_s = truncate_every_s
        self.sync = sync
        """The in-sync set (replication.tail): out-of-sync peers do not hold the Tail; None = all peers do."""
        self._next_truncate = time.monotonic() + truncate_every_s
        self._tail_admin: AdminClient | None = None
        """The Tail passes' admin client and its offset readers, kept from one pass to the next (a
        client and a consumer per group made anew every pass were about 25 new connections a second
        for an 8-partition table at RF 3, idle or not); dropped after a failed pass and at exit."""
        self.last_tail: TailDecision | None = None
        self.stats = PublishStats()
        self.manifest_offsets: dict[str, int] = {}
        """segment id -> offset of its manifest on the channel."""
        self.ready = threading.Event()
        self._wake = threading.Event()
        self._channel = TransactionalChannel(
            kafka,
            self.topic,
            call_timeout_s=call_timeout_s,
            **{"linger.ms": 5, "message.max.bytes": 2 * 1024 * 1024, "transaction.timeout.ms": 60_000},
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SegmentPublisher:
        super().start()
        return self

    def wake(self) -> None:
        self._wake.set()

    def request_stop(self) -> None:
        super().request_stop()
        self._wake.set()

    def published(self) -> set[str]:
        return set(self.manifest_offsets)

    def run(self) -> None:
        try:
            self._open()
            self.ready.set()
            while not self.stopping.is_set():
                try:
                    self.publish_pending()
                except FencedError as exc:
                    log.warning("%s: segments channel fenced: %s", self.replica.name, exc)
                    self.error = exc
                    return
                except (KafkaOperationError, KafkaException, ShoalError, OSError) as exc:
                    self.stats.failures += 1
                    log.warning("%s: publishing failed, retrying: %s", self.replica.name, exc)
                    self.stopping.wait(1.0)
                    continue
                self._maybe_truncate()
                self._wake.wait(self.poll_s)
                self._wake.clear()
        except BaseException:
            log.exception("%s: segment publisher failed", self.replica.name)
            raise  # the Worker records it as ``error`` (state FAILED)

    def on_exit(self) -> None:
        self.ready.set()
        self._drop_tail_admin()
        self._close()

    def _drop_tail_admin(self) -> None:
        admin, self._tail_admin = self._tail_admin, None
        if admin is not None:
            close_offset_readers(admin)

    def _close(self, flush_s: float = 5.0) -> None:
        if self._channel.usable:
            self._channel.flush(flush_s)
        self._channel.close()

    def _open(self) -> None:
        # the publisher owns its channel: an existing one with time retention is set right
        create_topic(
            clients.admin(self.kafka), self.topic, policy=self.kafka.topics, config=SEGMENTS_TOPIC_CONFIG, repair=True
        )
        self._claim()

    def _claim(self) -> None:
        """Open the channel (fencing older producers of it) and read the manifests already on it."""
        try:
            self._channel.open()
        except KafkaOperationError as exc:
            raise KafkaOperationError(f"cannot claim segments channel {self.topic}: {exc}", exc.kafka_error) from exc
        for item in read_manifests(self.kafka, self.topic):
            self.manifest_offsets[item.manifest.segment_id] = item.offset
        log.info(
            "%s: segments channel %s holds %d manifests", self.replica.name, self.topic, len(self.manifest_offsets)
        )

    # -- publishing --------------------------------------------------------------------------

    def publish_pending(self) -> int:
        """Publish every chain entry from the latest major to root not yet on the channel; returns how many."""
        if self._channel.abandoned:  # a call wedged: a new producer fences the stuck one
            log.warning("%s: segments channel abandoned (%s); opening it again", self.replica.name, self._channel.error)
            self._claim()
        n = 0
        for entry in self.replica.chain.since_latest_major():
            if self.stopping.is_set():
                break
            if entry.segment_id in self.manifest_offsets:
                continue
            record = self.replica.record(entry.segment_id)
            if record is None:
                continue  # removed meanwhile (compaction); the next pass sees the new chain
            self._publish(record)
            n += 1
        return n

    def _chain_major_offset(self) -> int | None:
        """The manifest offset of the current chain's latest major (None: not on the channel yet).

        Not ``latest_major_offset``: the channel may still hold a major of an earlier term of this
        placement that its chain no longer references (dropped as never published by the leader
        of the term between, :meth:`PartitionFollower._drop_unpublished_major`)."""
        major = self.replica.chain.latest_major()
        if major is None:
            return None
        return self.manifest_offsets.get(major.segment_id)

    def _publish(self, record: SegmentRecord) -> None:
        manifest = to_wire(
            record,
            table=self.replica.table.name,
            partition_id=self.replica.partition_id,
            topics=self.topics,
            latest_major_offset=self._chain_major_offset(),
            chunk_bytes=self.chunk_bytes,
        )
        sid = record.segment_id
        gtids = segment_gtid_range(self.replica.directory, sid)  # for shoal verify's GTID order checks
        if gtids is not None:
            manifest = dataclasses.replace(manifest, min_gtid=gtids[0], max_gtid=gtids[1])
        offsets: dict[int, int] = {}
        try:
            with self._channel.transaction() as txn:
                self._produce(txn, manifest.to_bytes(), KIND_MANIFEST, offsets, 0)
                digest = hashlib.sha256()
                size = 0
                with open(segment_path(self.replica.directory, sid), "rb") as f:
                    for index in range(manifest.chunk_count):
                        data = f.read(self.chunk_bytes)
                        digest.update(data)
                        size += len(data)
                        chunk = SegmentChunk(sid, index, manifest.chunk_count, data)
                        self._produce(txn, chunk.to_bytes(), KIND_CHUNK, offsets, index + 1)
                    if f.read(1):
                        raise KafkaOperationError(f"segment {sid}: file is larger than its {record.size_bytes} bytes")
                if digest.hexdigest() != record.sha256 or size != record.size_bytes:
                    raise LocalSegmentMismatchError(sid, "local file does not match its checksum; not published")
                if txn.flush(60):
                    raise KafkaOperationError(f"segment {sid}: chunks not delivered")
                if any(o < 0 for o in offsets.values()):
                    raise KafkaOperationError(f"segment {sid}: delivery failed")
        except KafkaOperationError as exc:
            if ends_producer(exc):
                raise FencedError(self.topic, str(exc)) from exc
            raise
        offset = offsets[0]
        self.manifest_offsets[sid] = offset
        self.stats.published += 1
        self.stats.bytes += record.size_bytes
        log.info(
            "%s: published segment %s at offset %d (%d bytes, %d chunks)",
            self.replica.name,
            sid,
            offset,
            record.size_bytes,
            manifest.chunk_count,
        )

    def _maybe_truncate(self) -> None:
        """Move the Tail of this leader's WAL and segments channels (storage_node.replication.tail),
        then delete the weakly referenced segments every replica has acked (replication.collect)."""
        if self.peers is None or time.monotonic() < self._next_truncate:
            return
        self._next_truncate = time.monotonic() + self.truncate_every_s
        try:
            if self.still_leading is not None:
                self.still_leading()
        except Exception as exc:
            log.info("%s: not truncating: %s", self.replica.name, exc)
            return
        if self._tail_admin is None:
            self._tail_admin = clients.admin(self.kafka)
            self.stats.tail_clients += 1
        self.stats.tail_passes += 1
        segments = chain_segments(self.replica, self.manifest_offsets)
        try:
            self.last_tail = truncate(
                self.kafka,
                self.topics,
                self.replica.partition_id,
                self.replica.placement_id,
                list(self.peers()),
                # what the segments CHANNEL covers, not the local chain: a segment flushed but not
                # published yet is on this disk only, and its WAL records are its only other copy
                own_covered_end=published_end(segments, (self.replica.partition_id, self.replica.placement_id)),
                # only the current chain's latest major: a major of an earlier term still on the
                # channel (dropped from the chain since) must not move the Tail past this chain
                major_offsets=[o for o in (self._chain_major_offset(),) if o is not None],
                segments=segments,
                sync=self.sync,
                admin=self._tail_admin,
            )
        except ShoalError as exc:
            log.warning("%s: truncation failed: %s", self.replica.name, exc)
            self.stats.tail_failures += 1
            self._drop_tail_admin()  # the next pass starts from fresh clients, as every pass once did
            return
        try:
            deleted = collect_on_leader(
                self.replica, manifest_offsets=dict(self.manifest_offsets), acks=self.last_tail.segments_acks
            )
        except ShoalError as exc:
            log.warning("%s: segment garbage collection failed: %s", self.replica.name, exc)
            return
        self.stats.deleted += len(deleted)

    def _produce(self, txn: Transaction, value: bytes, kind: bytes, offsets: dict[int, int], index: int) -> None:
        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            offsets[index] = -1 if err is not None else int(msg.offset() or 0)

        while True:
            try:
                txn.produce(self.topic, value, partition=0, headers=[(KIND_HEADER, kind)], on_delivery=on_delivery)
                return
            except BufferError:  # the producer's queue is full: serve deliveries, then try again
                self._channel.producer.poll(0.1)
                time.sleep(0.01)


def fence_segments_channels(
    kafka: KafkaSettings, topics: TopicNames, partition_id: str, placement_id: int, peers: Sequence[int]
) -> list[str]:
    """A new leader fences the other placements' segments channels (DESIGN.md section 7): opening each
    channel's ``transactional.id`` bumps its producer epoch, so an old leader's publisher that still
    runs (paused, partitioned) commits nothing more there. A placement that later pushes segments
    opens its channel again (a newer epoch). Channels that do not exist are skipped; returns the
    fenced topics."""
    existing = set(clients.admin(kafka).list_topics(timeout=30).topics)
    fenced = []
    for peer in peers:
        topic = topics.segments(partition_id, peer)
        if peer == placement_id or topic not in existing:
            continue
        fence(kafka, topic, what="segments channel")
        fenced.append(topic)
    return fenced


def push_segments(
    replica: PartitionReplica,
    records: Sequence[SegmentRecord],
    *,
    kafka: KafkaSettings,
    topics: TopicNames,
) -> int:
    """Source 3.5 follower procedure, PUSH: publish segments the leader lacks on this replica's own
    segments channel, for the leader to merge (``merge_in``). Returns how many were published."""
    publisher = SegmentPublisher(replica, kafka, topics=topics)
    publisher._open()
    try:
        n = 0
        for record in records:
            if record.segment_id not in publisher.manifest_offsets:
                publisher._publish(record)
                n += 1
        return n
    finally:
        publisher._close(flush_s=10)
