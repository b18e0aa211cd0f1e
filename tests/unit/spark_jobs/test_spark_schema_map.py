"""DataFrame schema vs table schema: every problem named; scan results in Spark's Arrow types."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from metadata.table import Column, ColumnType, TableDefinition
from spark_jobs.errors import ReaderError, SinkSchemaError
from spark_jobs.schema_map import check_write_schema, spark_ddl, to_spark_arrow

TABLE = TableDefinition(
    "t",
    (
        Column("k", ColumnType.UINT64, False),
        Column("v", ColumnType.STRING),
        Column("ts", ColumnType.TIMESTAMP_MS),
        Column("x", ColumnType.FLOAT64),
    ),
    ("k",),
    "k",
    1,
)


_TYPES = {
    "long": T.LongType(),
    "int": T.IntegerType(),
    "string": T.StringType(),
    "double": T.DoubleType(),
    "timestamp": T.TimestampType(),
}


def _schema(ddl: str) -> T.StructType:
    """A StructType from "name type, ..." (no SparkSession needed)."""
    fields = [part.split() for part in ddl.split(",")]
    return T.StructType([T.StructField(name, _TYPES[kind]) for name, kind in fields])


def test_spark_ddl() -> None:
    assert spark_ddl(TABLE) == "`k` bigint NOT NULL, `v` string, `ts` timestamp, `x` double"


def test_compatible_schemas_pass() -> None:
    check_write_schema(_schema("k long, v string, ts timestamp, x double"), TABLE)
    check_write_schema(_schema("k int, x int"), TABLE)  # widening, nullable columns left out


def test_every_problem_is_named() -> None:
    with pytest.raises(SinkSchemaError) as err:
        check_write_schema(_schema("K long, v int, extra string, x string"), TABLE)
    msg = str(err.value)
    assert "shoal table 't'" in msg
    assert "column 'K' is not in the table (did you mean 'k'?)" in msg
    assert "column 'v' is int in the DataFrame, but string in the table (expected string)" in msg
    assert "column 'extra' is not in the table" in msg
    assert "column 'x' is string in the DataFrame, but float64" in msg
    assert "column 'k' (uint64, not null) is missing from the DataFrame" in msg


def test_scan_results_become_spark_types() -> None:
    scan = pa.table(
        {
            "k": pa.array([1, 2], pa.uint64()),
            "v": ["a", None],
            "ts": pa.array([0, 1500], pa.timestamp("ms", tz="UTC")),
            "x": [0.5, None],
        }
    )
    out = to_spark_arrow(scan, TABLE)
    assert out.schema.field("k").type == pa.int64() and out.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert out.column("ts").to_pylist() == scan.column("ts").to_pylist()
    too_big = scan.set_column(0, "k", pa.array([2**63, 1], pa.uint64()))
    with pytest.raises(ReaderError, match="above 2\\*\\*63-1"):
        to_spark_arrow(too_big, TABLE)
