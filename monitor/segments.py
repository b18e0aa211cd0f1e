"""Manifests on a placement's segments channel, read incrementally (DESIGN.md sections 3 and 5).

A segments channel carries, per segment, one :class:`~shoal.wire.records.ManifestRecord` and
then its chunks. The tracker reads each channel from where it stopped last time (from the log
start the first time, or again when the channel was truncated or recreated), keeps the manifests
(offset, id, minor/major) and skips chunks by their Avro schema fingerprint without decoding them.
From them and a replica's committed offset: which replicas acked a segment (committed > the
manifest's offset), how many segments a replica has not acked, and how many minors since the
latest major await compaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from shoal.errors import KafkaOperationError, WireFormatError
from shoal.kafka import clients
from shoal.kafka.settings import KafkaSettings
from shoal.wire.avro import HEADER_LEN, MAGIC, codec
from shoal.wire.records import ManifestRecord

log = logging.getLogger(__name__)
MAX_KEPT = 10_000


@dataclass(frozen=True)
class ManifestInfo:
    offset: int
    segment_id: str
    is_major: bool
    base_segment_id: str | None
    created_at_ms: int
    size_bytes: int
    row_count: int
    epoch: int
    covered: tuple[tuple[str, int, int], ...] = ()
    """WAL offsets the segment holds: (WAL topic, start, end exclusive) per channel."""


@dataclass
class ChannelManifests:
    topic: str
    next_offset: int = 0
    manifests: list[ManifestInfo] = field(default_factory=list)
    invalid: int = 0
    """Records that look like manifests but do not decode (reported, never fatal)."""

    @property
    def majors(self) -> int:
        return sum(1 for m in self.manifests if m.is_major)

    def minors_awaiting_compaction(self) -> int:
        """Minor segments published after the latest major (all of them if there is no major yet)."""
        n = 0
        for m in reversed(self.manifests):
            if m.is_major:
                break
            n += 1
        return n

    def covered_end(self, wal_topic: str) -> int | None:
        """The highest (exclusive) offset of ``wal_topic`` that a segment on this channel covers."""
        ends = [end for m in self.manifests for topic, _start, end in m.covered if topic == wal_topic]
        return max(ends, default=None)

    def acked(self, committed: int | None, manifest: ManifestInfo) -> bool:
        return committed is not None and committed > manifest.offset

    def unacked(self, committed: int | None) -> int:
        return sum(1 for m in self.manifests if not self.acked(committed, m))


class SegmentsTracker:
    """Keeps the manifests of every segments channel it is asked about. Lazy consumer, ``close()``."""

    def __init__(
        self, kafka: KafkaSettings | str, *, timeout_s: float = 10.0, extra: Mapping[str, Any] | None = None
    ) -> None:
        self.kafka = KafkaSettings(kafka) if isinstance(kafka, str) else kafka
        self.timeout_s = timeout_s
        self._extra = dict(extra or {})
        self._consumer: Any = None
        self.channels: dict[str, ChannelManifests] = {}
        manifest_codec = codec("segment_manifest")
        self._header = MAGIC + manifest_codec.fingerprint[::-1]  # single-object header of a manifest

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _reader(self) -> Any:
        if self._consumer is None:
            reading: dict[str, Any] = {
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 20,  # reaching the end must not wait for new data
                **self._extra,
            }
            # assign() only, never commits
            self._consumer = clients.consumer(self.kafka, group_id="shoal-monitor-segments", **reading)
        return self._consumer

    def forget(self, topic: str) -> None:
        self.channels.pop(topic, None)

    def update(self, topic: str, log_start: int, log_end: int) -> ChannelManifests:
        """Read the channel from where the last update stopped up to ``log_end``."""
        self.update_many({topic: (log_start, log_end)})
        return self.channels[topic]

    def update_many(self, bounds: Mapping[str, tuple[int, int]]) -> dict[str, ChannelManifests]:
        """:meth:`update` every channel of ``bounds`` ({topic: (log start, log end)}) together.

        The lagging channels are assigned at once and read concurrently: the consumer takes about
        a second to start fetching a partition it was not fetching, so channels read one after
        another cost that second each (8 channels: 8 s per monitor poll). One deadline
        (``timeout_s``) bounds the whole read; a channel not read to its end by then keeps its
        position and goes on from there next time.
        """
        ends: dict[str, int] = {}
        for topic, (log_start, log_end) in bounds.items():
            ch = self.channels.get(topic)
            if ch is None or ch.next_offset > log_end:
                ch = self.channels[topic] = ChannelManifests(topic, log_start)
            if ch.next_offset < log_start:
                ch.manifests = [m for m in ch.manifests if m.offset >= log_start]
                ch.next_offset = log_start
            if ch.next_offset < log_end:
                ends[topic] = log_end
        if ends:
            self._read(ends)
        return {topic: self.channels[topic] for topic in bounds}

    def _read(self, ends: dict[str, int]) -> None:
        consumer = self._reader()
        try:
            consumer.assign([TopicPartition(topic, 0, self.channels[topic].next_offset) for topic in ends])
            deadline = time.monotonic() + self.timeout_s
            while ends and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                topic = msg.topic()
                if topic not in ends:
                    continue  # a channel already read to its end (fetched past it)
                ch, log_end = self.channels[topic], ends[topic]
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        ch.next_offset = max(ch.next_offset, int(msg.offset() or log_end))
                        del ends[topic]
                        continue
                    raise KafkaOperationError(f"reading segments channel {topic}: {err}")
                self._take(ch, msg)
                if ch.next_offset >= log_end:
                    del ends[topic]
        except KafkaException as exc:
            raise KafkaOperationError(f"cannot read segments channels {sorted(ends)}: {exc}") from exc
        finally:
            try:
                consumer.unassign()
            except KafkaException:
                log.debug("unassign failed", exc_info=True)

    def _take(self, ch: ChannelManifests, msg: Any) -> None:
        """One record of ``ch``'s channel: keep it if it is a manifest, skip it if it is a chunk."""
        offset = int(msg.offset() or 0)
        ch.next_offset = offset + 1
        value = msg.value() or b""
        if value[:HEADER_LEN] != self._header:
            return  # a chunk (or anything else): not a manifest
        try:
            m = ManifestRecord.from_bytes(value)
        except WireFormatError:
            ch.invalid += 1
            log.warning("segments channel %s: undecodable manifest at offset %d", ch.topic, offset)
            return
        ch.manifests.append(
            ManifestInfo(
                offset,
                m.segment_id,
                m.is_major,
                m.base_segment_id,
                m.created_at_ms,
                m.size_bytes,
                m.row_count,
                m.epoch,
                tuple((r.topic, r.start_offset, r.end_offset) for r in m.covered_wal_offsets),
            )
        )
        if len(ch.manifests) > MAX_KEPT:
            del ch.manifests[: len(ch.manifests) - MAX_KEPT]
