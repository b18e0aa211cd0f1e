"""Joining a segments channel's messages into segments (:class:`shoal.segments.channel.SegmentAssembler`).

Pure: manifests and chunks as the wire records a leader publishes, fed as a reader meets them.
"""

from __future__ import annotations

from dataclasses import replace

from shoal.segments.channel import SegmentAssembler
from shoal.wire.records import Gtid, ManifestRecord, SegmentChunk

A, B = "aa" * 16, "bb" * 16

MANIFEST = ManifestRecord(
    table="events",
    partition_id="cd" * 16,
    segment_id=A,
    base_segment_id=None,
    included_segment_ids=(),
    is_major=False,
    placement_id=1,
    epoch=1,
    checksum="0" * 64,
    size_bytes=4,
    row_count=1,
    chunk_count=2,
    covered_wal_offsets=(),
    latest_major_offset=None,
    created_at_ms=1,
    min_gtid=Gtid(1, 0),
    max_gtid=Gtid(1, 0),
)


def _chunk(index: int, segment_id: str = A, count: int = 2) -> bytes:
    return SegmentChunk(segment_id, index, count, f"c{index}".encode()).to_bytes()


def test_a_manifest_and_its_chunks_in_order_make_a_whole_segment() -> None:
    asm = SegmentAssembler()
    assert asm.manifest(0, MANIFEST) == [] and asm.pending
    assert asm.chunk(1, _chunk(0)) is None
    done = asm.chunk(2, _chunk(1))
    assert done is not None and done.offset == 0 and done.chunks == (b"c0", b"c1") and done.error is None
    assert not asm.pending and asm.end() is None
    assert asm.chunk(3, _chunk(0)) is None  # a chunk with no manifest pending: skipped


def test_a_segment_cut_short_says_why() -> None:
    asm = SegmentAssembler()
    asm.manifest(0, MANIFEST)
    asm.chunk(1, _chunk(0))
    [short] = asm.manifest(2, replace(MANIFEST, segment_id=B, chunk_count=1))
    assert short.manifest.segment_id == A and short.chunks is None
    assert short.error == "only 1 of its chunks before the next manifest"
    left = asm.end()
    assert left is not None and left.error == "only 0 of its 1 chunks on the channel"

    asm.manifest(0, MANIFEST)
    wrong = asm.chunk(1, _chunk(1))
    assert wrong is not None and wrong.error == f"chunk {A}[1/2] at offset 1 where its chunk 0 was expected"
    asm.manifest(2, MANIFEST)
    bad = asm.chunk(3, b"\x00garbage")
    assert bad is not None and bad.error is not None and bad.error.startswith("the chunk at offset 3 does not decode")
    asm.manifest(4, MANIFEST)
    empty = asm.chunk(5, None)
    assert empty is not None and empty.error is not None and "does not decode" in empty.error


def test_only_wanted_segments_are_assembled() -> None:
    asm = SegmentAssembler(lambda m: m.segment_id == B)
    assert asm.manifest(0, MANIFEST) == [] and not asm.pending
    assert asm.chunk(1, _chunk(0)) is None
    [whole] = asm.manifest(2, replace(MANIFEST, segment_id=B, chunk_count=0))  # nothing to wait for
    assert whole.chunks == () and whole.error is None
