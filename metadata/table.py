"""Table definitions: name, columns (Arrow and Avro views), primary key, partition key, keyspace.

A definition is validated when it is built: a bad name, an unknown column type, a missing or
nullable or floating point primary key column or a partition key outside the primary key is a clear
:class:`~shoal.errors.SchemaError` (or :class:`~shoal.errors.InvalidIdError` for names).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from metadata.keyspace import Keyspace
from shoal.errors import InvalidIdError, SchemaError
from shoal.ids import validate_table_name

_COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_COLUMNS = 1024
MAX_REPLICATION_FACTOR = 16


class ColumnType(enum.Enum):
    """The column types a table may use, each with one Arrow and one Avro representation."""

    BOOL = "bool"
    INT32 = "int32"
    INT64 = "int64"
    UINT64 = "uint64"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    STRING = "string"
    BINARY = "binary"
    TIMESTAMP_MS = "timestamp_ms"

    def arrow(self) -> pa.DataType:
        return _ARROW[self]

    def avro(self) -> Any:
        return _AVRO[self]

    @classmethod
    def parse(cls, text: object) -> ColumnType:
        if isinstance(text, str):
            try:
                return cls(text.strip().lower())
            except ValueError:
                pass
        allowed = ", ".join(t.value for t in cls)
        raise SchemaError(f"unknown column type {text!r:.60}; allowed: {allowed}")

    @classmethod
    def from_arrow(cls, dtype: pa.DataType) -> ColumnType:
        for ctype, arrow_type in _ARROW.items():
            if dtype == arrow_type:
                return ctype
        if pa.types.is_large_string(dtype):
            return cls.STRING
        if pa.types.is_large_binary(dtype):
            return cls.BINARY
        raise SchemaError(f"Arrow type {dtype} is not supported as a shoal column type")


_ARROW: dict[ColumnType, pa.DataType] = {
    ColumnType.BOOL: pa.bool_(),
    ColumnType.INT32: pa.int32(),
    ColumnType.INT64: pa.int64(),
    ColumnType.UINT64: pa.uint64(),
    ColumnType.FLOAT32: pa.float32(),
    ColumnType.FLOAT64: pa.float64(),
    ColumnType.STRING: pa.string(),
    ColumnType.BINARY: pa.binary(),
    ColumnType.TIMESTAMP_MS: pa.timestamp("ms", tz="UTC"),
}

_AVRO: dict[ColumnType, Any] = {
    ColumnType.BOOL: "boolean",
    ColumnType.INT32: "int",
    ColumnType.INT64: "long",
    # Avro has no unsigned type: a uint64 travels as 8 big-endian bytes.
    ColumnType.UINT64: {"type": "fixed", "name": "uint64_be", "size": 8},
    ColumnType.FLOAT32: "float",
    ColumnType.FLOAT64: "double",
    ColumnType.STRING: "string",
    ColumnType.BINARY: "bytes",
    ColumnType.TIMESTAMP_MS: {"type": "long", "logicalType": "timestamp-millis"},
}

_FLOAT_TYPES = frozenset({ColumnType.FLOAT32, ColumnType.FLOAT64})
"""Types a primary key column may not have (DESIGN.md section 5: a key picks one version per row)."""

_KEYSPACE_OF: dict[ColumnType, Keyspace] = {ColumnType.UINT64: Keyspace.UINT64, ColumnType.STRING: Keyspace.STRING}


RESERVED_COLUMN_PREFIX = "_shoal_"
"""Column names shoal adds to rows (GTID, delete flag, Spark's ingest bookkeeping) start so; a table's may not."""


def validate_column_name(value: object) -> str:
    if not isinstance(value, str) or not _COLUMN_NAME.fullmatch(value):
        raise InvalidIdError(
            f"column name must match {_COLUMN_NAME.pattern} (a letter or '_', then letters, digits or '_'), "
            f"got {value!r:.80}"
        )
    if value.lower().startswith(RESERVED_COLUMN_PREFIX):
        raise InvalidIdError(
            f"column name {value!r} starts with {RESERVED_COLUMN_PREFIX!r}, reserved for shoal's own columns"
        )
    return value


@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType
    nullable: bool = True

    def __post_init__(self) -> None:
        validate_column_name(self.name)
        if not isinstance(self.type, ColumnType):
            object.__setattr__(self, "type", ColumnType.parse(self.type))
        if not isinstance(self.nullable, bool):
            raise SchemaError(f"column {self.name}: nullable must be a bool, got {self.nullable!r:.40}")

    @classmethod
    def parse(cls, spec: str) -> Column:
        """``name:type`` or ``name:type:not_null`` (the CLI form)."""
        parts = spec.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2].strip().lower() not in ("not_null", "null")):
            raise SchemaError(f"column spec must be NAME:TYPE or NAME:TYPE:not_null, got {spec!r:.80}")
        nullable = not (len(parts) == 3 and parts[2].strip().lower() == "not_null")
        return cls(parts[0].strip(), ColumnType.parse(parts[1]), nullable)


@dataclass(frozen=True)
class TableDefinition:
    """An immutable, validated table definition (carried in every METADATA file of the table)."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    partition_key: str
    replication_factor: int = 3
    keyspace: Keyspace = field(init=False)

    def __post_init__(self) -> None:
        validate_table_name(self.name)
        object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "primary_key", tuple(self.primary_key))
        if not self.columns:
            raise SchemaError(f"table {self.name}: needs at least one column")
        if len(self.columns) > MAX_COLUMNS:
            raise SchemaError(f"table {self.name}: {len(self.columns)} columns, at most {MAX_COLUMNS}")
        by_name: dict[str, Column] = {}
        for col in self.columns:
            if not isinstance(col, Column):
                raise SchemaError(f"table {self.name}: columns must be Column objects, got {type(col).__name__}")
            if col.name.lower() in {n.lower() for n in by_name}:
                raise SchemaError(f"table {self.name}: duplicate column {col.name!r} (names are case-insensitive)")
            by_name[col.name] = col
        if not self.primary_key:
            raise SchemaError(f"table {self.name}: needs a primary key (one or more columns)")
        if len(set(self.primary_key)) != len(self.primary_key):
            raise SchemaError(f"table {self.name}: primary key lists a column twice: {list(self.primary_key)}")
        for name in self.primary_key:
            if name not in by_name:
                raise SchemaError(f"table {self.name}: primary key column {name!r:.80} is not a column")
            if by_name[name].nullable:
                raise SchemaError(f"table {self.name}: primary key column {name!r} must be not null")
            if by_name[name].type in _FLOAT_TYPES:
                raise SchemaError(
                    f"table {self.name}: primary key column {name!r} is {by_name[name].type.value}; floating point "
                    "keys are not allowed (NaN is not equal to itself, so a merge could never pick one version "
                    "of such a row); use an integer, string or binary column"
                )
        if self.partition_key not in by_name:
            raise SchemaError(f"table {self.name}: partition key {self.partition_key!r:.80} is not a column")
        if self.partition_key not in self.primary_key:
            raise SchemaError(
                f"table {self.name}: partition key {self.partition_key!r} must be one of the primary key columns "
                "(so that every version of a row lives in one partition)"
            )
        ptype = by_name[self.partition_key].type
        if ptype not in _KEYSPACE_OF:
            raise SchemaError(
                f"table {self.name}: partition key {self.partition_key!r} has type {ptype.value}; "
                "it must be uint64 or string (the two keyspaces)"
            )
        object.__setattr__(self, "keyspace", _KEYSPACE_OF[ptype])
        if (
            isinstance(self.replication_factor, bool)
            or not isinstance(self.replication_factor, int)
            or not 1 <= self.replication_factor <= MAX_REPLICATION_FACTOR
        ):
            raise SchemaError(
                f"table {self.name}: replication factor must be an int in [1, {MAX_REPLICATION_FACTOR}], "
                f"got {self.replication_factor!r:.40}"
            )

    def column(self, name: str) -> Column:
        for col in self.columns:
            if col.name == name:
                return col
        raise SchemaError(f"table {self.name} has no column {name!r:.80}")

    def arrow_schema(self) -> pa.Schema:
        return pa.schema(
            [pa.field(c.name, c.type.arrow(), nullable=c.nullable) for c in self.columns],
            metadata={b"shoal.table": self.name.encode(), b"shoal.primary_key": ",".join(self.primary_key).encode()},
        )

    def avro_schema(self) -> dict[str, Any]:
        fields = []
        for c in self.columns:
            avro_type = c.type.avro()
            if isinstance(avro_type, dict) and avro_type.get("type") == "fixed":
                avro_type = {**avro_type, "name": f"{c.name}_{avro_type['name']}"}
            fields.append({"name": c.name, "type": ["null", avro_type] if c.nullable else avro_type})
        return {"type": "record", "name": self.name, "namespace": "shoal.tables", "fields": fields}

    @classmethod
    def from_arrow(
        cls,
        name: str,
        schema: pa.Schema,
        primary_key: Sequence[str],
        partition_key: str,
        replication_factor: int = 3,
    ) -> TableDefinition:
        if not isinstance(schema, pa.Schema):
            raise SchemaError(f"expected a pyarrow.Schema, got {type(schema).__name__}")
        columns = tuple(Column(f.name, ColumnType.from_arrow(f.type), f.nullable) for f in schema)
        return cls(name, columns, tuple(primary_key), partition_key, replication_factor)

    def to_record(self) -> dict[str, Any]:
        """The Avro ``TableDefinition`` record of metadata_file.avsc."""
        return {
            "name": self.name,
            "columns": [{"name": c.name, "type": c.type.value, "nullable": c.nullable} for c in self.columns],
            "primary_key": list(self.primary_key),
            "partition_key": self.partition_key,
            "keyspace": self.keyspace.value,
            "replication_factor": self.replication_factor,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> TableDefinition:
        try:
            columns = tuple(
                Column(c["name"], ColumnType.parse(c["type"]), bool(c["nullable"])) for c in record["columns"]
            )
            table = cls(
                record["name"],
                columns,
                tuple(record["primary_key"]),
                record["partition_key"],
                record["replication_factor"],
            )
        except (KeyError, TypeError) as exc:
            raise SchemaError(f"table definition record is incomplete: {exc!r}") from exc
        if record.get("keyspace") not in (None, table.keyspace.value):
            raise SchemaError(f"table {table.name}: keyspace {record.get('keyspace')!r} does not match its key type")
        return table

    def to_json(self) -> dict[str, Any]:
        return self.to_record()

    @classmethod
    def from_json(cls, data: object) -> TableDefinition:
        """Build from the JSON form (``to_json``); ``keyspace`` may be omitted, and ``partition_key``
        is the first primary-key column when omitted (as ``table create --column`` does)."""
        if not isinstance(data, Mapping):
            raise SchemaError(f"a table definition must be a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - _TABLE_KEYS, key=str)
        if unknown:  # a typo ("replication-factor") would silently give the default
            raise SchemaError(f"unknown key {unknown[0]!r:.60} in the table definition; allowed: {sorted(_TABLE_KEYS)}")
        columns = data.get("columns")
        if not isinstance(columns, list) or not all(isinstance(c, Mapping) for c in columns):
            raise SchemaError("a table definition needs 'columns': a list of {name, type, nullable} objects")
        for c in columns:
            extra = sorted(set(c) - _COLUMN_KEYS, key=str)
            if extra:
                raise SchemaError(
                    f"unknown key {extra[0]!r:.60} in column {c.get('name')!r:.60}; allowed: {sorted(_COLUMN_KEYS)}"
                )
            if not isinstance(c.get("nullable", True), bool):
                raise SchemaError(
                    f"column {c.get('name')!r:.60}: 'nullable' must be true or false, got {c.get('nullable')!r:.60}"
                )
        primary_key = _str_list(data.get("primary_key"), "primary_key")
        record = {
            "name": data.get("name"),
            "columns": [
                {"name": c.get("name"), "type": c.get("type"), "nullable": c.get("nullable", True)} for c in columns
            ],
            "primary_key": primary_key,
            "partition_key": data.get("partition_key", primary_key[0] if primary_key else None),
            "keyspace": data.get("keyspace"),
            "replication_factor": data.get("replication_factor", 3),
        }
        return cls.from_record(record)


_TABLE_KEYS = frozenset({"name", "columns", "primary_key", "partition_key", "keyspace", "replication_factor"})
_COLUMN_KEYS = frozenset({"name", "type", "nullable"})


def _str_list(value: object, what: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SchemaError(f"{what} must be a list of column names, got {value!r:.80}")
    return list(value)


def columns_from_specs(specs: Iterable[str]) -> tuple[Column, ...]:
    return tuple(Column.parse(s) for s in specs)
