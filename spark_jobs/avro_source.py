"""Decoding Avro-encoded source records for the ingest job (executor side, ``mapInArrow``).

Records are schemaless Avro binary (the writer schema comes from ``--avro-schema FILE``; the
default is the table's own Avro schema, ``TableDefinition.avro_schema``). Decoding is one
fastavro call per record (Avro has no columnar decoder); the columns are then built as Arrow
arrays in one call each. A record that does not decode, is not a record, or holds a value that
does not fit its column gets a reason in ``_shoal_error`` instead of failing the batch.
"""

from __future__ import annotations

import datetime as dt
import io
import struct
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from metadata.table import ColumnType, TableDefinition
from shoal import jsonio
from spark_jobs.deadletter import ERROR_COLUMN, META_COLUMNS, VALUE_COLUMN
from spark_jobs.errors import IngestError
from spark_jobs.schema_map import spark_arrow_type


def parse_schema(text: str) -> Any:
    import fastavro

    try:
        return fastavro.parse_schema(jsonio.loads_checked(text))
    except (ValueError, TypeError, KeyError, RecursionError, fastavro.schema.SchemaParseException) as exc:
        raise IngestError(f"the Avro schema is not valid: {exc}") from exc


_INTEGERS = (ColumnType.UINT64, ColumnType.INT64, ColumnType.INT32)
_FLOATS = (ColumnType.FLOAT32, ColumnType.FLOAT64)


def _convert(value: Any, ctype: ColumnType) -> Any:
    """An Avro value as the column's Python value; ValueError (the row is deadlettered with it) for
    a value ``shoal write`` would refuse too: a float in an integer or timestamp column (Arrow would
    truncate 1.7 to key 1), a boolean in a number column, an integer a float column cannot hold
    exactly. The checks are the producer's (:mod:`producer.validation`), so both paths agree."""
    if value is None:
        return None
    if ctype in _INTEGERS and isinstance(value, bytes | bytearray):
        if ctype is not ColumnType.UINT64 or len(value) != 8:
            raise ValueError(f"{len(value)} bytes are not a {ctype.value} value (only uint64 takes 8 big-endian bytes)")
        return int.from_bytes(value, "big")  # the table's Avro form of uint64: 8 big-endian bytes
    if ctype in (*_INTEGERS, ColumnType.TIMESTAMP_MS, *_FLOATS) and isinstance(value, bool):
        raise ValueError(f"a boolean ({value}) is not a {ctype.value} value")
    if ctype in (*_INTEGERS, ColumnType.TIMESTAMP_MS) and isinstance(value, float):
        raise ValueError(f"a float ({value!r:.40}) is not a {ctype.value} value; it would be truncated")
    if ctype in _FLOATS and isinstance(value, int) and not _exact_float(value, ctype):
        raise ValueError(f"the integer {value} cannot be stored exactly as {ctype.value}")
    if ctype is ColumnType.BOOL and not isinstance(value, bool):
        raise ValueError(f"{value!r:.40} is not a bool value")
    if ctype is ColumnType.TIMESTAMP_MS and isinstance(value, int):
        # integer arithmetic: ``fromtimestamp(value / 1000)`` goes through a float and lands a
        # microsecond early for most dates after 2100 and before 1970, a millisecond early once cast
        try:
            return _EPOCH + dt.timedelta(milliseconds=value)
        except OverflowError:
            raise ValueError(f"{value} ms from the epoch is outside the years 1-9999") from None
    return value


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _exact_float(value: int, ctype: ColumnType) -> bool:
    """Whether the integer ``value`` is a float32/float64 value exactly (in range, nothing rounded)."""
    try:
        as_double = float(value)
    except OverflowError:
        return False
    if ctype is ColumnType.FLOAT64:
        return int(as_double) == value
    try:
        (single,) = struct.unpack("f", struct.pack("f", as_double))
    except OverflowError:
        return False
    return int(as_double) == value and single == as_double


def decode_batches(
    batches: Iterator[pa.RecordBatch], schema_text: str, table: TableDefinition
) -> Iterator[pa.RecordBatch]:
    """(value, topic, partition, offset) batches -> table columns + error, raw value and source position."""
    from fastavro import schemaless_reader

    schema = parse_schema(schema_text)
    columns = list(table.columns)
    for batch in batches:
        values = batch.column("value").to_pylist()
        cols: dict[str, list[Any]] = {c.name: [] for c in columns}
        errors: list[str | None] = []
        for raw in values:
            error = None
            record: Any = None
            if raw is None:
                error = "empty (null) Kafka record value"
            else:
                try:
                    stream = io.BytesIO(raw)
                    record = schemaless_reader(stream, schema, None)
                    if stream.tell() != len(raw):
                        error = f"Avro value has {len(raw) - stream.tell()} bytes after its record"
                    elif not isinstance(record, dict):
                        error = f"Avro value is a {type(record).__name__}, not a record"
                except Exception as exc:  # fastavro raises many types on garbage
                    error = f"Avro decoding failed: {type(exc).__name__}: {exc}"
            converted: dict[str, Any] = {}
            if error is None:
                for c in columns:
                    try:
                        converted[c.name] = _convert(record.get(c.name), c.type)
                    except ValueError as exc:
                        error = f"column {c.name!r}: {exc}"
                        break
            errors.append(error)
            for c in columns:
                cols[c.name].append(converted.get(c.name) if error is None else None)
        arrays = []
        for c in columns:
            arrays.append(_column(cols[c.name], c.name, c.type, errors))
        names = [c.name for c in columns]
        yield pa.RecordBatch.from_arrays(
            [
                *arrays,
                pa.array(errors, pa.string()),
                batch.column("value"),
                *(batch.column(n) for n in ("topic", "partition", "offset")),
            ],
            names=[*names, ERROR_COLUMN, VALUE_COLUMN, *META_COLUMNS],
        )


def _column(values: list[Any], name: str, ctype: ColumnType, errors: list[str | None]) -> pa.Array:
    # a float32 column as float64, as the JSON parse does: a double beyond a float's range must reach
    # the producer's range check (ingest's refusals), not become an infinity here
    target = pa.float64() if ctype is ColumnType.FLOAT32 else spark_arrow_type(ctype)
    try:
        return pa.array(values, target)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    fixed = []
    for i, v in enumerate(values):  # slow path, only for a batch holding a bad value
        try:
            pa.array([v], target)
            fixed.append(v)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            if errors[i] is None:
                errors[i] = f"column {name!r}: {v!r:.60} does not fit {ctype.value}: {exc}"
            fixed.append(None)
    return pa.array(fixed, target)
