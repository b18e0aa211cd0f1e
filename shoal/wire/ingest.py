"""The ingest message contract between producers (and the Spark sink) and a partition's leader.

One Kafka message on ``<prefix>.ingest.<partition_id>`` carries one Arrow IPC stream
(``shoal.wire.arrow_ipc.encode_batch``) of many rows: the table's columns in the table's Arrow
schema order, plus the system column ``_shoal_deleted`` (bool, not null). A delete is a row with
``_shoal_deleted = true`` whose primary key columns are set and whose other columns are null.
GTID columns are never sent by producers: the leader stamps them.

On the wire only the primary key columns keep their NOT NULL: a delete has nulls everywhere else.
The table's other NOT NULL constraints hold for rows that are not deletes, and the leader checks
them (:func:`not_null_violation`).

Headers: ``shoal.table`` (table name, UTF-8) and ``shoal.producer`` (the sending shoal producer's
id, optional). The message key is unused (None).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

DELETED_COLUMN = "_shoal_deleted"
TABLE_HEADER = "shoal.table"
PRODUCER_HEADER = "shoal.producer"
"""The id of the shoal producer that sent an ingest message: a leader copies it onto the message's
deadletter record, so that the producer's ``sync()`` finds its refused messages (:mod:`producer.refusals`)."""
PRODUCER_ID_PATTERN = re.compile(r"[0-9a-f]{32}")


def ingest_schema(table_schema: pa.Schema, key_columns: Sequence[str] | None = None) -> pa.Schema:
    """The Arrow schema of an ingest batch for a table whose rows have ``table_schema``.

    With ``key_columns``, every other column is nullable on the wire (deletes carry only keys).
    """
    if key_columns is not None:
        keys = set(key_columns)
        table_schema = pa.schema(
            [f if f.name in keys else f.with_nullable(True) for f in table_schema], metadata=table_schema.metadata
        )
    return table_schema.append(pa.field(DELETED_COLUMN, pa.bool_(), nullable=False))


TIMESTAMP_MS_RANGE = (-62_135_596_800_000, 253_402_300_799_999)
"""The milliseconds from the epoch a timestamp column holds: the years 1 to 9999, which Python's
datetime, Spark's timestamps and Avro readers all represent (the producer refuses others, and so
does a leader: stored, one would make every scan of its partition fail to convert)."""


def timestamp_range_violation(rows: pa.Table, table_schema: pa.Schema) -> str | None:
    """Why a timestamp of ``rows`` lies outside :data:`TIMESTAMP_MS_RANGE`, or None."""
    low, high = TIMESTAMP_MS_RANGE
    for field in table_schema:
        if not pa.types.is_timestamp(field.type) or field.name not in rows.column_names:
            continue
        column = rows.column(field.name)
        if column.null_count == len(column):
            continue
        millis = pc.cast(pc.cast(column, pa.timestamp("ms", tz=field.type.tz)), pa.int64())
        bounds = pc.min_max(millis)
        for bound in (bounds["min"].as_py(), bounds["max"].as_py()):
            if not low <= bound <= high:
                return f"column {field.name!r} holds {bound} ms from the epoch, outside the years 1-9999"
    return None


def not_null_violation(rows: pa.Table, table_schema: pa.Schema) -> str | None:
    """Why ``rows`` break a NOT NULL of ``table_schema`` in a row that is not a delete, or None."""
    writes = pc.invert(rows.column(DELETED_COLUMN))
    for field in table_schema:
        if field.nullable or field.name not in rows.column_names:
            continue
        bad = pc.sum(pc.and_(pc.is_null(rows.column(field.name)), writes)).as_py() or 0
        if bad:
            return f"column {field.name!r} is NOT NULL but {bad} written (non-delete) row(s) have null"
    return None
