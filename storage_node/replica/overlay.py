"""A follower's in-memory WAL overlay: the leader's WAL records not yet in a durable segment.

DESIGN.md section 6 ("A follower may also tail the WAL channel into an in-memory overlay for fresh
reads; rows covered by a fast-forwarded segment leave the overlay"); LinDB (seed 001): the
follower's Consume (Replica) index is how far it has read the channel, its Ack index is what its
durable segments cover. The overlay holds one versioned Arrow table per WAL record (rows stamped
with their GTIDs), keyed by (channel, offset). Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from shoal.segments import WalRange
from shoal.segments.coverage import Channel, normalize


@dataclass(frozen=True)
class _Entry:
    channel: Channel
    offset: int
    table: pa.Table


class WalOverlay:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[_Entry] = []

    def add(self, channel: Channel, offset: int, table: pa.Table, covered: Iterable[WalRange] = ()) -> bool:
        """Add one WAL record's versioned rows unless ``covered`` already holds its offset."""
        if _covered(normalize(covered), channel, offset):
            return False
        with self._lock:
            self._entries.append(_Entry(channel, offset, table))
        return True

    def drop_covered(self, coverage: Iterable[WalRange]) -> int:
        """Remove records whose offset lies in ``coverage``; returns how many left."""
        ranges = normalize(coverage)
        with self._lock:
            keep = [e for e in self._entries if not _covered(ranges, e.channel, e.offset)]
            dropped = len(self._entries) - len(keep)
            self._entries = keep
        return dropped

    def clear(self) -> None:
        with self._lock:
            self._entries = []

    def tables(self) -> list[pa.Table]:
        with self._lock:
            return [e.table for e in self._entries if e.table.num_rows]

    @property
    def records(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def rows(self) -> int:
        with self._lock:
            return sum(e.table.num_rows for e in self._entries)


def _covered(ranges: tuple[WalRange, ...], channel: Channel, offset: int) -> bool:
    return any(r.channel == channel and r.start_offset <= offset < r.end_offset for r in ranges)
