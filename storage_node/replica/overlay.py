"""A follower's in-memory WAL overlay: the leader's WAL records not yet in a durable segment.

DESIGN.md section 6 ("A follower may also tail the WAL channel into an in-memory overlay for fresh
reads; rows covered by a fast-forwarded segment leave the overlay"); LinDB (seed 001): the
follower's Consume (Replica) index is how far it has read the channel, its Ack index is what its
durable segments cover. The overlay holds one versioned Arrow table per WAL record (rows stamped
with their GTIDs), keyed by (channel, offset). Thread-safe.

Rows are decoded when first read, not when tailed (:class:`PendingRows`): the follower checks each
record's hash chain and GTID order as it tails, but most records are covered by a fast-forwarded
segment and leave the overlay before any scan wants their rows, so decoding them on arrival (Arrow
IPC decompression, schema check, GTID stamping) would be CPU spent for nothing. A scan decodes the
records still pending once (:meth:`WalOverlay.decode_pending`, outside the replica's lock) and
keeps the tables. A record that chains but whose rows do not decode is reported by its decoder
(which returns None) and reads as empty, as it did when it was decoded on arrival.

The overlay may hold records of more than one channel: when leadership moves, the old leader's
records stay readable until the new leader's segment that adopted them arrives (DESIGN.md section 7,
adoption), so a follower's reads never go back in time across a handover. The old leader itself,
now a follower, keeps its memtable's rows here the same way, as records of its own channel
(:meth:`storage_node.replica.PartitionReplica.retire_memtable`). The follower drops them
(:meth:`WalOverlay.drop_channels`) when that segment covers them or, failing that, after a grace
period at the end of the new leader's segments channel (``storage_node.roles.follower``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pyarrow as pa

from shoal.segments import WalRange
from shoal.segments.coverage import Channel, normalize


@dataclass(frozen=True)
class PendingRows:
    """A WAL record's rows, not decoded yet: ``decode()`` returns them versioned (GTID columns), or
    None when they do not decode (the decoder reports that)."""

    row_count: int
    decode: Callable[[], pa.Table | None]


@dataclass
class _Entry:
    channel: Channel
    offset: int
    table: pa.Table | None
    pending: PendingRows | None

    @property
    def row_count(self) -> int:
        if self.pending is not None:
            return self.pending.row_count
        return 0 if self.table is None else self.table.num_rows


class WalOverlay:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[_Entry] = []

    def add(
        self, channel: Channel, offset: int, rows: pa.Table | PendingRows, covered: Iterable[WalRange] = ()
    ) -> bool:
        """Add one WAL record's versioned rows (or their decoder) unless ``covered`` already holds its offset."""
        if _covered(normalize(covered), channel, offset):
            return False
        if isinstance(rows, PendingRows):
            entry = _Entry(channel, offset, None, rows)
        else:
            entry = _Entry(channel, offset, rows, None)
        with self._lock:
            self._entries.append(entry)
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

    def drop_channels(self, keep: Callable[[Channel], bool]) -> tuple[int, int]:
        """Remove the records of every channel ``keep`` refuses; returns (records, rows) removed."""
        kept: list[_Entry] = []
        gone: list[_Entry] = []
        with self._lock:
            for e in self._entries:
                (kept if keep(e.channel) else gone).append(e)
            self._entries = kept
        return len(gone), sum(e.row_count for e in gone)

    def offsets(self, channel: Channel) -> set[int]:
        """The offsets of ``channel``'s records the overlay holds."""
        with self._lock:
            return {e.offset for e in self._entries if e.channel == channel}

    def channels(self) -> set[Channel]:
        """The channels the overlay holds records of."""
        with self._lock:
            return {e.channel for e in self._entries}

    def decode_pending(self) -> int:
        """Decode every record whose rows were not read yet (outside the lock); returns how many."""
        with self._lock:
            todo = [e for e in self._entries if e.pending is not None]
        for entry in todo:
            pending = entry.pending
            if pending is None:  # another reader decoded it meanwhile
                continue
            table = pending.decode()
            with self._lock:
                if entry.pending is pending:
                    entry.table, entry.pending = table, None
        return len(todo)

    def tables(self) -> list[pa.Table]:
        """The versioned rows of every record; decodes what is still pending (call
        :meth:`decode_pending` first when holding another lock, so that little is left to do here)."""
        self.decode_pending()
        with self._lock:
            return [e.table for e in self._entries if e.table is not None and e.table.num_rows]

    @property
    def records(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def pending(self) -> int:
        """Records whose rows no read has decoded yet."""
        with self._lock:
            return sum(1 for e in self._entries if e.pending is not None)

    @property
    def rows(self) -> int:
        with self._lock:
            return sum(e.row_count for e in self._entries)


def _covered(ranges: tuple[WalRange, ...], channel: Channel, offset: int) -> bool:
    return any(r.channel == channel and r.start_offset <= offset < r.end_offset for r in ranges)
