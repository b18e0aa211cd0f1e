"""Rows in, a validated Arrow table out (DESIGN.md section 4, step 1).

Input is a list of dicts, a ``pyarrow.Table`` / ``RecordBatch`` or a pandas ``DataFrame``. The result
has exactly the table's Arrow schema (column order, types, nullability); anything that does not fit
raises :class:`~producer.errors.RowValidationError` naming the first bad row and its column.

Checks: unknown and duplicate columns are rejected; every value must cast safely to its column's
type (no truncation, no overflow, no float beyond a float32's range; strings such as ISO timestamps
or decimal digits are parsed by Arrow's cast; string columns must be valid UTF-8; timestamps within
the years 1-9999); not-null columns (the primary key among them) must be present and non-null; a
string or binary value may be at most ``max_value_bytes`` long and the variable-size part of a row
at most ``max_row_bytes``.

The checks are columnar. Finding *which* row is bad after a cast failed is the only slow path: a
binary search over prefixes of the column (a cast of a prefix fails iff it holds a bad value).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata.table import TableDefinition
from producer.errors import RowValidationError
from shoal.wire.ingest import TIMESTAMP_MS_RANGE, ingest_schema


@dataclass(frozen=True)
class Limits:
    max_value_bytes: int = 256 * 1024
    max_row_bytes: int = 512 * 1024


def _is_dataframe(obj: object) -> bool:
    return type(obj).__name__ == "DataFrame" and hasattr(obj, "columns") and hasattr(obj, "to_dict")


def _first_true(mask: pa.Array | pa.ChunkedArray) -> int | None:
    arr = np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)
    hits = np.flatnonzero(arr)
    return int(hits[0]) if hits.size else None


def _plain_arrow(table: TableDefinition, obj: pa.Table | pa.RecordBatch) -> dict[str, pa.ChunkedArray | pa.Array]:
    names = obj.schema.names
    if len(set(names)) != len(names):
        raise RowValidationError(table.name, f"duplicate column names in the Arrow input: {names}")
    return {name: obj.column(i) for i, name in enumerate(names)}


def _columns_from_dicts(table: TableDefinition, rows: Sequence[Any]) -> tuple[dict[str, Any], int]:
    """Column name -> list of Python values (missing keys -> None), after the per-row shape checks."""
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise RowValidationError(table.name, f"expected a dict (column -> value), got {type(row).__name__}", row=i)
    known = {c.name for c in table.columns}
    seen: set[Any] = set().union(*rows) if rows else set()
    unknown = seen - known
    if unknown:
        bad = sorted(unknown, key=str)[0]
        first = next(i for i, r in enumerate(rows) if bad in r)
        raise RowValidationError(
            table.name, f"unknown column (the table has {sorted(known)})", row=first, column=str(bad)
        )
    return {c.name: [r.get(c.name) for r in rows] for c in table.columns if c.name in seen}, len(rows)


def _columns_from_dataframe(table: TableDefinition, df: Any) -> tuple[dict[str, Any], int]:
    names = [str(c) for c in df.columns]
    if len(set(names)) != len(names):
        raise RowValidationError(table.name, f"duplicate column names in the DataFrame: {names}")
    out: dict[str, Any] = {}
    for name, col in zip(names, df.columns, strict=True):
        series = df[col]
        try:
            out[name] = pa.Array.from_pandas(series)
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            # mixed object column: keep Python values (NaN/NaT -> None) and let the cast find the bad row
            out[name] = series.astype(object).where(series.notna(), None).tolist()
    return out, len(df)


def _to_arrow_values(values: Any) -> pa.Array | pa.ChunkedArray:
    if isinstance(values, pa.Array | pa.ChunkedArray):
        return values
    return pa.array(values)


_ERRORS = (pa.ArrowException, ValueError, TypeError, OverflowError)


def _kind(dtype: pa.DataType) -> str:
    if pa.types.is_null(dtype):
        return "null"
    if pa.types.is_boolean(dtype):
        return "bool"
    if pa.types.is_integer(dtype):
        return "int"
    if pa.types.is_floating(dtype):
        return "float"
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "string"
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype) or pa.types.is_fixed_size_binary(dtype):
        return "binary"
    if pa.types.is_timestamp(dtype) or pa.types.is_date(dtype):
        return "timestamp"
    return str(dtype)


_ARROW_CASTS = {
    "int": {"int", "float", "timestamp"},
    "float": {"float", "int"},
    "bool": {"bool"},
    "string": {"string", "binary", "timestamp"},
    "binary": {"binary"},
    "timestamp": {"timestamp"},
}
"""Source kind -> the target kinds a column of that kind may be cast to (null casts to anything)."""

_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int, np.integer),
    "float": (int, float, np.integer, np.floating),
    "bool": (bool, np.bool_),
    "string": (str,),
    "binary": (bytes, bytearray, memoryview, str),
    "timestamp": (_dt.datetime, _dt.date, int, str, np.integer, np.datetime64),
}
"""Target kind -> the Python value types accepted for it from dicts (None is always accepted)."""


def _python_type_error(kind: str, values: list[Any], types: set[type]) -> tuple[int, str] | None:
    """The first value whose Python type does not suit ``kind`` (or mixes ints and strings), else None."""
    allowed = _PYTHON_TYPES[kind]
    types = types - {type(None)}
    ok = all(issubclass(t, allowed) and not (kind != "bool" and issubclass(t, bool | np.bool_)) for t in types)
    if kind == "timestamp" and ok and any(issubclass(t, str) for t in types) and len(types) > 1:
        ok = False  # ISO strings and numbers in one column: refuse rather than guess
        first_str = next(i for i, v in enumerate(values) if isinstance(v, str))
        first_other = next(i for i, v in enumerate(values) if v is not None and not isinstance(v, str))
        row = max(first_str, first_other)
        return row, f"mixes ISO strings and numbers ({type(values[row]).__name__} {values[row]!r:.60})"
    if ok:
        return None
    for i, v in enumerate(values):
        if v is not None and (not isinstance(v, allowed) or (kind != "bool" and isinstance(v, bool | np.bool_))):
            return i, f"{type(v).__name__} {v!r:.60} is not a valid {kind} value"
    return None


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _python_timestamps(values: list[Any]) -> list[Any]:
    """``values`` with each date as its midnight UTC and each numpy datetime as a UTC datetime (to
    the microsecond): Arrow takes neither from a list of Python values into a timestamp column. A
    numpy datetime beyond what a datetime holds becomes its milliseconds (refused by the range check)."""
    if not any(isinstance(v, np.datetime64) or type(v) is _dt.date for v in values):
        return values
    out: list[Any] = []
    for v in values:
        if type(v) is _dt.date:
            v = _dt.datetime(v.year, v.month, v.day, tzinfo=_dt.UTC)
        elif isinstance(v, np.datetime64):
            if np.isnat(v):
                v = None
            else:
                micros = int(v.astype("datetime64[us]").astype(np.int64))
                try:
                    v = _EPOCH + _dt.timedelta(microseconds=micros)
                except OverflowError:  # past what a datetime holds: as milliseconds, for the range check
                    v = micros // 1000
        out.append(v)
    return out


def _sub_millisecond_row(values: list[Any]) -> int | None:
    """The first datetime in ``values`` with a part finer than a millisecond (None if there is none)."""
    for i, v in enumerate(values):
        if isinstance(v, _dt.datetime) and (v.microsecond % 1000 or getattr(v, "nanosecond", 0)):
            return i
    return None


def _cast_column(table: TableDefinition, name: str, values: Any, dtype: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """Cast one input column to ``dtype`` or raise naming the first row that does not cast.

    A timestamp finer than the column's unit is rounded down to it, except in a primary key column: two
    writes a microsecond apart would become one row (the second replacing the first), so there it
    is refused."""
    types: set[type] = set()
    if isinstance(values, list):
        types = set(map(type, values))
        values = _python_scalars(values, types)
    out = _cast_values(table, name, values, dtype, types)
    kind = _kind(dtype)
    if kind == "float":
        _check_float_range(table, name, values, out)
    if kind == "timestamp":
        _check_timestamp_range(table, name, out)
    if not isinstance(values, list):  # Arrow built arrays from Python values itself
        _check_arrow_data(table, name, out)
    return out


def _cast_values(
    table: TableDefinition, name: str, values: Any, dtype: pa.DataType, types: set[type]
) -> pa.Array | pa.ChunkedArray:
    kind = _kind(dtype)
    in_key = name in table.primary_key
    if isinstance(values, list):
        problem = _python_type_error(kind, values, types)
        if problem is not None:
            raise RowValidationError(table.name, f"expected type {dtype}: {problem[1]}", row=problem[0], column=name)
        if kind == "timestamp":
            values = _python_timestamps(values)
        if kind == "timestamp" and in_key and (row := _sub_millisecond_row(values)) is not None:
            raise RowValidationError(
                table.name,
                f"a primary key timestamp must be whole milliseconds ({dtype}), got {values[row]!r:.60}",
                row=row,
                column=name,
            )
        if kind == "binary":
            values = _utf8_encoded(table, name, values)
        try:
            if kind == "timestamp" and any(isinstance(v, str) for v in values):
                values = pa.array(values, type=pa.string())
            else:
                return pa.array(values, type=dtype)
        except _ERRORS as exc:
            row, reason = _find_bad_row(values, dtype, len(values))
            value = values[row] if row is not None else None
            raise RowValidationError(
                table.name, _does_not_fit(kind, dtype, value, reason or str(exc)), row=row, column=name
            ) from exc
    arr = values
    if arr.type.equals(dtype):
        return arr
    source = _kind(arr.type)
    if source != "null" and kind not in _ARROW_CASTS.get(source, set()):
        row = _first_true(pc.is_valid(arr)) if arr.null_count < len(arr) else None
        raise RowValidationError(
            table.name, f"has type {arr.type}, which cannot be cast to {dtype}", row=row, column=name
        )
    if source == "timestamp" and kind == "timestamp" and not in_key and _finer(arr.type, dtype):
        # sub-millisecond parts are dropped (down to the millisecond the instant is in, as for a
        # Python datetime), but not in a key: the cast below refuses them there. The cast itself
        # stays safe, so a value out of the column's range is refused, never wrapped around.
        arr = pc.floor_temporal(arr, unit=_UNIT_NAMES[dtype.unit])
    try:
        return pc.cast(arr, dtype, safe=True)
    except _ERRORS as exc:
        row, reason = _find_bad_row(arr, dtype, len(arr))
        value = _python_value(arr, row)
        raise RowValidationError(
            table.name, _does_not_fit(kind, dtype, value, reason or str(exc)), row=row, column=name
        ) from exc


def _python_value(arr: pa.Array | pa.ChunkedArray, row: int | None) -> object:
    """``arr[row]`` as Python, or None when Python cannot hold it (a timestamp past year 9999)."""
    if row is None:
        return None
    try:
        return arr[row].as_py()
    except (OverflowError, ValueError, pa.ArrowException):
        return None


def _does_not_fit(kind: str, dtype: pa.DataType, value: object, arrow_reason: str) -> str:
    """Why ``value`` does not fit ``dtype``, in shoal's words rather than Arrow's or CPython's
    ("PyLong is too large to fit int64", "cast to timestamp without timezone, then call
    assume_timezone"); Arrow's own reason stays for any other case."""
    shown = f"{value!r:.60}" if value is not None else "the value"
    if kind == "timestamp" and isinstance(value, str):
        return (
            f"{shown} is not a time shoal reads: give ISO 8601 with a zone offset, "
            "such as 2020-01-01T00:00:00Z, or integer milliseconds since 1970"
        )
    if (
        kind == "float"
        and isinstance(value, int)
        and not isinstance(value, bool)
        and abs(value) <= _FLOAT_MAX[dtype.id]
    ):
        return f"the integer {shown} cannot be stored exactly as {dtype}; write it as a float if rounding is fine"
    if kind in ("int", "float") and isinstance(value, int | float):
        return f"{shown} is outside the range of {dtype}"
    return f"value does not fit type {dtype}: {arrow_reason}"


_FLOAT_MAX = {pa.float16().id: 65504.0, pa.float32().id: 3.4028234663852886e38, pa.float64().id: 1.7976931348623157e308}
"""The largest finite value of each float type: an integer within it that does not cast is not exact."""

_UNIT_NAMES = {"s": "second", "ms": "millisecond", "us": "microsecond", "ns": "nanosecond"}
_UNIT_ORDER = ("s", "ms", "us", "ns")


def _finer(source: pa.DataType, target: pa.DataType) -> bool:
    """A timestamp type with a finer unit than ``target``'s (a date is never finer)."""
    if not pa.types.is_timestamp(source):
        return False
    return _UNIT_ORDER.index(source.unit) > _UNIT_ORDER.index(target.unit)


def _python_scalars(values: list[Any], types: set[type]) -> list[Any]:
    """numpy integer, floating point and bool scalars as the Python values they hold: Arrow reads a
    ``numpy.uint64`` as an int64 when it builds a float column (2**64 - 1 became -1.0)."""
    if not any(issubclass(t, np.integer | np.floating | np.bool_) for t in types):
        return values
    converted = [v.item() if isinstance(v, np.integer | np.floating | np.bool_) else v for v in values]
    types.clear()
    types.update(map(type, converted))
    return converted


def _utf8_encoded(table: TableDefinition, name: str, values: list[Any]) -> list[Any]:
    """Python strings for a binary column as their UTF-8 bytes (a lone surrogate is refused)."""
    out = []
    for i, v in enumerate(values):
        if isinstance(v, str):
            try:
                v = v.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise RowValidationError(
                    table.name, f"a string for a binary column must encode as UTF-8: {exc.reason}", row=i, column=name
                ) from None
        out.append(v)
    return out


def _check_float_range(table: TableDefinition, name: str, source: Any, out: pa.Array | pa.ChunkedArray) -> None:
    """Refuse a finite value of ``source`` that became an infinity (a float32 column given a value
    beyond its range: Arrow's safe cast checks integers, not the range of floats)."""
    if not pc.any(pc.fill_null(pc.is_inf(out), False)).as_py():
        return
    wide = pa.array(source, pa.float64()) if isinstance(source, list) else pc.cast(source, pa.float64())
    grew = pc.and_(pc.fill_null(pc.is_inf(out), False), pc.invert(pc.fill_null(pc.is_inf(wide), False)))
    row = _first_true(grew)
    if row is None:
        return
    raise RowValidationError(
        table.name, f"value {wide[row].as_py()!r:.60} is outside the range of {out.type}", row=row, column=name
    )


def _check_arrow_data(table: TableDefinition, name: str, arr: pa.Array | pa.ChunkedArray) -> None:
    """Refuse a column the leader's full validation of the message would refuse (the whole message,
    good rows with it): a string that is not valid UTF-8 (naming its row), or Arrow data whose
    buffers are inconsistent (an array assembled from raw buffers)."""
    try:
        arr.validate(full=True)
        return
    except pa.ArrowInvalid as exc:
        problem = str(exc)
    if pa.types.is_string(arr.type):
        raw = pc.cast(arr, pa.binary())
        row, _ = _find_bad_row(raw, pa.string(), len(raw))
        if row is not None:
            raise RowValidationError(table.name, "value is not valid UTF-8", row=row, column=name)
    raise RowValidationError(table.name, f"invalid Arrow data: {problem:.200}", column=name)


def _check_timestamp_range(table: TableDefinition, name: str, arr: pa.Array | pa.ChunkedArray) -> None:
    if arr.null_count == len(arr):
        return
    millis = pc.cast(arr, pa.int64())
    low, high = TIMESTAMP_MS_RANGE
    bounds = pc.min_max(millis)
    if bounds["min"].as_py() >= low and bounds["max"].as_py() <= high:
        return
    row = _first_true(pc.or_(pc.less(millis, low), pc.greater(millis, high)))
    raise RowValidationError(
        table.name,
        f"{millis[row].as_py()} ms from the epoch is outside the years 1-9999 a timestamp may hold",
        row=row,
        column=name,
    )


def _casts(values: Any, dtype: pa.DataType, lo: int, hi: int) -> str | None:
    """None if values[lo:hi] cast to dtype, else the error text."""
    try:
        if isinstance(values, list):
            pa.array(values[lo:hi], type=dtype)
        else:
            pc.cast(values.slice(lo, hi - lo), dtype, safe=True)
        return None
    except _ERRORS as exc:
        return str(exc)


def _find_bad_row(values: Any, dtype: pa.DataType, n: int) -> tuple[int | None, str | None]:
    """Binary search for the first i such that values[0:i+1] does not cast (the slow path, errors only)."""
    if _casts(values, dtype, 0, n) is None:
        return None, None
    lo, hi = 0, n  # values[0:lo] casts; values[0:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _casts(values, dtype, 0, mid) is None:
            lo = mid
        else:
            hi = mid
    row = hi - 1
    return row, _casts(values, dtype, row, row + 1) or _casts(values, dtype, 0, hi)


def _check_not_null(table: TableDefinition, name: str, arr: pa.Array | pa.ChunkedArray, provided: bool) -> None:
    if arr.null_count == 0:
        return
    row = _first_true(pc.is_null(arr))
    in_pk = name in table.primary_key
    what = "primary key column" if in_pk else "not-null column"
    reason = f"{what} is missing" if not provided else f"{what} is null or missing"
    raise RowValidationError(table.name, reason, row=row, column=name)


def _check_sizes(
    table: TableDefinition, columns: dict[str, pa.Array | pa.ChunkedArray], n: int, limits: Limits
) -> None:
    row_bytes: Any = None
    for name, arr in columns.items():
        if not (pa.types.is_string(arr.type) or pa.types.is_binary(arr.type)) or arr.null_count == len(arr):
            continue
        lengths = pc.fill_null(pc.binary_length(arr), 0)
        if pc.max(lengths).as_py() > limits.max_value_bytes:
            row = _first_true(pc.greater(lengths, limits.max_value_bytes))
            size = pc.max(lengths).as_py()
            raise RowValidationError(
                table.name,
                f"value is longer than {limits.max_value_bytes} bytes (longest in the column: {size})",
                row=row,
                column=name,
            )
        row_bytes = lengths if row_bytes is None else pc.add(row_bytes, lengths)
    if row_bytes is not None and n and pc.max(row_bytes).as_py() > limits.max_row_bytes:
        row = _first_true(pc.greater(row_bytes, limits.max_row_bytes))
        raise RowValidationError(
            table.name, f"the row's string/binary values add up to more than {limits.max_row_bytes} bytes", row=row
        )


def _input_columns(table: TableDefinition, rows: Any) -> tuple[dict[str, Any], int]:
    if isinstance(rows, pa.RecordBatch | pa.Table):
        return _plain_arrow(table, rows), rows.num_rows
    if _is_dataframe(rows):
        return _columns_from_dataframe(table, rows)
    if isinstance(rows, Iterable) and not isinstance(rows, Mapping | str | bytes):
        return _columns_from_dicts(table, rows if isinstance(rows, Sequence) else list(rows))
    raise RowValidationError(
        table.name, f"rows must be a list of dicts, a pyarrow Table or a pandas DataFrame, got {type(rows).__name__}"
    )


def validate_rows(table: TableDefinition, rows: Any, limits: Limits | None = None) -> pa.Table:
    """The rows as a table with exactly ``table.arrow_schema()``, or RowValidationError."""
    limits = limits or Limits()
    schema = table.arrow_schema()
    given, n = _input_columns(table, rows)
    unknown = [name for name in given if name not in schema.names]
    if unknown:
        raise RowValidationError(
            table.name, f"unknown column (the table has {schema.names})", column=sorted(unknown)[0]
        )
    columns: dict[str, pa.Array | pa.ChunkedArray] = {}
    for field in schema:
        if field.name in given:
            arr = _cast_column(table, field.name, given[field.name], field.type)
        else:
            arr = pa.nulls(n, field.type)
        if not field.nullable:
            _check_not_null(table, field.name, arr, field.name in given)
        columns[field.name] = arr
    _check_sizes(table, columns, n, limits)
    return pa.Table.from_arrays([_chunked(columns[f.name]) for f in schema], schema=schema)


def _chunked(arr: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    return arr if isinstance(arr, pa.ChunkedArray) else pa.chunked_array([arr], type=arr.type)


def delete_schema(table: TableDefinition) -> pa.Schema:
    """The table's schema with every non-key column nullable: a tombstone sets only the primary key."""
    schema = table.arrow_schema()
    pk = set(table.primary_key)
    return pa.schema([f if f.name in pk else f.with_nullable(True) for f in schema], metadata=schema.metadata)


def validate_keys(table: TableDefinition, keys: Any, limits: Limits | None = None) -> pa.Table:
    """Keys of rows to delete as a table of :func:`delete_schema`: primary key set, every other column null.

    ``keys`` is a list of primary key values (tables with a one-column primary key), a list of dicts
    or tuples (one value per primary key column, in key order), a pyarrow Table or a DataFrame with
    the primary key columns.
    """
    pk = table.primary_key
    rows: Any = keys
    if not isinstance(keys, pa.Table | pa.RecordBatch) and not _is_dataframe(keys):
        if isinstance(keys, Mapping | str | bytes) or not isinstance(keys, Iterable):
            raise RowValidationError(
                table.name, f"keys must be a list of key values, dicts or tuples, got {type(keys).__name__}"
            )
        keys = list(keys)
        if keys and all(isinstance(k, Mapping) for k in keys):
            rows = keys
        elif keys and all(isinstance(k, tuple) for k in keys):
            for i, k in enumerate(keys):
                if len(k) != len(pk):
                    raise RowValidationError(
                        table.name, f"a key tuple needs {len(pk)} values ({list(pk)}), got {len(k)}", row=i
                    )
            rows = [dict(zip(pk, k, strict=True)) for k in keys]
        elif len(pk) != 1:
            raise RowValidationError(
                table.name, f"the primary key has {len(pk)} columns {list(pk)}: give keys as dicts or tuples"
            )
        else:
            rows = {pk[0]: keys}
    if isinstance(rows, dict):
        given: dict[str, Any] = dict(rows)
        n = len(keys)
    else:
        given, n = _input_columns(table, rows)
    extra = [name for name in given if name not in pk]
    if extra:
        raise RowValidationError(
            table.name, f"a delete takes only the primary key columns {list(pk)}", column=sorted(extra)[0]
        )
    schema = delete_schema(table)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {}
    for field in schema:
        if field.name in pk and field.name in given:
            arr = _cast_column(table, field.name, given[field.name], field.type)
        else:
            arr = pa.nulls(n, field.type)
        if field.name in pk:
            _check_not_null(table, field.name, arr, field.name in given)
        columns[field.name] = arr
    _check_sizes(table, {name: columns[name] for name in pk}, n, limits or Limits())
    return pa.Table.from_arrays([_chunked(columns[f.name]) for f in schema], schema=schema)


def to_ingest(rows: pa.Table, *, deleted: bool) -> pa.Table:
    """Append the ``_shoal_deleted`` column: the ingest message schema (shoal.wire.ingest)."""
    schema = ingest_schema(rows.schema)
    flag = pa.chunked_array([pa.array(np.full(rows.num_rows, deleted, dtype=bool), type=pa.bool_())])
    return pa.Table.from_arrays([*rows.columns, flag], schema=schema)
