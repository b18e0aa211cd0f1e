"""Reading channels (topics with one Kafka partition, DESIGN.md section 3) up to their current end.

A channel is written inside Kafka transactions by one authority, so it is read with
``isolation.level=read_committed`` and offsets are not dense (each commit leaves a control record
that consumers never see). :func:`read_to_end` yields the committed messages from a start offset up
to the end the channel had when the read began; :func:`read_wal_channel` decodes a WAL channel
(``<prefix>.wal.<partition_id>.<placement_id>``) and :func:`read_manifests` the manifests of a
segments channel (chunks skipped by their ``shoal.kind`` header, so a read costs one small
record per segment).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from shoal.errors import KafkaOperationError, ShoalError
from shoal.kafka import clients
from shoal.kafka.errors import ChannelTruncatedError, classify
from shoal.kafka.settings import KafkaSettings
from shoal.segments.channel import KIND_CHUNK, KIND_MANIFEST, AssembledSegment, SegmentAssembler, message_kind
from shoal.wire.records import ManifestRecord as WireManifest
from shoal.wire.records import WalRecord

log = logging.getLogger(__name__)

_POLL_S = 0.5
READ_CONFIG: dict[str, Any] = {"enable.partition.eof": True, "auto.offset.reset": "error"}
"""A channel reader's consumer settings: the end of the partition is an event, and a position the
Tail truncated is an error (librdkafka's default, ``largest``, would jump to the end in silence and
a read would end early, looking whole)."""
_TRUNCATED = frozenset({KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE})
WAL_FETCH_MAX_BYTES = 64 * 1024 * 1024
"""``fetch.message.max.bytes`` of a WAL channel reader: one WAL record can be a large batch."""


def read_to_end(
    settings: KafkaSettings,
    topic: str,
    start_offset: int,
    *,
    what: str,
    group_id: str,
    timeout_s: float = 30.0,
    exact_start: bool = False,
    **overrides: Any,
) -> Iterator[Message]:
    """Every committed message of ``topic`` partition 0 from ``start_offset`` (or the log start, if
    later) up to the high watermark read at the start.

    ``what`` names the channel in errors ("WAL channel", "segments channel"); ``group_id`` is only a
    label (``assign()``, never commits). KafkaOperationError when the offsets cannot be read, on a
    consumer error, or when no message arrives for ``timeout_s``; ChannelTruncatedError when the Tail
    moves past the read's position while it reads (:data:`READ_CONFIG`), and, with ``exact_start``,
    when the log starts above ``start_offset`` already (the Tail moved after the caller read it: a
    caller that judges the channel by that Tail must read it again, not take the rest as whole).
    """
    consumer = clients.consumer(settings, group_id=group_id, **{**READ_CONFIG, **overrides})
    try:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s)
        except KafkaException as exc:
            raise classify(exc, f"cannot read the offsets of {what} {topic}") from exc
        if exact_start and start_offset < low:
            raise ChannelTruncatedError(what, topic, start_offset)
        start = max(start_offset, low)
        if start >= high:
            return
        consumer.assign([TopicPartition(topic, 0, start)])
        idle, position = 0.0, start
        while True:
            msg = consumer.poll(_POLL_S)
            if msg is None:
                idle += _POLL_S
                if idle >= timeout_s:
                    raise KafkaOperationError(f"{what} {topic}: no progress reading to offset {high}")
                continue
            idle = 0.0
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return
                if err.code() in _TRUNCATED:
                    raise ChannelTruncatedError(what, topic, position, err)
                raise KafkaOperationError(f"{what} {topic}: {err}", err)
            yield msg
            position = int(msg.offset() or 0) + 1
            if position >= high:
                return
    finally:
        consumer.close()


@dataclass(frozen=True)
class ChannelRecord:
    offset: int
    record: WalRecord


def read_wal_channel(
    settings: KafkaSettings,
    topic: str,
    start_offset: int,
    *,
    timeout_s: float = 30.0,
    exact_start: bool = False,
    **overrides: Any,
) -> Iterator[ChannelRecord]:
    """Every committed record of a WAL channel from ``start_offset`` up to its current end
    (``exact_start``: see :func:`read_to_end`).

    The end is the last stable offset when the read starts: callers fence the writer first
    (``init_transactions``), so nothing is in flight. A record that does not decode raises
    :class:`~shoal.errors.WireFormatError`: a WAL channel has one writer, so that is corruption.
    """
    config = {"fetch.message.max.bytes": WAL_FETCH_MAX_BYTES, **overrides}
    for msg in read_to_end(
        settings,
        topic,
        start_offset,
        what="WAL channel",
        group_id="shoal-wal-reader",
        timeout_s=timeout_s,
        exact_start=exact_start,
        **config,
    ):
        yield ChannelRecord(int(msg.offset() or 0), WalRecord.from_bytes(msg.value()))


def read_wal_record_at(
    settings: KafkaSettings, topic: str, offset: int, *, timeout_s: float = 10.0, **overrides: Any
) -> WalRecord | None:
    """The WAL record at exactly ``offset`` (None if it is gone, e.g. truncated, or is a control record)."""
    for item in read_wal_channel(settings, topic, offset, timeout_s=timeout_s, **overrides):
        return item.record if item.offset == offset else None
    return None


@dataclass(frozen=True)
class ChannelManifest:
    offset: int
    manifest: WireManifest


def read_manifests(
    settings: KafkaSettings, topic: str, *, timeout_s: float = 30.0, start_offset: int = 0, **overrides: Any
) -> list[ChannelManifest]:
    """Every committed manifest on a segments channel (from ``start_offset``), oldest first (chunks
    skipped, not decoded).

    Used by a leader that restarts (what is already published), by followers that replay from the
    latest major and by the Spark compaction service (which partitions need compaction).
    """
    out: list[ChannelManifest] = []
    for msg in read_to_end(
        settings,
        topic,
        start_offset,
        what="segments channel",
        group_id="shoal-segments-reader",
        timeout_s=timeout_s,
        **overrides,
    ):
        if message_kind(msg.headers()) != KIND_MANIFEST:
            continue
        offset = int(msg.offset() or 0)
        try:
            out.append(ChannelManifest(offset, WireManifest.from_bytes(msg.value())))
        except ShoalError as exc:
            log.error("segments channel %s: manifest at offset %d does not decode: %s", topic, offset, exc)
    return out


def read_segment_file(
    settings: KafkaSettings, topic: str, segment_id: str, *, timeout_s: float = 30.0, **overrides: Any
) -> tuple[WireManifest, list[bytes]] | None:
    """The manifest and chunks of segment ``segment_id`` as a segments channel carries them (its
    latest whole copy: a leader publishes its chain again when it leads again), or None when the
    channel holds no whole copy. The chunks are not checked against the manifest's sha256: the
    caller writes them with :func:`~shoal.segments.parquet_io.write_segment_bytes`, which does.

    For a replica that must read one of its own files again (a leader checking a major against
    the segments it replaces, :mod:`storage_node.roles.compaction_intake`)."""
    found: tuple[WireManifest, list[bytes]] | None = None
    assembler = SegmentAssembler(lambda m: m.segment_id == segment_id)
    for msg in read_to_end(
        settings, topic, 0, what="segments channel", group_id="shoal-segment-reader", timeout_s=timeout_s, **overrides
    ):
        kind, offset = message_kind(msg.headers()), int(msg.offset() or 0)
        done: list[AssembledSegment] = []
        if kind == KIND_MANIFEST:
            try:
                manifest = WireManifest.from_bytes(msg.value())
            except ShoalError:
                continue  # not this segment's, whatever it is
            done = assembler.manifest(offset, manifest)
        elif kind == KIND_CHUNK:
            one = assembler.chunk(offset, msg.value())
            done = [] if one is None else [one]
        for segment in done:
            if segment.chunks is not None:
                found = (segment.manifest, list(segment.chunks))
    return found
