"""The memtable of a partition replica: versioned Arrow tables not yet in a segment.

Each append is one WAL record's rows, already stamped with their GTIDs (``versioned.stamp``), plus
the WAL offset the record sits at. Reads merge with :func:`~shoal.segments.lww_merge`
(newest GTID per key), so nothing is merged on the write path. A memtable remembers the WAL
offsets it covers, ``[start_offset, end_offset)`` of its own channel, which become the covered
range of the segment it is flushed into. Not thread-safe: the replica serialises access.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from shoal.segments import lww_merge


@dataclass
class Memtable:
    start_offset: int
    """First WAL offset this memtable covers (the end of what segments cover)."""
    tables: list[pa.Table] = field(default_factory=list)
    end_offset: int | None = None
    """One past the last WAL record appended; None while empty."""
    rows: int = 0
    nbytes: int = 0
    created_monotonic: float = field(default_factory=time.monotonic)
    first_append_monotonic: float | None = None

    def append(self, table: pa.Table, wal_offset: int) -> None:
        """Add one WAL record's versioned rows, which sit at ``wal_offset`` of the channel."""
        if wal_offset < self.start_offset or (self.end_offset is not None and wal_offset < self.end_offset):
            raise ValueError(f"WAL offset {wal_offset} is not after {self.end_offset or self.start_offset}")
        if self.first_append_monotonic is None:
            self.first_append_monotonic = time.monotonic()
        if table.num_rows:
            self.tables.append(table)
        self.rows += table.num_rows
        self.nbytes += table.nbytes
        self.end_offset = wal_offset + 1

    @property
    def empty(self) -> bool:
        return self.end_offset is None

    def age_s(self) -> float:
        if self.first_append_monotonic is None:
            return 0.0
        return time.monotonic() - self.first_append_monotonic

    def merged(self, key_columns: Sequence[str]) -> pa.Table | None:
        """Newest version per key (tombstones kept), or None if there are no rows."""
        if not self.tables:
            return None
        return lww_merge(self.tables, key_columns)
