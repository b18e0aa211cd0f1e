"""The leader accepts deletes that carry only keys, and refuses writes that break NOT NULL."""

from __future__ import annotations

import pyarrow as pa

from metadata.table import Column, ColumnType, TableDefinition
from shoal.wire.arrow_ipc import encode_batch
from shoal.wire.ingest import DELETED_COLUMN, TIMESTAMP_MS_RANGE
from storage_node.replica.validate import IngestValidator, Rejected

TABLE = TableDefinition(
    "t",
    (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING, False), Column("n", ColumnType.INT64)),
    ("k",),
    "k",
    1,
)


def _batch(k: list[int], v: list[str | None], deleted: list[bool]) -> bytes:
    schema = pa.schema(
        [
            pa.field("k", pa.uint64(), False),
            pa.field("v", pa.string()),
            pa.field("n", pa.int64()),
            pa.field(DELETED_COLUMN, pa.bool_(), False),
        ]
    )
    return encode_batch(pa.table([k, v, [None] * len(k), deleted], schema=schema))


def test_delete_with_null_not_null_column_is_accepted() -> None:
    rows = IngestValidator(TABLE, None, 1 << 20).validate(_batch([1, 2], [None, None], [True, True]))
    assert isinstance(rows, pa.Table) and rows.num_rows == 2


def test_write_with_null_in_not_null_column_is_refused() -> None:
    result = IngestValidator(TABLE, None, 1 << 20).validate(_batch([1, 2], ["a", None], [False, False]))
    assert isinstance(result, Rejected) and result.reason == "schema_mismatch" and "'v'" in result.detail


def test_mixed_batch_checks_only_the_writes() -> None:
    rows = IngestValidator(TABLE, None, 1 << 20).validate(_batch([1, 2], ["a", None], [False, True]))
    assert isinstance(rows, pa.Table) and rows.num_rows == 2


def test_a_timestamp_outside_the_years_1_to_9999_is_refused_as_the_producer_refuses_it() -> None:
    """Stored, it would make every scan of the partition fail to convert (an audit's proof): a
    writer other than the shoal producer can send it."""
    table = TableDefinition(
        "t", (Column("k", ColumnType.UINT64, False), Column("at", ColumnType.TIMESTAMP_MS)), ("k",), "k", 1
    )
    schema = pa.schema(
        [
            pa.field("k", pa.uint64(), False),
            pa.field("at", pa.timestamp("ms", tz="UTC")),
            pa.field(DELETED_COLUMN, pa.bool_(), False),
        ]
    )
    low, high = TIMESTAMP_MS_RANGE
    validator = IngestValidator(table, None, 1 << 20)
    for millis in (low - 1, high + 1):
        batch = encode_batch(
            pa.table(
                [[1, 2], pa.array([0, millis], pa.int64()).cast(schema.field("at").type), [False, False]], schema=schema
            )
        )
        result = validator.validate(batch)
        assert isinstance(result, Rejected) and result.reason == "schema_mismatch" and "'at'" in result.detail
    batch = encode_batch(
        pa.table(
            [[1, 2, 3], pa.array([low, high, None], pa.int64()).cast(schema.field("at").type), [False] * 3],
            schema=schema,
        )
    )
    rows = validator.validate(batch)
    assert isinstance(rows, pa.Table) and rows.num_rows == 3
