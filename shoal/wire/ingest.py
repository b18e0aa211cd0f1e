"""The ingest message contract between producers (and the Spark sink) and a partition's leader.

One Kafka message on ``<prefix>.ingest.<partition_id>`` carries one Arrow IPC stream
(``shoal.wire.arrow_ipc.encode_batch``) of many rows: the table's columns in the table's Arrow
schema order, plus the system column ``_shoal_deleted`` (bool, not null). A delete is a row with
``_shoal_deleted = true`` whose primary key columns are set and whose other columns are null.
GTID columns are never sent by producers: the leader stamps them.

Headers: ``shoal.table`` (table name, UTF-8). The message key is unused (None).
"""

from __future__ import annotations

import pyarrow as pa

DELETED_COLUMN = "_shoal_deleted"
TABLE_HEADER = "shoal.table"


def ingest_schema(table_schema: pa.Schema) -> pa.Schema:
    """The Arrow schema of an ingest batch for a table whose rows have ``table_schema``."""
    return table_schema.append(pa.field(DELETED_COLUMN, pa.bool_(), nullable=False))
