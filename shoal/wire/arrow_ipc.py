"""Row batches on the wire: the Arrow IPC *stream* format.

Every Kafka message that carries rows (an ingest record, a WAL record's ``payload``) holds one
Arrow IPC stream: the schema message, one or more record batches, and the end-of-stream marker.

Choices, written down:

- **Compression.** Bodies are compressed with ``zstd`` when this pyarrow build has it, else ``lz4``
  (Arrow's LZ4 frame codec), else not at all (:data:`DEFAULT_COMPRESSION`). The codec is recorded
  in the stream, so a reader needs no option to decode it.
- **Strict framing.** :func:`decode_batch` accepts only a complete stream: it must end with the
  8-byte end-of-stream marker right after the last message, with nothing after it. A stream cut
  at a message boundary (which Arrow itself would read as a shorter, valid stream) and trailing
  bytes are both refused. Only the current IPC format (``0xFFFFFFFF`` continuation) is accepted.
- **Validation.** Every decoded batch is fully validated (offsets, UTF-8, dictionary indices), so
  malformed input gives :class:`~shoal.errors.WireFormatError`, never a table of garbage.
  The IPC format has no checksum: a flipped bit inside an uncompressed value buffer is still a
  valid value. Integrity comes from the layer around the payload (the WAL hash chain, the segment
  checksum, Kafka's record-batch CRC).
- **Size guards.** Input larger than ``max_bytes`` is refused before parsing, and decoding stops as
  soon as the decoded batches exceed ``max_decoded_bytes`` (a compression bomb).

Everything here is columnar: the loops run over record batches, never over rows.
"""

from __future__ import annotations

import pyarrow as pa

from shoal.errors import SchemaError, WireFormatError

MAX_BATCH_BYTES = 64 * 1024 * 1024
"""Default upper bound on one encoded Arrow IPC stream."""

MAX_DECODED_BYTES = 1024 * 1024 * 1024
"""Default upper bound on the in-memory size of one decoded stream."""

EOS_MARKER = b"\xff\xff\xff\xff\x00\x00\x00\x00"
"""The Arrow IPC end-of-stream marker: continuation token, then a zero metadata length."""


def _pick_compression() -> str | None:
    for name in ("zstd", "lz4"):
        if pa.Codec.is_available(name):
            return name
    return None


DEFAULT_COMPRESSION: str | None = _pick_compression()
"""``"zstd"`` if available, else ``"lz4"``, else ``None`` (uncompressed)."""


def encode_batch(
    table_or_batch: pa.Table | pa.RecordBatch,
    *,
    compression: str | None = DEFAULT_COMPRESSION,
    max_rows_per_batch: int | None = None,
    max_bytes: int = MAX_BATCH_BYTES,
) -> bytes:
    """Encode rows as one Arrow IPC stream.

    A table is written as its record batches (split further to ``max_rows_per_batch`` rows if
    given); a table without rows is written as its schema alone. ``compression`` is ``"zstd"``,
    ``"lz4"`` or ``None``. Raises :class:`SchemaError` for something that is not a pyarrow table
    or record batch, or an unknown codec, and :class:`WireFormatError` if the result would exceed
    ``max_bytes`` (split the rows into several messages instead).
    """
    if isinstance(table_or_batch, pa.RecordBatch):
        table = pa.Table.from_batches([table_or_batch])
    elif isinstance(table_or_batch, pa.Table):
        table = table_or_batch
    else:
        raise SchemaError(f"encode_batch needs a pyarrow Table or RecordBatch, got {type(table_or_batch).__name__}")
    if compression is not None and (compression not in ("zstd", "lz4") or not pa.Codec.is_available(compression)):
        raise SchemaError(f"Arrow IPC compression must be 'zstd', 'lz4' (if available) or None, got {compression!r}")
    if max_rows_per_batch is not None and max_rows_per_batch <= 0:
        raise SchemaError(f"max_rows_per_batch must be positive, got {max_rows_per_batch}")
    options = pa.ipc.IpcWriteOptions(compression=compression)
    sink = pa.BufferOutputStream()
    try:
        with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
            writer.write_table(table, max_chunksize=max_rows_per_batch)
    except (pa.ArrowException, ValueError, TypeError) as exc:
        raise SchemaError(f"cannot encode rows as Arrow IPC: {exc}") from exc
    data: bytes = sink.getvalue().to_pybytes()
    if len(data) > max_bytes:
        raise WireFormatError(
            f"encoded Arrow IPC stream of {len(data)} bytes ({table.num_rows} rows) exceeds {max_bytes} bytes; "
            "split the rows into smaller batches"
        )
    return data


def decode_batch(
    data: bytes | bytearray | memoryview | None,
    expected_schema: pa.Schema | None = None,
    *,
    max_bytes: int = MAX_BATCH_BYTES,
    max_decoded_bytes: int = MAX_DECODED_BYTES,
) -> pa.Table:
    """Decode one complete Arrow IPC stream into a table.

    Raises :class:`WireFormatError` for ``None``, empty, oversized, truncated, malformed or
    trailing-garbage input, and :class:`SchemaError` if ``expected_schema`` is given and the
    stream does not fit it (see :func:`conform_schema`). With ``expected_schema`` the returned
    table has exactly that schema.
    """
    if data is None:
        raise WireFormatError("Arrow IPC: no data (a tombstone or an empty message)")
    if not isinstance(data, bytes | bytearray | memoryview):
        raise WireFormatError(f"Arrow IPC: expected bytes, got {type(data).__name__}")
    if not isinstance(data, bytes):
        data = bytes(data)  # the table references this buffer: it must not change underneath
    if not data:
        raise WireFormatError("Arrow IPC: empty input")
    if len(data) > max_bytes:
        raise WireFormatError(f"Arrow IPC: stream of {len(data)} bytes exceeds {max_bytes} bytes")
    if not data.endswith(EOS_MARKER):
        raise WireFormatError(
            f"Arrow IPC: stream of {len(data)} bytes does not end with the end-of-stream marker "
            "(truncated, trailing bytes, or not an Arrow IPC stream)"
        )
    source = pa.BufferReader(pa.py_buffer(data))
    batches: list[pa.RecordBatch] = []
    decoded = 0
    try:
        reader = pa.ipc.open_stream(source)
        _check_names(reader.schema)
        end_of_last_message = source.tell()
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            batch.validate(full=True)
            decoded += batch.nbytes
            if decoded > max_decoded_bytes:
                raise WireFormatError(f"Arrow IPC: decoded rows exceed {max_decoded_bytes} bytes")
            batches.append(batch)
            end_of_last_message = source.tell()
        table = pa.Table.from_batches(batches, schema=reader.schema)
    except WireFormatError:
        raise
    except Exception as exc:  # pyarrow raises ArrowInvalid, ArrowIOError, ArrowMemoryError, OSError, ...
        raise WireFormatError(f"Arrow IPC: malformed or truncated stream: {exc}") from exc
    if end_of_last_message + len(EOS_MARKER) != len(data) or source.tell() != len(data):
        raise WireFormatError(
            f"Arrow IPC: the stream's messages end at byte {end_of_last_message} but the input has {len(data)} "
            "bytes (truncated stream or trailing bytes)"
        )
    if expected_schema is not None:
        table = conform_schema(table, expected_schema)
    return table


def _check_names(schema: pa.Schema) -> None:
    """Decode every field name, nested ones included: raises UnicodeDecodeError for a name that is not UTF-8."""
    types: list[pa.DataType] = []
    for field in schema:
        _ = field.name
        types.append(field.type)
    while types:  # iterative, so a deeply nested garbage type cannot exhaust the Python stack
        dtype = types.pop()
        if pa.types.is_dictionary(dtype):
            types.append(dtype.value_type)
        for i in range(dtype.num_fields):
            child = dtype.field(i)
            _ = child.name
            types.append(child.type)


def conform_schema(table: pa.Table, expected: pa.Schema) -> pa.Table:
    """Return ``table`` relabelled with ``expected``, or raise :class:`SchemaError`.

    Field names, order and types must match exactly (nested types included). Declared
    nullability may differ, since writers often declare every field nullable, but a field that
    ``expected`` says is not nullable must hold no nulls. Schema metadata is taken from
    ``expected``.
    """
    actual = table.schema
    if actual.names != expected.names:
        missing = [n for n in expected.names if n not in actual.names]
        extra = [n for n in actual.names if n not in expected.names]
        raise SchemaError(
            f"row batch columns {actual.names} do not match the expected {expected.names}"
            + (f"; missing {missing}" if missing else "")
            + (f"; unexpected {extra}" if extra else "")
        )
    problems = []
    for field, want in zip(actual, expected, strict=True):
        if not field.type.equals(want.type):
            problems.append(f"column {want.name!r} has type {field.type}, expected {want.type}")
        elif not want.nullable and table.column(want.name).null_count:
            problems.append(f"column {want.name!r} is not nullable but has {table.column(want.name).null_count} nulls")
    if problems:
        raise SchemaError("row batch does not fit the expected schema: " + "; ".join(problems))
    return pa.Table.from_arrays(table.columns, schema=expected)
