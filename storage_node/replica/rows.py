"""Ingest rows -> stored rows: the GTID columns a WAL record's rows carry in a replica (DESIGN.md section 4)."""

from __future__ import annotations

import pyarrow as pa

from shoal.segments.versioned import stamp
from shoal.wire.ingest import DELETED_COLUMN
from shoal.wire.records import Gtid


def versioned_rows(rows: pa.Table, gtid: Gtid) -> pa.Table:
    """Ingest rows (table columns + ``_shoal_deleted``) -> stored rows with their GTID columns."""
    idx = rows.schema.get_field_index(DELETED_COLUMN)
    deleted = rows.column(idx).combine_chunks()
    return stamp(rows.remove_column(idx), epoch=gtid.epoch, first_seq=gtid.seq, deleted=deleted)
