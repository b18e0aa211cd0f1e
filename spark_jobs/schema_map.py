"""Table schema <-> Spark schema: the reader's StructType, the sink's type check, Arrow conversions.

Spark has no unsigned type: a ``uint64`` column is a LongType in Spark (values above 2**63-1 are
refused with a clear error when read; negative values are refused by the producer's validation
when written). ``timestamp_ms`` is a TimestampType (UTC). The sink accepts, per column, the
Spark type that maps to it and the narrower integer/float types that widen to it without loss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from metadata.table import ColumnType, TableDefinition
from spark_jobs.errors import ReaderError, SinkSchemaError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

_SPARK_NAME = {
    ColumnType.BOOL: "boolean",
    ColumnType.INT32: "int",
    ColumnType.INT64: "bigint",
    ColumnType.UINT64: "bigint",
    ColumnType.FLOAT32: "float",
    ColumnType.FLOAT64: "double",
    ColumnType.STRING: "string",
    ColumnType.BINARY: "binary",
    ColumnType.TIMESTAMP_MS: "timestamp",
}

_ACCEPTED: dict[ColumnType, frozenset[str]] = {
    ColumnType.BOOL: frozenset({"boolean"}),
    ColumnType.INT32: frozenset({"byte", "short", "integer"}),
    ColumnType.INT64: frozenset({"byte", "short", "integer", "long"}),
    ColumnType.UINT64: frozenset({"byte", "short", "integer", "long"}),
    ColumnType.FLOAT32: frozenset({"float"}),
    ColumnType.FLOAT64: frozenset({"float", "double", "byte", "short", "integer"}),
    ColumnType.STRING: frozenset({"string"}),
    ColumnType.BINARY: frozenset({"binary"}),
    ColumnType.TIMESTAMP_MS: frozenset({"timestamp", "timestamp_ntz"}),
}

_READ_ARROW: dict[ColumnType, pa.DataType] = {
    ColumnType.BOOL: pa.bool_(),
    ColumnType.INT32: pa.int32(),
    ColumnType.INT64: pa.int64(),
    ColumnType.UINT64: pa.int64(),
    ColumnType.FLOAT32: pa.float32(),
    ColumnType.FLOAT64: pa.float64(),
    ColumnType.STRING: pa.string(),
    ColumnType.BINARY: pa.binary(),
    ColumnType.TIMESTAMP_MS: pa.timestamp("us", tz="UTC"),
}


def spark_ddl(table: TableDefinition) -> str:
    """The table as a Spark DDL schema string (``k bigint NOT NULL, v string``)."""
    parts = []
    for c in table.columns:
        parts.append(f"`{c.name}` {_SPARK_NAME[c.type]}{'' if c.nullable else ' NOT NULL'}")
    return ", ".join(parts)


def spark_schema(table: TableDefinition) -> StructType:
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(spark_ddl(table))
    assert isinstance(schema, StructType)
    return schema


def _type_name(dtype: DataType) -> str:
    return str(dtype.typeName())


def check_write_schema(schema: StructType, table: TableDefinition) -> None:
    """Raise SinkSchemaError listing every problem if ``schema`` cannot be written to ``table``.

    Every DataFrame column must be a table column of a compatible type; every primary-key (and
    every not-null) column must be present. Column names match exactly (shoal names are
    case-sensitive on the wire).
    """
    problems: list[str] = []
    by_name = {c.name: c for c in table.columns}
    present = set()
    for field in schema.fields:
        col = by_name.get(field.name)
        if col is None:
            hint = [n for n in by_name if n.lower() == field.name.lower()]
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            problems.append(f"column {field.name!r} is not in the table{extra}")
            continue
        present.add(field.name)
        tname = _type_name(field.dataType)
        if tname not in _ACCEPTED[col.type]:
            problems.append(
                f"column {field.name!r} is {field.dataType.simpleString()} in the DataFrame, "
                f"but {col.type.value} in the table (expected {_SPARK_NAME[col.type]})"
            )
    for c in table.columns:
        if c.name not in present and (not c.nullable or c.name in table.primary_key):
            problems.append(f"column {c.name!r} ({c.type.value}, not null) is missing from the DataFrame")
    if problems:
        raise SinkSchemaError(f"cannot write this DataFrame to shoal table {table.name!r}: " + "; ".join(problems))


def to_spark_arrow(table: pa.Table, definition: TableDefinition) -> pa.Table:
    """A scan result (the table's Arrow schema) in the Arrow types Spark expects for spark_schema()."""
    arrays = []
    fields = []
    for c in definition.columns:
        col = table.column(c.name)
        target = _READ_ARROW[c.type]
        if col.type != target:
            if c.type is ColumnType.UINT64:
                too_big = pc.any(pc.greater(col, pa.scalar(2**63 - 1, pa.uint64()))).as_py()
                if too_big:
                    raise ReaderError(
                        f"table {definition.name}: column {c.name!r} holds uint64 values above 2**63-1, "
                        "which Spark's LongType cannot represent"
                    )
            col = pc.cast(col, target)
        arrays.append(col)
        fields.append(pa.field(c.name, target, nullable=c.nullable))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def spark_arrow_type(ctype: ColumnType) -> pa.DataType:
    """The Arrow type Spark uses for the Spark type of a column of type ``ctype``."""
    return _READ_ARROW[ctype]


def spark_ddl_nullable(table: TableDefinition) -> str:
    """Like :func:`spark_ddl` with every column nullable (parsed input may lack any value)."""
    return ", ".join(f"`{c.name}` {_SPARK_NAME[c.type]}" for c in table.columns)


def spark_ddl_json(table: TableDefinition) -> str:
    """The DDL the ingest parses JSON with: :func:`spark_ddl_parsed`, with timestamp and binary
    columns read as their JSON text. Spark's own conversions are not shoal's: it reads an integer as
    seconds since 1970 (``shoal write``: milliseconds) and a string as base64 for a binary column
    (``shoal write``: its UTF-8 bytes). The ingest converts that text the way ``shoal write`` does
    (:func:`spark_jobs.deadletter.json_times`, then the producer's validation)."""

    def spark_type(ctype: ColumnType) -> str:
        if ctype in (ColumnType.TIMESTAMP_MS, ColumnType.BINARY):
            return "string"
        return "double" if ctype is ColumnType.FLOAT32 else _SPARK_NAME[ctype]

    return ", ".join(f"`{c.name}` {spark_type(c.type)}" for c in table.columns)


def spark_ddl_parsed(table: TableDefinition) -> str:
    """The DDL the ingest parses JSON with: :func:`spark_ddl_nullable` with float32 columns read as
    double. Spark's JSON parser turns a number beyond a float's range into an infinity (``1e300`` is
    ``inf``); read as a double it reaches the producer's range check, which refuses it."""
    return ", ".join(
        f"`{c.name}` {'double' if c.type is ColumnType.FLOAT32 else _SPARK_NAME[c.type]}" for c in table.columns
    )
