"""Arrow IPC row batches: round trips, strict framing, garbage, schema checks, size guards."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pytest

from shoal.errors import SchemaError, WireFormatError
from shoal.wire import arrow_ipc
from shoal.wire.arrow_ipc import DEFAULT_COMPRESSION, EOS_MARKER, decode_batch, encode_batch
from shoal.wire.avro import codec

COMPRESSIONS = [None, *(c for c in ("zstd", "lz4") if pa.Codec.is_available(c))]


def sample() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([1, 2, None, 4], pa.int64()),
            "name": pa.array(["a", None, "żółw 🐢", ""], pa.string()),
            "score": pa.array([1.5, None, 1e308, -0.0], pa.float64()),
            "ok": pa.array([True, False, None, True]),
            "tags": pa.array([["x"], [], None, ["y", None]], pa.list_(pa.string())),
            "blob": pa.array([b"\x00", None, b"", b"\xff" * 10], pa.binary()),
            "ts": pa.array([dt.datetime(2024, 1, 1), None, dt.datetime(1970, 1, 1), dt.datetime(2038, 1, 19)]),
            "kind": pa.array(["u", "v", "u", None]).dictionary_encode(),
        }
    )


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_round_trip_with_nulls(compression: str | None) -> None:
    table = sample()
    back = decode_batch(encode_batch(table, compression=compression), table.schema)
    assert back.equals(table)
    assert back.column("name").to_pylist() == ["a", None, "żółw 🐢", ""]


def test_record_batch_input() -> None:
    batch = sample().to_batches()[0]
    assert decode_batch(encode_batch(batch)).equals(pa.Table.from_batches([batch]))


def test_many_batches() -> None:
    table = pa.table({"k": pa.array(range(10_000), pa.int64()), "v": pa.array([str(i) for i in range(10_000)])})
    data = encode_batch(table, max_rows_per_batch=100)
    back = decode_batch(data)
    assert back.equals(table)
    assert len(back.to_batches()) == 100
    chunked = pa.concat_tables([table.slice(0, 10), table.slice(10, 5), table.slice(15, 0)])
    assert decode_batch(encode_batch(chunked)).equals(chunked)


def test_empty_table_keeps_its_schema() -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())], metadata={"a": "b"})
    empty = schema.empty_table()
    back = decode_batch(encode_batch(empty))
    assert back.num_rows == 0
    assert back.schema.equals(schema, check_metadata=True)


def test_default_compression_is_zstd_when_available() -> None:
    expected = "zstd" if pa.Codec.is_available("zstd") else "lz4"
    assert expected == DEFAULT_COMPRESSION
    table = pa.table({"v": ["same text"] * 10_000})
    assert len(encode_batch(table)) < len(encode_batch(table, compression=None)) / 2


def test_bytearray_and_memoryview_input() -> None:
    data = encode_batch(sample())
    assert decode_batch(bytearray(data)).equals(sample())
    assert decode_batch(memoryview(data)).equals(sample())


# --- malformed input -----------------------------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_every_truncation_is_refused(compression: str | None) -> None:
    """Including cuts at a message boundary, which Arrow alone would read as a shorter valid stream."""
    data = encode_batch(sample(), compression=compression, max_rows_per_batch=2)
    for end in range(len(data)):
        with pytest.raises(WireFormatError):
            decode_batch(data[:end])


def test_trailing_bytes_are_refused() -> None:
    data = encode_batch(sample())
    for extra in (b"\x00", b"junk", EOS_MARKER, data):
        with pytest.raises(WireFormatError):
            decode_batch(data + extra)


@pytest.mark.parametrize("value", [None, b"", b"\x00", EOS_MARKER, b"\xff" * 8 + EOS_MARKER, "text", 12, [1]])
def test_nothing_or_garbage_is_refused(value: object) -> None:
    with pytest.raises(WireFormatError):
        decode_batch(value)  # type: ignore[arg-type]


def test_random_garbage_is_refused() -> None:
    rnd = random.Random(7)
    for n in range(500):
        garbage = rnd.randbytes(rnd.randrange(1, 400))
        with pytest.raises(WireFormatError):
            decode_batch(garbage + (EOS_MARKER if n % 2 else b""))


def test_an_avro_record_is_refused() -> None:
    raw = {"segment_id": "ab" * 16, "index": 0, "count": 1, "data": encode_batch(sample())}
    with pytest.raises(WireFormatError):
        decode_batch(codec("segment_chunk").encode(raw))


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_flipped_bytes_give_an_error_or_a_valid_table_never_a_crash(compression: str | None) -> None:
    """The IPC format has no checksum, so some flips are just other values; none may yield an invalid table."""
    data = encode_batch(sample(), compression=compression, max_rows_per_batch=2)
    errors = 0
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0xFF
        try:
            table = decode_batch(bytes(flipped))
        except (WireFormatError, SchemaError):
            errors += 1
            continue
        table.validate(full=True)
        assert all(isinstance(name, str) for name in table.schema.names)
    assert errors > len(data) // 4


def test_random_mutations_give_an_error_or_a_valid_table() -> None:
    rnd = random.Random(99)
    data = encode_batch(sample(), compression=None, max_rows_per_batch=3)
    for _ in range(1000):
        mutated = bytearray(data)
        for _ in range(rnd.randrange(1, 6)):
            mutated[rnd.randrange(len(mutated) - len(EOS_MARKER))] = rnd.randrange(256)
        try:
            table = decode_batch(bytes(mutated))
        except (WireFormatError, SchemaError):
            continue
        table.validate(full=True)


# --- schema checks -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expected", "match"),
    [
        (pa.schema([("id", pa.int64())]), "unexpected"),
        (pa.schema([("id", pa.int64()), ("name", pa.string()), ("extra", pa.int8())]), "missing"),
        (pa.schema([("name", pa.string()), ("id", pa.int64())]), "do not match"),
        (pa.schema([("id", pa.int32()), ("name", pa.string())]), "type int64, expected int32"),
        (pa.schema([("id", pa.int64()), ("name", pa.large_string())]), "'name'"),
        (pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())]), "not nullable but has 1"),
    ],
)
def test_schema_mismatch(expected: pa.Schema, match: str) -> None:
    data = encode_batch(pa.table({"id": pa.array([1, None], pa.int64()), "name": ["a", "b"]}))
    with pytest.raises(SchemaError, match=match):
        decode_batch(data, expected)


def test_declared_nullability_may_differ_when_there_are_no_nulls() -> None:
    expected = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())], metadata={"t": "x"})
    back = decode_batch(encode_batch(pa.table({"id": [1, 2], "name": ["a", None]})), expected)
    assert back.schema.equals(expected, check_metadata=True)
    assert back.column("id").to_pylist() == [1, 2]


def test_empty_table_checked_against_schema() -> None:
    schema = pa.schema([("k", pa.int64())])
    assert decode_batch(encode_batch(schema.empty_table()), schema).num_rows == 0
    with pytest.raises(SchemaError):
        decode_batch(encode_batch(schema.empty_table()), pa.schema([("k", pa.string())]))


# --- guards and bad arguments --------------------------------------------------------------------


def test_size_guards() -> None:
    table = pa.table({"v": pa.array([b"x" * 1000] * 100)})
    data = encode_batch(table, compression=None)
    with pytest.raises(WireFormatError, match="exceeds"):
        decode_batch(data, max_bytes=len(data) - 1)
    with pytest.raises(WireFormatError, match="split"):
        encode_batch(table, compression=None, max_bytes=len(data) - 1)
    compressed = encode_batch(table, compression=COMPRESSIONS[-1])
    with pytest.raises(WireFormatError, match="decoded rows exceed"):
        decode_batch(compressed, max_decoded_bytes=50_000)
    assert decode_batch(data, max_bytes=len(data)).equals(table)


def test_bad_arguments() -> None:
    with pytest.raises(SchemaError, match="Table or RecordBatch"):
        encode_batch({"a": [1]})
    with pytest.raises(SchemaError, match="compression"):
        encode_batch(sample(), compression="gzip")
    with pytest.raises(SchemaError, match="max_rows_per_batch"):
        encode_batch(sample(), max_rows_per_batch=0)


def test_module_constants() -> None:
    assert arrow_ipc.MAX_BATCH_BYTES == 64 * 1024 * 1024
    assert EOS_MARKER == b"\xff\xff\xff\xff\x00\x00\x00\x00"
