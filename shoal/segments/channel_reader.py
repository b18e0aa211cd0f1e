"""Reading a segments channel's manifests without decoding chunks (DESIGN.md sections 3 and 6).

Used by a leader that restarts (what is already published), by followers that must replay from the
latest major, and by the Spark compaction service (which partitions need compaction). Chunks are
skipped by their ``shoal.kind`` header (:mod:`shoal.segments.channel`), so reading a channel costs
one small record per segment.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from shoal.errors import KafkaOperationError, ShoalError
from shoal.segments.channel import KIND_MANIFEST, message_kind
from shoal.wire.records import SegmentManifest as WireManifest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChannelManifest:
    offset: int
    manifest: WireManifest


def read_manifests(
    bootstrap_servers: str, topic: str, *, extra: Mapping[str, Any] | None = None, timeout_s: float = 30.0
) -> list[ChannelManifest]:
    """Every committed manifest on a segments channel, oldest first (chunks skipped, not decoded)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": "shoal-segments-reader",  # assign() only, never commits
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            **dict(extra or {}),
        }
    )
    out: list[ChannelManifest] = []
    try:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s)
        except KafkaException as exc:
            raise KafkaOperationError(f"cannot read the offsets of segments channel {topic}: {exc}") from exc
        if low >= high:
            return out
        consumer.assign([TopicPartition(topic, 0, low)])
        idle = 0.0
        while True:
            msg = consumer.poll(0.5)
            if msg is None:
                idle += 0.5
                if idle >= timeout_s:
                    raise KafkaOperationError(f"segments channel {topic}: no progress reading to offset {high}")
                continue
            idle = 0.0
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return out
                raise KafkaOperationError(f"segments channel {topic}: {err}")
            offset = int(msg.offset() or 0)
            if message_kind(msg.headers()) == KIND_MANIFEST:
                try:
                    out.append(ChannelManifest(offset, WireManifest.from_bytes(msg.value())))
                except ShoalError as exc:
                    log.error("segments channel %s: manifest at offset %d does not decode: %s", topic, offset, exc)
            if offset + 1 >= high:
                return out
    finally:
        consumer.close()
