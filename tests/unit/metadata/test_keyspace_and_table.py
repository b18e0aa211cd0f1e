from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from metadata.errors import InvalidKeyError
from metadata.keyspace import UINT64_MAX, UNBOUNDED, KeyRange, Keyspace
from metadata.table import Column, ColumnType, TableDefinition
from shoal.errors import InvalidIdError, SchemaError


def test_uint64_encoding_preserves_order_and_bounds() -> None:
    ks = Keyspace.UINT64
    values = [0, 1, 255, 256, 2**32, UINT64_MAX]
    enc = [ks.encode(v) for v in values]
    assert enc == sorted(enc)
    assert [ks.decode(e) for e in enc] == values
    for bad in (-1, UINT64_MAX + 1, True, 1.5, "7"):
        with pytest.raises(InvalidKeyError):
            ks.encode(bad)
    with pytest.raises(InvalidKeyError):
        ks.decode(b"\x00" * 7)
    assert ks.parse_text(" 42 ") == ks.encode(42)
    for bad_text in ("-1", "abc", "", "1e3", "١٢"):
        with pytest.raises(InvalidKeyError):
            ks.parse_text(bad_text)


def test_string_encoding_orders_like_python_strings() -> None:
    ks = Keyspace.STRING
    words = ["", "a", "ab", "b", "z", "\u00e9", "\U0001f600"]
    assert sorted(words) == sorted(words, key=ks.encode)
    with pytest.raises(InvalidKeyError):
        ks.encode("\ud800")
    with pytest.raises(InvalidKeyError):
        ks.decode(b"\xff\xfe")
    with pytest.raises(InvalidKeyError):
        ks.encode(5)


def test_empty_begin_is_lowest_and_empty_end_is_highest() -> None:
    full = KeyRange(UNBOUNDED, UNBOUNDED)
    assert full.contains(Keyspace.UINT64.encode(0))
    assert full.contains(Keyspace.UINT64.encode(UINT64_MAX))
    assert full.contains(Keyspace.STRING.encode(""))
    low = KeyRange(UNBOUNDED, Keyspace.UINT64.encode(10))
    high = KeyRange(Keyspace.UINT64.encode(10), UNBOUNDED)
    assert low.contains(Keyspace.UINT64.encode(9)) and not low.contains(Keyspace.UINT64.encode(10))
    assert high.contains(Keyspace.UINT64.encode(10)) and high.contains(Keyspace.UINT64.encode(UINT64_MAX))
    assert not full.strictly_inside(UNBOUNDED)
    assert low.intersection(high) is None
    assert full.intersection(low) == low
    with pytest.raises(InvalidKeyError):
        KeyRange(b"b", b"a")
    assert Keyspace.UINT64.format_key(UNBOUNDED) == "-inf"
    assert Keyspace.UINT64.format_key(UNBOUNDED, end=True) == "+inf"


def _cols() -> tuple[Column, ...]:
    return (Column("id", ColumnType.UINT64, False), Column("name", ColumnType.STRING))


def test_table_definition_valid_and_views() -> None:
    t = TableDefinition("users", _cols(), ("id",), "id", 3)
    assert t.keyspace is Keyspace.UINT64
    schema = t.arrow_schema()
    assert schema.field("id").type == pa.uint64() and not schema.field("id").nullable
    assert t.avro_schema()["fields"][1]["type"] == ["null", "string"]
    assert TableDefinition.from_record(t.to_record()) == t
    assert TableDefinition.from_json(t.to_json()) == t
    again = TableDefinition.from_arrow("users", schema, ["id"], "id", 3)
    assert again == t
    s = TableDefinition("s", (Column("k", ColumnType.STRING, False),), ("k",), "k", 1)
    assert s.keyspace is Keyspace.STRING


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"name": "1bad"}, InvalidIdError),
        ({"name": "a/../b"}, InvalidIdError),
        ({"columns": ()}, SchemaError),
        ({"primary_key": ()}, SchemaError),
        ({"primary_key": ("nope",)}, SchemaError),
        ({"primary_key": ("name",), "partition_key": "name"}, SchemaError),  # nullable pk
        ({"partition_key": "name"}, SchemaError),  # not in pk
        # a float key column: NaN != NaN, so no merge could pick one version of such a row
        (
            {"columns": (*_cols(), Column("f", ColumnType.FLOAT64, False)), "primary_key": ("id", "f")},
            SchemaError,
        ),
        (
            {"columns": (*_cols(), Column("f", ColumnType.FLOAT32, False)), "primary_key": ("f", "id")},
            SchemaError,
        ),
        ({"replication_factor": 0}, SchemaError),
        ({"replication_factor": 17}, SchemaError),
        ({"replication_factor": True}, SchemaError),
        ({"columns": (Column("id", ColumnType.UINT64, False), Column("ID", ColumnType.STRING))}, SchemaError),
    ],
)
def test_bad_table_definitions_are_clear_errors(kwargs: dict, error: type[Exception]) -> None:
    base: dict[str, Any] = {
        "name": "users",
        "columns": _cols(),
        "primary_key": ("id",),
        "partition_key": "id",
        "replication_factor": 3,
    }
    base.update(kwargs)
    with pytest.raises(error):
        TableDefinition(**base)


def test_bad_columns() -> None:
    with pytest.raises(InvalidIdError):
        Column("has space", ColumnType.INT64)
    for reserved in ("_shoal_deleted", "_shoal_epoch", "_SHOAL_x"):  # shoal's own columns: no clash, no confusion
        with pytest.raises(InvalidIdError, match="reserved"):
            Column(reserved, ColumnType.INT64)
    with pytest.raises(SchemaError):
        Column.parse("x:decimal")
    with pytest.raises(SchemaError):
        Column.parse("justname")
    assert Column.parse("x:INT64:not_null") == Column("x", ColumnType.INT64, False)
    # partition key of a type without a keyspace
    with pytest.raises(SchemaError, match="uint64 or string"):
        TableDefinition("t", (Column("k", ColumnType.INT64, False),), ("k",), "k", 1)
    with pytest.raises(SchemaError):
        TableDefinition.from_arrow("t", pa.schema([("k", pa.list_(pa.int8()))]), ["k"], "k")
    with pytest.raises(SchemaError):
        TableDefinition.from_json(["not", "an", "object"])


def test_a_table_definition_json_is_read_strictly() -> None:
    """A typo'd key silently gave its default ("replication-factor": 1 made RF 3), and "nullable":
    "false" (a string, so true) made a column nullable."""
    good = {
        "name": "t",
        "columns": [{"name": "k", "type": "uint64", "nullable": False}],
        "primary_key": ["k"],
        "partition_key": "k",
    }
    assert TableDefinition.from_json(good).replication_factor == 3
    with pytest.raises(SchemaError, match="unknown key 'replication-factor'"):
        TableDefinition.from_json({**good, "replication-factor": 1})
    with pytest.raises(SchemaError, match="unknown key 'nulable' in column 'k'"):
        TableDefinition.from_json({**good, "columns": [{"name": "k", "type": "uint64", "nulable": False}]})
    with pytest.raises(SchemaError, match="'nullable' must be true or false, got 'false'"):
        TableDefinition.from_json({**good, "columns": [{"name": "k", "type": "uint64", "nullable": "false"}]})


def test_a_schema_file_without_partition_key_takes_the_first_primary_key_column() -> None:
    """As ``table create --column`` does; it said "partition key None is not a column"."""
    from metadata.table import TableDefinition

    data = {
        "name": "t",
        "columns": [
            {"name": "k", "type": "string", "nullable": False},
            {"name": "n", "type": "uint64", "nullable": False},
        ],
        "primary_key": ["k", "n"],
    }
    assert TableDefinition.from_json(data).partition_key == "k"
    assert TableDefinition.from_json({**data, "partition_key": "n"}).partition_key == "n"
