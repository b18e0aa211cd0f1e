"""Avro control records: segment manifest, segment chunk, WAL record envelope."""

from __future__ import annotations

import contextlib
import random

import pytest

from shoal.errors import InvalidIdError, SchemaError, WireFormatError
from shoal.wire.arrow_ipc import encode_batch
from shoal.wire.avro import HEADER_LEN, codec
from shoal.wire.records import (
    GENESIS_HASH,
    Gtid,
    IngestOffset,
    ManifestRecord,
    SegmentChunk,
    WalOffsetRange,
    WalRecord,
)

PID = "0123456789abcdef0123456789abcdef"
SEG = "fedcba9876543210fedcba9876543210"
BASE = "00112233445566778899aabbccddeeff"
SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
KINDS = ("segment_manifest", "segment_chunk", "wal_record")


def manifest(**overrides: object) -> ManifestRecord:
    fields: dict[str, object] = {
        "table": "orders",
        "partition_id": PID,
        "segment_id": SEG,
        "base_segment_id": BASE,
        "included_segment_ids": (BASE, "ab" * 16),
        "is_major": True,
        "placement_id": 7,
        "epoch": 3,
        "checksum": SHA,
        "size_bytes": 123_456_789_012,
        "row_count": 2**40,
        "chunk_count": 12,
        "covered_wal_offsets": (
            WalOffsetRange("shoal.wal." + PID + ".7", 0, 100),
            WalOffsetRange("shoal.wal." + PID + ".2", 5, 5),
        ),
        "latest_major_offset": 42,
        "created_at_ms": 1_700_000_000_123,
        "min_gtid": Gtid(3, 0),
        "max_gtid": Gtid(3, 2**62),
    }
    fields.update(overrides)
    return ManifestRecord(**fields)  # type: ignore[arg-type]


def first_manifest() -> ManifestRecord:
    """The first segment of a partition: null base, empty arrays, null optionals."""
    return manifest(
        base_segment_id=None,
        included_segment_ids=(),
        is_major=False,
        covered_wal_offsets=(),
        latest_major_offset=None,
        min_gtid=None,
        max_gtid=None,
        row_count=0,
        size_bytes=0,
        chunk_count=0,
    )


def chunk() -> SegmentChunk:
    return SegmentChunk(SEG, 1, 3, bytes(range(256)) * 4)


def wal_record() -> WalRecord:
    import pyarrow as pa

    payload = encode_batch(pa.table({"k": [1, 2, 3], "v": ["a", None, "ü"]}))
    return WalRecord.create(
        partition_id=PID,
        placement_id=7,
        gtid=Gtid(3, 10),
        row_count=3,
        payload=payload,
        ingest_offsets=[IngestOffset("shoal.ingest." + PID, 0, 99)],
        created_at_ms=1_700_000_000_000,
    )


def encoded(kind: str) -> bytes:
    if kind == "segment_manifest":
        return manifest().to_bytes()
    if kind == "segment_chunk":
        return chunk().to_bytes()
    return wal_record().to_bytes()


def decode(kind: str, data: bytes | None) -> object:
    if kind == "segment_manifest":
        return ManifestRecord.from_bytes(data)
    if kind == "segment_chunk":
        return SegmentChunk.from_bytes(data)
    return WalRecord.from_bytes(data)


# --- round trips ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [manifest(), first_manifest()], ids=["full", "first"])
def test_manifest_round_trip(value: ManifestRecord) -> None:
    assert ManifestRecord.from_bytes(value.to_bytes()) == value


def test_first_manifest_has_nulls_and_empty_arrays_on_the_wire() -> None:
    raw = codec("segment_manifest").decode(first_manifest().to_bytes())
    assert raw["base_segment_id"] is None
    assert raw["included_segment_ids"] == []
    assert raw["covered_wal_offsets"] == []
    assert raw["latest_major_offset"] is None
    assert raw["min_gtid"] is None and raw["max_gtid"] is None


def test_chunk_round_trip_including_empty_data() -> None:
    assert SegmentChunk.from_bytes(chunk().to_bytes()) == chunk()
    empty = SegmentChunk(SEG, 0, 1, b"")
    assert SegmentChunk.from_bytes(empty.to_bytes()) == empty


def test_wal_record_round_trip() -> None:
    rec = wal_record()
    back = WalRecord.from_bytes(rec.to_bytes())
    assert back == rec
    assert back.rows().column("v").to_pylist() == ["a", None, "ü"]
    no_offsets = WalRecord.create(partition_id=PID, placement_id=1, gtid=Gtid(0, 0), row_count=0, payload=b"")
    assert no_offsets.created_at_ms > 0
    assert WalRecord.from_bytes(no_offsets.to_bytes()) == no_offsets


def test_codec_round_trips_unicode_strings() -> None:
    """The Avro layer carries any unicode; the typed layer then refuses a table name that is not an identifier."""
    raw = manifest().to_avro()
    raw["table"] = "tàble_日本_🐟"
    data = codec("segment_manifest").encode(raw)
    assert codec("segment_manifest").decode(data)["table"] == "tàble_日本_🐟"
    with pytest.raises(WireFormatError, match="table name"):
        ManifestRecord.from_bytes(data)


def test_accepts_bytearray_and_memoryview() -> None:
    data = manifest().to_bytes()
    assert ManifestRecord.from_bytes(bytearray(data)) == manifest()
    assert ManifestRecord.from_bytes(memoryview(data)) == manifest()


# --- fixed vectors: a schema change is a wire-format change and must be deliberate ---------------


def test_schema_fingerprints_are_pinned() -> None:
    assert codec("segment_manifest").fingerprint.hex() == "3a3ecd8ea8549c40"
    assert codec("segment_chunk").fingerprint.hex() == "cbeb2dfb9498b0c7"
    assert codec("wal_record").fingerprint.hex() == "91ed590a2eb18feb"


def test_chunk_fixed_vector() -> None:
    data = SegmentChunk(SEG, 1, 2, b"\x00\xff").to_bytes()
    expected = (
        "c301" + "c7b09894fb2debcb"  # magic + fingerprint, little-endian
        "40"
        + SEG.encode().hex()  # string: zigzag length 32, then utf-8
        + "02"
        + "04"  # index 1, count 2 (zigzag varints)
        + "04"
        + "00ff"  # bytes: length 2, then the data
    )
    assert data.hex() == expected
    assert SegmentChunk.from_bytes(bytes.fromhex(expected)) == SegmentChunk(SEG, 1, 2, b"\x00\xff")


# --- malformed input -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_every_truncation_is_refused(kind: str) -> None:
    data = encoded(kind)
    for end in range(len(data)):
        with pytest.raises(WireFormatError):
            decode(kind, data[:end])


@pytest.mark.parametrize("kind", KINDS)
def test_trailing_bytes_are_refused(kind: str) -> None:
    data = encoded(kind)
    for extra in (b"\x00", b"\x02", b"garbage", data):
        with pytest.raises(WireFormatError, match="trailing"):
            decode(kind, data + extra)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", [None, b"", b"\xc3", b"\xc3\x01", b"hello world", b"\xc3\x01" + bytes(8)])
def test_nothing_or_garbage_is_refused(kind: str, value: bytes | None) -> None:
    with pytest.raises(WireFormatError):
        decode(kind, value)


@pytest.mark.parametrize("kind", KINDS)
def test_random_garbage_is_refused(kind: str) -> None:
    rnd = random.Random(20240601)
    header = encoded(kind)[:HEADER_LEN]
    for _ in range(300):
        body = rnd.randbytes(rnd.randrange(0, 200))
        with pytest.raises(WireFormatError):
            decode(kind, body)
        # a right header with a garbage body gets past the fingerprint check and must still fail cleanly
        with contextlib.suppress(WireFormatError):
            decode(kind, header + body)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("other", KINDS)
def test_a_record_of_another_schema_is_refused(kind: str, other: str) -> None:
    if kind == other:
        return
    with pytest.raises(WireFormatError, match="fingerprint"):
        decode(kind, encoded(other))


@pytest.mark.parametrize("kind", KINDS)
def test_flipped_bytes_never_pass_silently_in_the_header_and_never_crash_in_the_body(kind: str) -> None:
    data = encoded(kind)
    original = decode(kind, data)
    unchanged = []
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0xFF
        if i < HEADER_LEN:
            with pytest.raises(WireFormatError):
                decode(kind, bytes(flipped))
            continue
        try:
            value = decode(kind, bytes(flipped))
        except WireFormatError:
            continue
        # Avro has no checksum: a flip inside a value gives a different value ...
        if value == original:
            unchanged.append(i)
    # ... except for a boolean: fastavro reads any non-zero byte as true (the spec allows only 0 and 1)
    assert unchanged == ([boolean_offset()] if kind == "segment_manifest" else [])


def boolean_offset() -> int:
    """Offset of the manifest's is_major byte (the only byte that differs between true and false)."""
    a, b = manifest(is_major=True).to_bytes(), manifest(is_major=False).to_bytes()
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    assert len(a) == len(b) and len(diff) == 1
    return diff[0]


def test_flipped_payload_or_gtid_bytes_are_caught_by_the_hash_chain() -> None:
    from shoal.wire.records import HashChainError, verify_chain

    rec = wal_record()
    data = rec.to_bytes()
    start = data.index(rec.payload)
    for i in range(start, start + len(rec.payload)):
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        with pytest.raises(HashChainError):
            verify_chain([WalRecord.from_bytes(bytes(flipped))])


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("segment_id", "../../etc/passwd", "segment_id"),
        ("partition_id", "ABCDEF0123456789ABCDEF0123456789", "partition_id"),
        ("base_segment_id", SEG, "own base"),
        ("included_segment_ids", ["nothex"], "included_segment_ids"),
        ("placement_id", 0, "placement_id"),
        ("epoch", -1, "epoch"),
        ("checksum", "abc", "checksum"),
        ("size_bytes", -5, "size_bytes"),
        ("chunk_count", -1, "chunk_count"),
        ("latest_major_offset", -1, "latest_major_offset"),
        ("covered_wal_offsets", [{"topic": "t", "start_offset": 9, "end_offset": 3}], "end_offset"),
        ("covered_wal_offsets", [{"topic": "a/b", "start_offset": 0, "end_offset": 3}], "topic"),
        ("min_gtid", {"epoch": 9, "seq": 0}, "greater than max_gtid"),
        ("max_gtid", None, "both"),
    ],
)
def test_well_formed_avro_with_invalid_values_is_refused(field: str, value: object, match: str) -> None:
    raw = manifest().to_avro()
    raw[field] = value
    with pytest.raises(WireFormatError, match=match):
        ManifestRecord.from_bytes(codec("segment_manifest").encode(raw))


@pytest.mark.parametrize(
    ("raw_update", "match"),
    [
        ({"index": 3, "count": 3}, "index"),
        ({"index": -1}, "index"),
        ({"count": 0, "index": 0}, "count"),
        ({"segment_id": "x" * 32}, "segment_id"),
    ],
)
def test_invalid_chunk_from_the_wire_is_refused(raw_update: dict[str, object], match: str) -> None:
    raw = chunk().to_avro()
    raw.update(raw_update)
    with pytest.raises(WireFormatError, match=match):
        SegmentChunk.from_bytes(codec("segment_chunk").encode(raw))


@pytest.mark.parametrize(
    ("raw_update", "match"),
    [
        ({"partition_id": "short"}, "partition_id"),
        ({"placement_id": -3}, "placement_id"),
        ({"row_count": -1}, "row_count"),
        ({"gtid": {"epoch": -1, "seq": 0}}, "epoch"),
        ({"ingest_offsets": [{"topic": "", "partition": 0, "offset": 0}]}, "topic"),
        ({"ingest_offsets": [{"topic": "t", "partition": -1, "offset": 0}]}, "partition"),
    ],
)
def test_invalid_wal_record_from_the_wire_is_refused(raw_update: dict[str, object], match: str) -> None:
    raw = wal_record().to_avro()
    raw.update(raw_update)
    with pytest.raises(WireFormatError, match=match):
        WalRecord.from_bytes(codec("wal_record").encode(raw))


def test_hashes_must_be_32_bytes_on_the_wire() -> None:
    raw = wal_record().to_avro()
    raw["hash"] = b"\x00" * 31
    with pytest.raises(WireFormatError):
        codec("wal_record").encode(raw)


# --- building invalid records --------------------------------------------------------------------


def test_building_invalid_records_raises_typed_errors() -> None:
    with pytest.raises(InvalidIdError):
        manifest(segment_id="nope")
    with pytest.raises(InvalidIdError):
        manifest(table="1bad")
    with pytest.raises(SchemaError):
        manifest(checksum=SHA.upper())
    with pytest.raises(SchemaError):
        manifest(is_major=1)
    with pytest.raises(SchemaError):
        manifest(row_count=True)
    with pytest.raises(SchemaError):
        manifest(size_bytes=2**63)
    with pytest.raises(SchemaError):
        SegmentChunk(SEG, 0, 1, "text")  # type: ignore[arg-type]
    with pytest.raises(SchemaError):
        Gtid(0, -1)
    with pytest.raises(SchemaError):
        WalRecord.create(partition_id=PID, placement_id=1, gtid=Gtid(0, 0), row_count=0, payload=b"", prev_hash=b"x")
    with pytest.raises(SchemaError):
        WalRecord.create(partition_id=PID, placement_id=1, gtid=Gtid(0, 0), row_count=2**31, payload=b"")


def test_gtids_order_by_epoch_then_seq() -> None:
    assert Gtid(1, 100) < Gtid(2, 0) < Gtid(2, 1)
    assert str(Gtid(4, 5)) == "4:5"
    assert wal_record().last_gtid == Gtid(3, 12)
    assert bytes(32) == GENESIS_HASH


def test_rows_checks_row_count() -> None:
    import dataclasses

    rec = dataclasses.replace(wal_record(), row_count=4)
    with pytest.raises(WireFormatError, match="row_count"):
        rec.rows()
