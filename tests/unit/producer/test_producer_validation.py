from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from producer_unit_support import make_table

from metadata.table import Column, ColumnType, TableDefinition
from producer.errors import RowValidationError
from producer.validation import Limits, delete_schema, to_ingest, validate_keys, validate_rows
from shoal.errors import SchemaError, ShoalError
from shoal.wire.ingest import DELETED_COLUMN, ingest_schema

T = make_table()


def good(k: int, **extra: object) -> dict[str, object]:
    return {"k": k, "ts": 1000 + k, **extra}


def test_dicts_become_the_table_schema() -> None:
    rows = [good(1, v="a", n=3, b=b"\x00", score=1), good(2), {"k": 3, "ts": dt.datetime(2024, 1, 1)}]
    out = validate_rows(T, rows)
    assert out.schema.equals(T.arrow_schema())
    assert out.column("k").to_pylist() == [1, 2, 3]
    assert out.column("v").to_pylist() == ["a", None, None]
    assert out.column("score").to_pylist() == [1.0, None, None]
    assert out.column("ts").to_pylist()[2] == dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def test_big_uint64_and_binary_from_text() -> None:
    out = validate_rows(T, [{"k": 2**64 - 1, "ts": "2024-01-01T00:00:00Z", "b": "hi"}])
    assert out.column("ts").to_pylist() == [dt.datetime(2024, 1, 1, tzinfo=dt.UTC)]
    assert out.column("k").to_pylist() == [2**64 - 1]
    assert out.column("b").to_pylist() == [b"hi"]


@pytest.mark.parametrize(
    ("rows", "row", "column", "text"),
    [
        ([good(1), good(2), {"k": -1, "ts": 1}], 2, "k", "uint64"),
        ([good(1), {"k": 2}], 1, "ts", "null or missing"),
        ([{"k": 2}], 0, "ts", "primary key column is missing"),
        ([good(1), {"k": None, "ts": 1}], 1, "k", "null"),
        ([good(1), good(2, zz=1)], 1, "zz", "unknown column"),
        ([good(1, v="x"), good(2, v=3)], 1, "v", "int 3"),
        ([good(1), good(2, n=1.5)], 1, "n", "float"),
        ([good(1), good(2, n=2**40)], 1, "n", "int32"),
        ([good(1), good(2, n=True)], 1, "n", "bool"),
        ([good(1), {"k": 2, "ts": "not a time"}], 1, "ts", "timestamp"),
        ([good(1), {"k": 2, "ts": "2024-01-01T00:00:00Z"}], 1, "ts", "mixes"),
        ([good(1), good(2, v="x" * 300)], 1, "v", "longer than 100"),
    ],
)
def test_errors_name_row_and_column(rows: list[dict[str, object]], row: int, column: str, text: str) -> None:
    with pytest.raises(RowValidationError) as info:
        validate_rows(T, rows, Limits(max_value_bytes=100, max_row_bytes=200))
    err = info.value
    assert (err.row, err.column) == (row, column), str(err)
    assert text in str(err)
    assert f"row {row}" in str(err) and repr(column) in str(err)
    assert isinstance(err, SchemaError) and isinstance(err, ShoalError)


def test_row_size_bound_names_the_row() -> None:
    with pytest.raises(RowValidationError) as info:
        validate_rows(T, [good(1, v="x" * 60, b="y" * 60), good(2, v="x" * 90, b="y" * 90)], Limits(100, 150))
    assert info.value.row == 1 and "add up to more than 150" in str(info.value)


def test_not_a_dict_and_not_rows() -> None:
    with pytest.raises(RowValidationError, match="row 1: expected a dict"):
        validate_rows(T, [good(1), [1, 2]])
    with pytest.raises(RowValidationError, match="list of dicts"):
        validate_rows(T, {"k": 1})
    with pytest.raises(RowValidationError, match="list of dicts"):
        validate_rows(T, 5)


def test_arrow_input_casts_and_errors() -> None:
    ok = pa.table({"k": pa.array([1, 2], pa.int64()), "ts": pa.array([1, 2], pa.int64()), "score": [1, 2]})
    out = validate_rows(T, ok)
    assert out.schema.equals(T.arrow_schema()) and out.column("score").to_pylist() == [1.0, 2.0]
    bad = pa.table({"k": pa.array([1, 2, 3, -4, 5], pa.int64()), "ts": pa.array([1] * 5)})
    with pytest.raises(RowValidationError) as info:
        validate_rows(T, bad)
    assert (info.value.row, info.value.column) == (3, "k")
    with pytest.raises(RowValidationError) as info:
        validate_rows(T, pa.table({"k": [1, 2], "ts": [1, 2], "v": [1, 2]}))
    assert info.value.column == "v" and "cannot be cast" in str(info.value)
    with pytest.raises(RowValidationError) as info:
        validate_rows(T, pa.table({"k": [1], "ts": [1], "other": [1]}))
    assert info.value.column == "other" and info.value.row is None
    with pytest.raises(RowValidationError) as info:
        validate_rows(T, pa.table({"k": [1.0, 2.5], "ts": [1, 2]}))
    assert (info.value.row, info.value.column) == (1, "k")


def test_dataframe_input() -> None:
    df = pd.DataFrame(
        {"k": [1, 2], "ts": pd.to_datetime(["2024-01-01 00:00:00.123", "2024-01-02 00:00:00.000"]), "v": ["x", None]}
    )
    out = validate_rows(T, df)
    assert out.column("v").to_pylist() == ["x", None]
    assert out.column("ts").to_pylist()[0] == dt.datetime(2024, 1, 1, 0, 0, 0, 123000, tzinfo=dt.UTC)
    with pytest.raises(RowValidationError) as info:
        validate_rows(T, pd.DataFrame({"k": [1.0, None], "ts": [1, 2]}))
    assert (info.value.row, info.value.column) == (1, "k")
    with pytest.raises(RowValidationError) as info:
        validate_rows(T, pd.DataFrame({"k": [1, "x"], "ts": [1, 2]}))
    assert (info.value.row, info.value.column) == (1, "k")


def test_deletes_carry_only_the_key() -> None:
    keys = validate_keys(T, [{"k": 1, "ts": 5}, {"k": 2, "ts": 6}])
    assert keys.schema.equals(delete_schema(T))
    assert keys.column("v").null_count == 2 and keys.column("k").to_pylist() == [1, 2]
    assert validate_keys(T, [(1, 5)]).column("ts").to_pylist()[0] == dt.datetime(1970, 1, 1, 0, 0, 0, 5000, dt.UTC)
    ingest = to_ingest(keys, deleted=True)
    assert ingest.column(DELETED_COLUMN).to_pylist() == [True, True]
    assert ingest.schema.names == ingest_schema(T.arrow_schema()).names
    with pytest.raises(RowValidationError, match="only the primary key"):
        validate_keys(T, [{"k": 1, "ts": 5, "v": "x"}])
    with pytest.raises(RowValidationError) as info:
        validate_keys(T, [{"k": 1, "ts": 5}, {"k": 1}])
    assert (info.value.row, info.value.column) == (1, "ts")
    with pytest.raises(RowValidationError, match="give keys as dicts or tuples"):
        validate_keys(T, [1, 2])
    with pytest.raises(RowValidationError, match="needs 2 values"):
        validate_keys(T, [(1,)])


def test_writes_are_flagged_not_deleted() -> None:
    out = to_ingest(validate_rows(T, [good(1)]), deleted=False)
    assert out.schema.equals(ingest_schema(T.arrow_schema()))
    assert out.column(DELETED_COLUMN).to_pylist() == [False]


def test_a_primary_key_timestamp_finer_than_milliseconds_is_refused_not_truncated() -> None:
    """Two writes 800 microseconds apart were truncated to one key: the second replaced the first and
    a delete of one removed the other. Outside the key the parts finer than the unit are dropped."""
    first, second = dt.datetime(2024, 1, 1, 0, 0, 0, 100), dt.datetime(2024, 1, 1, 0, 0, 0, 900)
    with pytest.raises(RowValidationError) as info:
        validate_rows(T, [good(1), {"k": 1, "ts": first}, {"k": 1, "ts": second}])
    assert (info.value.row, info.value.column) == (1, "ts") and "whole milliseconds" in str(info.value)
    micro = pa.table(
        {"k": pa.array([1, 1], pa.uint64()), "ts": pa.array([1_000_000_100, 1_000_000_900], pa.timestamp("us"))}
    )
    with pytest.raises(RowValidationError) as info:
        validate_rows(T, micro)
    assert (info.value.row, info.value.column) == (0, "ts")
    with pytest.raises(RowValidationError) as info:
        validate_keys(T, [(1, first)])
    assert info.value.column == "ts"
    frame = pd.DataFrame({"k": [1], "ts": pd.to_datetime(["2024-01-01 00:00:00.123456"])})
    with pytest.raises(RowValidationError):
        validate_rows(T, frame)
    whole = validate_rows(T, [{"k": 1, "ts": dt.datetime(2024, 1, 1, 0, 0, 0, 123000)}])
    assert whole.column("ts").to_pylist() == [dt.datetime(2024, 1, 1, 0, 0, 0, 123000, tzinfo=dt.UTC)]

    from metadata.table import Column, ColumnType, TableDefinition

    events = TableDefinition(
        "events",
        (Column("k", ColumnType.UINT64, False), Column("at", ColumnType.TIMESTAMP_MS)),
        ("k",),
        "k",
        1,
    )
    out = validate_rows(events, [{"k": 1, "at": second}])
    assert out.column("at").to_pylist() == [dt.datetime(2024, 1, 1, tzinfo=dt.UTC)]
    out = validate_rows(events, pa.table({"k": pa.array([1], pa.uint64()), "at": pa.array([900], pa.timestamp("us"))}))
    assert out.column("at").to_pylist() == [dt.datetime(1970, 1, 1, tzinfo=dt.UTC)]


def _float(bits: int) -> float:
    return float(np.array([bits], np.uint64).view(np.float64)[0])


FLOATS = TableDefinition(
    "floats",
    (
        Column("k", ColumnType.UINT64, False),
        Column("f", ColumnType.FLOAT32),
        Column("d", ColumnType.FLOAT64),
        Column("s", ColumnType.STRING),
        Column("b", ColumnType.BINARY),
        Column("at", ColumnType.TIMESTAMP_MS),
    ),
    ("k",),
    "k",
    1,
)


def _refused(rows: object) -> RowValidationError:
    with pytest.raises(RowValidationError) as info:
        validate_rows(FLOATS, rows)
    return info.value


def test_a_float_beyond_a_float32_is_refused_not_stored_as_infinity() -> None:
    err = _refused([{"k": 1, "f": 1.0}, {"k": 2, "f": 1e300}])
    assert (err.row, err.column) == (1, "f") and "outside the range of float" in err.reason
    err = _refused(pa.table({"k": pa.array([1, 2], pa.uint64()), "f": pa.array([0.5, -1e39])}))
    assert (err.row, err.column) == (1, "f")
    kept = validate_rows(FLOATS, [{"k": 1, "f": float("inf")}, {"k": 2, "f": float("-inf")}, {"k": 3, "f": 0.1}])
    assert kept.column("f").to_pylist()[:2] == [float("inf"), float("-inf")]


def test_numpy_scalars_keep_their_values() -> None:
    """Arrow read a numpy uint64 as an int64 when building a float column: 2**64 - 1000 became -1000.0."""
    err = _refused([{"k": 1, "d": np.uint64(2**64 - 1000)}])
    assert (err.row, err.column) == (0, "d")
    out = validate_rows(FLOATS, [{"k": np.uint64(2**64 - 1), "d": np.uint64(2**52), "f": np.float32(0.5)}])
    assert out.column("k").to_pylist() == [2**64 - 1] and out.column("d").to_pylist() == [float(2**52)]
    assert out.column("f").to_pylist() == [0.5]


def test_float_bits_are_kept() -> None:
    nan, minus_zero = _float(0x7FF8000000000001), -0.0
    out = validate_rows(FLOATS, pa.table({"k": pa.array([1, 2], pa.uint64()), "d": [nan, minus_zero]}))
    bits = out.column("d").to_numpy(zero_copy_only=False).view(np.uint64).tolist()
    assert bits == [0x7FF8000000000001, 0x8000000000000000]
    out = validate_rows(FLOATS, [{"k": 1, "d": nan}, {"k": 2, "d": minus_zero}])
    assert out.column("d").to_numpy(zero_copy_only=False).view(np.uint64).tolist() == bits


def test_invalid_utf8_in_an_arrow_string_column_names_its_row() -> None:
    """The leader refuses a message holding invalid UTF-8 as a whole, good rows included: the producer
    refuses the row before anything is sent."""
    raw = pa.array([b"ok", b"fine", b"\xff\xfe"], pa.binary()).view(pa.string())
    err = _refused(pa.table({"k": pa.array([1, 2, 3], pa.uint64()), "s": raw}))
    assert (err.row, err.column, err.reason) == (2, "s", "value is not valid UTF-8")
    large = pa.array([b"\xc3\x28", b"ok"], pa.large_binary()).view(pa.large_string())
    err = _refused(pa.table({"k": pa.array([1, 2], pa.uint64()), "s": large}))
    assert (err.row, err.column) == (0, "s")


def test_a_lone_surrogate_for_a_binary_column_is_a_row_error() -> None:
    err = _refused([{"k": 1, "b": "ok"}, {"k": 2, "b": "\ud800"}])
    assert (err.row, err.column) == (1, "b") and "UTF-8" in err.reason


def test_duplicate_arrow_column_names_are_refused() -> None:
    dup = pa.Table.from_arrays(
        [pa.array([1], pa.uint64()), pa.array(["first"]), pa.array(["second"])], names=["k", "s", "s"]
    )
    assert "duplicate column names" in _refused(dup).reason


def test_timestamps_are_floored_to_the_millisecond_and_never_wrap() -> None:
    """Outside a key a timestamp finer than milliseconds is rounded down to the millisecond it is in,
    from a Python datetime or from Arrow alike (1.5 ms before the epoch is -2 ms); a coarser one that
    does not fit (seconds times 1000 past int64) and any instant outside the years 1-9999 are
    refused, not wrapped around."""
    before = dt.datetime(1969, 12, 31, 23, 59, 59, 998500)
    from_python = validate_rows(FLOATS, [{"k": 1, "at": before}]).column("at").cast(pa.int64())
    micro = pa.table({"k": pa.array([1], pa.uint64()), "at": pa.array([-1500], pa.timestamp("us"))})
    from_arrow = validate_rows(FLOATS, micro).column("at").cast(pa.int64())
    assert from_python.to_pylist() == from_arrow.to_pylist() == [-2]
    seconds = pa.table({"k": pa.array([1, 2], pa.uint64()), "at": pa.array([0, 10**16], pa.timestamp("s"))})
    assert (_refused(seconds).row, _refused(seconds).column) == (1, "at")
    err = _refused([{"k": 1, "at": 0}, {"k": 2, "at": 10**15}])
    assert (err.row, err.column) == (1, "at") and "outside the years 1-9999" in err.reason
    arrow_ms = pa.table({"k": pa.array([1, 2], pa.uint64()), "at": pa.array([0, 10**15], pa.timestamp("ms"))})
    err = _refused(arrow_ms)
    assert (err.row, err.column) == (1, "at") and "outside the years 1-9999" in err.reason
    low, high = -62_135_596_800_000, 253_402_300_799_999
    edges = validate_rows(FLOATS, [{"k": 1, "at": low}, {"k": 2, "at": high}]).column("at").cast(pa.int64())
    assert edges.to_pylist() == [low, high]
    assert _refused([{"k": 1, "at": low - 1}]).row == 0


def test_arrow_data_the_leader_would_refuse_is_refused_here() -> None:
    """An array assembled from raw buffers with offsets that go backwards: the leader's full validation
    would refuse the whole message; the producer refuses the column first."""
    data = pa.py_buffer(b"abc")
    offsets = pa.py_buffer(np.array([0, 3, 2], np.int32).tobytes())
    broken = pa.Array.from_buffers(pa.binary(), 2, [None, offsets, data])
    err = _refused(pa.table({"k": pa.array([1, 2], pa.uint64()), "b": broken}))
    assert err.column == "b" and err.reason.startswith("invalid Arrow data")


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"k": -1}, "column 'k': -1 is outside the range of uint64"),
        ({"k": 2**64}, "column 'k': 18446744073709551616 is outside the range of uint64"),
        ({"k": 1, "f": 10**23}, "column 'f': the integer 100000000000000000000000 cannot be stored exactly as float"),
        ({"k": 1, "d": 2**53 + 1}, "the integer 9007199254740993 cannot be stored exactly as double"),
        ({"k": 1, "at": "2020-01-01T00:00:00"}, "give ISO 8601 with a zone offset, such as 2020-01-01T00:00:00Z"),
    ],
)
def test_values_that_do_not_fit_are_explained_without_arrow_internals(row: dict[str, Any], expected: str) -> None:
    """Arrow's and CPython's words ("PyLong is too large to fit int64", "cast to timestamp without
    timezone, then call assume_timezone") told a ``shoal write`` user nothing they could act on."""
    with pytest.raises(RowValidationError) as info:
        validate_rows(FLOATS, [row])
    assert expected in str(info.value) and "PyLong" not in str(info.value) and "assume_timezone" not in str(info.value)


def test_dates_and_numpy_datetimes_in_rows_are_read_as_utc_instants() -> None:
    """Listed as accepted for a timestamp column, both were refused with Arrow's words (an
    audit's note); a date is its midnight UTC, a numpy datetime a UTC instant."""
    table = TableDefinition(
        "t", (Column("k", ColumnType.UINT64, False), Column("at", ColumnType.TIMESTAMP_MS)), ("k",), "k", 1
    )
    rows = [
        {"k": 1, "at": dt.date(1970, 1, 2)},
        {"k": 2, "at": np.datetime64("1970-01-01T00:00:00.001")},
        {"k": 3, "at": np.datetime64("NaT")},
        {"k": 4, "at": dt.datetime(1970, 1, 1, tzinfo=dt.UTC)},
    ]
    out = validate_rows(table, rows)
    assert out.column("at").cast(pa.int64()).to_pylist() == [86_400_000, 1, None, 0]
    with pytest.raises(RowValidationError, match="outside the years 1-9999") as info:
        validate_rows(table, [{"k": 1, "at": np.datetime64("10000-01-01")}])
    assert (info.value.row, info.value.column) == (0, "at")


def test_an_integer_a_float32_cannot_hold_exactly_is_not_called_out_of_range() -> None:
    table = TableDefinition(
        "t", (Column("k", ColumnType.UINT64, False), Column("g", ColumnType.FLOAT32)), ("k",), "k", 1
    )
    arrow = pa.table({"k": pa.array([1], pa.uint64()), "g": pa.array([16_777_217])})
    with pytest.raises(RowValidationError, match="cannot be stored exactly as float"):
        validate_rows(table, arrow)
    with pytest.raises(RowValidationError, match="outside the range of float"):
        validate_rows(table, pa.table({"k": pa.array([1], pa.uint64()), "g": pa.array([1e39], pa.float64())}))
