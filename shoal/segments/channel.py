"""The segments channel's message framing and the manifest <-> segment entry conversions.

A placement's segments channel (``<prefix>.segments.<partition_id>.<placement_id>``, DESIGN.md
section 3) carries, per segment, one Avro :class:`~shoal.wire.records.ManifestRecord` and then
``chunk_count`` :class:`~shoal.wire.records.SegmentChunk` records, all in one Kafka transaction. A
header ``shoal.kind`` (``manifest`` / ``chunk``) tells them apart without decoding, so a reader that
only wants manifests skips chunks for free.

On the wire the manifest's ``placement_id`` is the placement that *created* the segment (the chain
entry's ``placement_id``); the sender is the owner of the channel, which the reader knows from the
topic it consumes (only that placement writes there: transactional id = topic). Covered WAL ranges
travel as topic names (``<prefix>.wal.<partition_id>.<placement_id>``) and are parsed back into
:class:`~shoal.segments.WalRange` values, refusing any other prefix or shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from shoal.errors import InvalidIdError, SchemaError, ShoalError
from shoal.segments import PlainManifest, SegmentRecord, WalRange
from shoal.segments.errors import InvalidSegmentEntryError
from shoal.topics import TopicNames
from shoal.wire.records import ManifestRecord as WireManifest
from shoal.wire.records import SegmentChunk, WalOffsetRange

KIND_HEADER = "shoal.kind"
KIND_MANIFEST = b"manifest"
KIND_CHUNK = b"chunk"
DEFAULT_CHUNK_BYTES = 512 * 1024
"""Chunk payload size: well under Kafka's default 1 MiB message limit."""


def message_kind(
    headers: Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None] | None,
) -> bytes | None:
    """The ``shoal.kind`` header of a message (None if absent)."""
    items = headers.items() if isinstance(headers, Mapping) else (headers or ())
    for name, value in items:
        if name == KIND_HEADER:
            return value.encode() if isinstance(value, str) else value
    return None


def chunk_count(size_bytes: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> int:
    """Chunks of a file of ``size_bytes`` (at least one, so an empty file still has its chunk)."""
    return max(1, -(-size_bytes // chunk_bytes))


def to_wire(
    record: SegmentRecord,
    *,
    table: str,
    partition_id: str,
    topics: TopicNames,
    latest_major_offset: int | None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> WireManifest:
    """The manifest a placement publishes for one of its segment-list records."""
    e = record.entry
    return WireManifest(
        table=table,
        partition_id=partition_id,
        segment_id=e.segment_id,
        base_segment_id=e.base_segment_id,
        included_segment_ids=tuple(e.included_segment_ids),
        is_major=e.is_major,
        placement_id=e.placement_id,
        epoch=e.epoch,
        checksum=record.sha256,
        size_bytes=record.size_bytes,
        row_count=record.row_count,
        chunk_count=chunk_count(record.size_bytes, chunk_bytes),
        covered_wal_offsets=tuple(
            WalOffsetRange(topics.wal(r.partition_id, r.placement_id), r.start_offset, r.end_offset) for r in e.covered
        ),
        latest_major_offset=latest_major_offset,
        created_at_ms=int(record.created_at * 1000),
    )


def parse_wal_topic(topics: TopicNames, topic: str) -> tuple[str, int]:
    """(partition_id, placement_id) of a WAL channel topic of this prefix; SchemaError otherwise."""
    head, sep, rest = topic.rpartition(".wal.")
    pid, _, placement = rest.partition(".")
    if not sep or head != topics.prefix or not placement.isdigit():
        raise SchemaError(f"{topic!r:.120} is not a WAL channel topic of prefix {topics.prefix!r}")
    try:
        canonical = topics.wal(pid, int(placement))
    except InvalidIdError as exc:
        raise SchemaError(f"{topic!r:.120} is not a WAL channel topic: {exc}") from exc
    if canonical != topic:
        raise SchemaError(f"{topic!r:.120} is not a canonical WAL channel topic name")
    return pid, int(placement)


def from_wire(manifest: WireManifest, *, sender_placement_id: int, topics: TopicNames) -> PlainManifest:
    """The receive procedure's view of a wire manifest (InvalidSegmentEntryError if it cannot be one)."""
    try:
        covered = tuple(
            WalRange(*parse_wal_topic(topics, r.topic), r.start_offset, r.end_offset)
            for r in manifest.covered_wal_offsets
        )
    except SchemaError as exc:
        raise InvalidSegmentEntryError(f"manifest of segment {manifest.segment_id}: {exc}") from exc
    return PlainManifest(
        partition_id=manifest.partition_id,
        sender_placement_id=sender_placement_id,
        segment_id=manifest.segment_id,
        base_segment_id=manifest.base_segment_id,
        placement_id=manifest.placement_id,
        epoch=manifest.epoch,
        size_bytes=manifest.size_bytes,
        row_count=manifest.row_count,
        sha256=manifest.checksum,
        is_major=manifest.is_major,
        included_segment_ids=tuple(manifest.included_segment_ids),
        covered=covered,
    )


def record_of(entry_manifest: PlainManifest) -> SegmentRecord:
    """The segment-list record for a received manifest (its file fields come from the manifest)."""
    from shoal.segments.receive import entry_from_manifest

    return SegmentRecord(
        entry=entry_from_manifest(entry_manifest),
        sha256=entry_manifest.sha256,
        row_count=entry_manifest.row_count,
        size_bytes=entry_manifest.size_bytes,
        created_at=time.time(),
    )


@dataclass(frozen=True)
class AssembledSegment:
    """One segment as a segments channel carries it: its manifest (at ``offset``), and its chunks'
    payloads in order when they are all there (``chunks``), or ``error`` saying why not."""

    offset: int
    manifest: WireManifest
    chunks: tuple[bytes, ...] | None = None
    error: str | None = None


class SegmentAssembler:
    """Joins a segments channel's messages into segments: a manifest, then its ``chunk_count``
    chunks, indexed 0.. in order (one transaction publishes them). Fed message by message; chunks
    outside a wanted segment are skipped. Nothing is checked against the manifest's sha256: the
    caller does, once it holds the whole file."""

    def __init__(self, wanted: Callable[[WireManifest], bool] | None = None) -> None:
        self._wanted = wanted
        self._pending: AssembledSegment | None = None
        self._chunks: list[bytes] = []

    @property
    def pending(self) -> bool:
        """A wanted manifest is waiting for more of its chunks."""
        return self._pending is not None

    def manifest(self, offset: int, manifest: WireManifest) -> list[AssembledSegment]:
        """A manifest read at ``offset``: the segment it cuts short (only some chunks before it), and
        itself when it has no chunk to wait for."""
        out = []
        if self._pending is not None:
            out.append(replace(self._pending, error=f"only {len(self._chunks)} of its chunks before the next manifest"))
        self._pending, self._chunks = None, []
        if self._wanted is not None and not self._wanted(manifest):
            return out
        segment = AssembledSegment(offset, manifest)
        if manifest.chunk_count == 0:
            out.append(replace(segment, chunks=()))
        else:
            self._pending = segment
        return out

    def chunk(self, offset: int, value: bytes | None) -> AssembledSegment | None:
        """A chunk read at ``offset``: the pending segment once this was its last chunk, or with an
        error when this chunk does not decode or is not its next one; None otherwise."""
        pending = self._pending
        if pending is None:
            return None
        m = pending.manifest
        try:
            chunk = SegmentChunk.from_bytes(value or b"")  # no value: does not decode either
        except ShoalError as exc:
            self._pending = None
            return replace(pending, error=f"the chunk at offset {offset} does not decode: {exc}")
        if (chunk.segment_id, chunk.index, chunk.count) != (m.segment_id, len(self._chunks), m.chunk_count):
            self._pending = None
            why = f"chunk {chunk.segment_id}[{chunk.index}/{chunk.count}] at offset {offset}"
            return replace(pending, error=f"{why} where its chunk {len(self._chunks)} was expected")
        self._chunks.append(chunk.data)
        if len(self._chunks) < m.chunk_count:
            return None
        self._pending = None
        return replace(pending, chunks=tuple(self._chunks))

    def end(self) -> AssembledSegment | None:
        """The channel read to its end: the pending segment, with the chunks it lacks as its error."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        return replace(
            pending, error=f"only {len(self._chunks)} of its {pending.manifest.chunk_count} chunks on the channel"
        )
