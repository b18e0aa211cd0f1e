"""Re-validation of ingest messages by the leader (DESIGN.md section 4.2).

Anything can write to an ingest topic, so the leader trusts nothing: a message must be one
complete Arrow IPC stream of at most ``max_bytes`` whose schema is exactly the table's ingest
schema (:func:`shoal.wire.ingest.ingest_schema`), whose ``shoal.table`` header (if present) names
the table, and whose partition keys all lie in the partition's key range. Anything else is a
:class:`Rejected` with a reason for the deadletter topic. Columnar: the key-range check is two
vectorised comparisons.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from metadata.keyspace import KeyRange, Keyspace
from metadata.table import TableDefinition
from shoal.errors import SchemaError, WireFormatError
from shoal.wire.arrow_ipc import decode_batch
from shoal.wire.ingest import TABLE_HEADER, ingest_schema, not_null_violation, timestamp_range_violation


@dataclass(frozen=True)
class Rejected:
    reason: str
    """A short machine-readable code: undecodable, schema_mismatch, oversized, wrong_table,
    key_out_of_range (a partition key outside this partition's range: routed to the wrong one)."""
    detail: str


@dataclass(frozen=True)
class IngestValidator:
    table: TableDefinition
    key_range: KeyRange | None = None
    max_bytes: int = 16 * 1024 * 1024

    @property
    def schema(self) -> pa.Schema:
        return ingest_schema(self.table.arrow_schema(), self.table.primary_key)

    def validate(
        self, value: bytes | None, headers: Sequence[tuple[str, str | bytes | None]] | Any = None
    ) -> pa.Table | Rejected:
        """The conformed rows (table columns + ``_shoal_deleted``), or why they are refused."""
        for name, header in headers or ():
            if isinstance(header, str):
                header = header.encode()
            if name == TABLE_HEADER and header is not None and header != self.table.name.encode():
                return Rejected("wrong_table", f"header {TABLE_HEADER}={header[:200]!r}, this is {self.table.name}")
        if value is not None and len(value) > self.max_bytes:
            return Rejected("oversized", f"message of {len(value)} bytes exceeds {self.max_bytes}")
        try:
            rows = decode_batch(value, self.schema, max_bytes=self.max_bytes)
        except SchemaError as exc:
            return Rejected("schema_mismatch", str(exc))
        except WireFormatError as exc:
            return Rejected("undecodable", str(exc))
        problem = not_null_violation(rows, self.table.arrow_schema()) or timestamp_range_violation(
            rows, self.table.arrow_schema()
        )
        if problem is not None:
            return Rejected("schema_mismatch", problem)
        problem = self._out_of_range(rows)
        if problem is not None:
            return Rejected("key_out_of_range", problem)
        return rows

    def _out_of_range(self, rows: pa.Table) -> str | None:
        r = self.key_range
        if r is None or rows.num_rows == 0 or (not r.begin and not r.end):
            return None
        keyspace: Keyspace = self.table.keyspace
        col = rows.column(self.table.partition_key)
        if keyspace is Keyspace.STRING:
            col = pc.cast(col, pa.binary())
            begin: object = r.begin
            end: object = r.end
        else:
            begin = keyspace.decode(r.begin) if r.begin else None
            end = keyspace.decode(r.end) if r.end else None
        bad = None
        if r.begin:
            bad = pc.less(col, pa.scalar(begin, col.type))
        if r.end:
            above = pc.greater_equal(col, pa.scalar(end, col.type))
            bad = above if bad is None else pc.or_(bad, above)
        count = 0 if bad is None else pc.sum(bad).as_py() or 0
        if count:
            return f"{count} of {rows.num_rows} rows have a partition key outside {r.describe(keyspace)}"
        return None
