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

from shoal.errors import ShoalError
from shoal.kafka_channel import read_to_end
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
    out: list[ChannelManifest] = []
    for msg in read_to_end(bootstrap_servers, topic, 0, what="segments channel", group_id="shoal-segments-reader",
                           timeout_s=timeout_s, extra=extra):  # fmt: skip
        if message_kind(msg.headers()) != KIND_MANIFEST:
            continue
        offset = int(msg.offset() or 0)
        try:
            out.append(ChannelManifest(offset, WireManifest.from_bytes(msg.value())))
        except ShoalError as exc:
            log.error("segments channel %s: manifest at offset %d does not decode: %s", topic, offset, exc)
    return out
