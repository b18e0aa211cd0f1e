"""What the segments channels say: per placement channel, its manifests and the chain they form.

A leader publishes its chain from the latest major to root, oldest first (chain-driven publisher),
so on a channel the newest manifest is that placement's root and following base pointers back
from it walks the chain. :class:`ChannelBook` keeps, per channel topic, every manifest with its
offset; :meth:`ChannelBook.view` gives the chain of one channel and the offsets of its manifests
(where the chunks of each segment follow, in the same transaction).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from shoal.errors import InvalidIdError, SchemaError
from shoal.segments import SegmentChain, SegmentEntry
from shoal.segments.errors import SegmentError
from shoal.segments.receive import ManifestLike, entry_from_manifest
from shoal.topics import TopicNames
from shoal.wire.records import ManifestRecord as WireManifest


def parse_segments_topic(topics: TopicNames, topic: str) -> tuple[str, int] | None:
    """(partition_id, placement_id) of a segments channel of this prefix, or None for anything else."""
    head, sep, rest = topic.rpartition(".segments.")
    pid, _, placement = rest.partition(".")
    if not sep or head != topics.prefix or not placement.isdigit():
        return None
    try:
        return (pid, int(placement)) if topics.segments(pid, int(placement)) == topic else None
    except (InvalidIdError, SchemaError):
        return None


@dataclass(frozen=True)
class ChannelView:
    topic: str
    table: str
    partition_id: str
    placement_id: int
    chain: SegmentChain
    manifests: dict[str, tuple[int, WireManifest]]
    """segment id -> (offset of its manifest on the channel, manifest)."""


class ChannelBook:
    """Manifests seen per segments channel (thread-safe; fed by the streaming query)."""

    def __init__(self, topics: TopicNames) -> None:
        self.topics = topics
        self._lock = threading.Lock()
        self._channels: dict[str, dict[str, tuple[int, WireManifest]]] = {}
        self._root: dict[str, tuple[int, str]] = {}
        self.invalid = 0

    def add(self, topic: str, offset: int, manifest: WireManifest) -> bool:
        """Record one manifest; False (and counted) if it does not belong to the channel it is on."""
        parsed = parse_segments_topic(self.topics, topic)
        if parsed is None or parsed[0] != manifest.partition_id:
            self.invalid += 1
            return False
        with self._lock:
            self._channels.setdefault(topic, {})[manifest.segment_id] = (offset, manifest)
            if topic not in self._root or offset > self._root[topic][0]:
                self._root[topic] = (offset, manifest.segment_id)
        return True

    def topics_of(self, partition_id: str) -> list[str]:
        with self._lock:
            return [t for t in self._channels if (p := parse_segments_topic(self.topics, t)) and p[0] == partition_id]

    def partitions(self) -> dict[str, str]:
        """partition_id -> table name, for every partition with a channel in the book."""
        with self._lock:
            out = {}
            for topic, manifests in self._channels.items():
                parsed = parse_segments_topic(self.topics, topic)
                if parsed and manifests:
                    out[parsed[0]] = next(iter(manifests.values()))[1].table
            return out

    def view(self, partition_id: str, placement_id: int) -> ChannelView | None:
        topic = self.topics.segments(partition_id, placement_id)
        with self._lock:
            manifests = dict(self._channels.get(topic, {}))
            root = self._root.get(topic)
        if not manifests or root is None:
            return None
        entries: list[SegmentEntry] = []
        for _offset, m in manifests.values():
            try:
                entries.append(entry_from_manifest(_as_manifest(m, self.topics)))
            except (SegmentError, SchemaError, InvalidIdError):
                continue
        chain = SegmentChain.of(entries, root[1])
        table = manifests[root[1]][1].table
        return ChannelView(topic, table, partition_id, placement_id, chain, manifests)


def _as_manifest(m: WireManifest, topics: TopicNames) -> ManifestLike:
    from shoal.segments.channel import from_wire

    return from_wire(m, sender_placement_id=m.placement_id, topics=topics)
