"""The local segment list of one partition replica, transactional, in SQLite.

Source: EventQL segment based replication (seed 000), section 3: per partition, a list of segment
entries (segment_id, base_segment_id, included ids, is_major) and a root segment id; a new entry
and the new root are one step. DESIGN.md section 4.4: the list lives in a small transactional store
so a crash leaves it consistent with the files.

One database file per (partition, placement). Every change is one ``BEGIN IMMEDIATE`` transaction
that re-reads the list, applies the pure chain operation (chain.py, which decides whether the
change is allowed) and writes the difference (new entry, removed entries, root) before COMMIT.
Journal mode WAL with ``synchronous=FULL``: a committed change survives power loss, an uncommitted
one is invisible after a crash. The root is a foreign key to the entries, so it can never dangle.

Order with the files (the caller's, see recovery.py): the segment file is durable before its entry
is committed; an entry is removed before its file is unlinked. So every entry has a file, and a
crash leaves at most orphan files, which :func:`shoal.segments.recovery.reconcile` deletes.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from shoal.ids import validate_partition_id, validate_placement_id
from shoal.segments.chain import SegmentChain, SegmentEntry
from shoal.segments.compaction import commit_compaction
from shoal.segments.coverage import WalRange
from shoal.segments.errors import (
    ChainError,
    InvalidSegmentEntryError,
    SegmentListCorruptError,
    SegmentListError,
)

SCHEMA_VERSION = 1
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS segments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    segment_id TEXT NOT NULL UNIQUE CHECK (length(segment_id) = 32),
    base_segment_id TEXT CHECK (base_segment_id IS NULL OR length(base_segment_id) = 32),
    included_segment_ids TEXT NOT NULL,
    is_major INTEGER NOT NULL CHECK (is_major IN (0, 1)),
    placement_id INTEGER NOT NULL CHECK (placement_id > 0),
    epoch INTEGER NOT NULL CHECK (epoch >= 0),
    covered TEXT NOT NULL,
    sha256 TEXT NOT NULL CHECK (length(sha256) = 64),
    row_count INTEGER NOT NULL CHECK (row_count >= 0),
    size_bytes INTEGER NOT NULL CHECK (size_bytes >= 0),
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS replica (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    schema_version INTEGER NOT NULL,
    partition_id TEXT NOT NULL,
    placement_id INTEGER NOT NULL,
    root_segment_id TEXT REFERENCES segments (segment_id)
);
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentRecord:
    """A segment entry plus what the node knows about its file."""

    entry: SegmentEntry
    sha256: str
    row_count: int
    size_bytes: int
    created_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if not isinstance(self.entry, SegmentEntry):
            raise InvalidSegmentEntryError("SegmentRecord.entry must be a SegmentEntry")
        if not isinstance(self.sha256, str) or not _SHA256.fullmatch(self.sha256):
            raise InvalidSegmentEntryError(f"sha256 must be 64 lowercase hex digits, got {self.sha256!r:.80}")
        for name in ("row_count", "size_bytes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**63:
                raise InvalidSegmentEntryError(f"{name} must be a non-negative integer, got {v!r:.40}")

    @property
    def segment_id(self) -> str:
        return self.entry.segment_id

    def same_file(self, other: SegmentRecord) -> bool:
        return (self.entry, self.sha256, self.row_count, self.size_bytes) == (
            other.entry,
            other.sha256,
            other.row_count,
            other.size_bytes,
        )


def segment_list_path(directory: Path, partition_id: str, placement_id: int) -> Path:
    """``directory/segments-<partition_id>-<placement_id>.sqlite3`` (ids validated)."""
    name = f"segments-{validate_partition_id(partition_id)}-{validate_placement_id(placement_id)}.sqlite3"
    return Path(directory) / name


def _row_to_record(row: sqlite3.Row) -> SegmentRecord:
    try:
        entry = SegmentEntry(
            segment_id=row["segment_id"],
            base_segment_id=row["base_segment_id"],
            placement_id=row["placement_id"],
            epoch=row["epoch"],
            is_major=bool(row["is_major"]),
            included_segment_ids=tuple(json.loads(row["included_segment_ids"])),
            covered=tuple(WalRange.from_json(r) for r in json.loads(row["covered"])),
        )
        return SegmentRecord(
            entry=entry,
            sha256=row["sha256"],
            row_count=row["row_count"],
            size_bytes=row["size_bytes"],
            created_at=float(row["created_at"]),
        )
    except (ValueError, TypeError) as exc:
        raise SegmentListCorruptError(f"segment list row {row['seq']} is not a valid entry: {exc}") from exc


class SegmentList:
    """The segment list of one partition replica (one SQLite file). Not thread-safe: one owner at a time
    (which may hand it to another thread, hence ``check_same_thread=False``)."""

    def __init__(self, path: Path, *, partition_id: str, placement_id: int) -> None:
        self.path = Path(path)
        self.partition_id = validate_partition_id(partition_id)
        self.placement_id = validate_placement_id(placement_id)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0, check_same_thread=False)
        except sqlite3.Error as exc:
            raise SegmentListError(f"cannot open segment list {self.path}: {exc}") from exc
        self._db.row_factory = sqlite3.Row
        try:
            self._init()
        except BaseException:
            self._db.close()
            raise

    def _init(self) -> None:
        try:
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise SegmentListError(f"{self.path}: cannot switch to WAL journal mode (got {mode})")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            with self._tx():
                for stmt in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                    self._db.execute(stmt)
                row = self._db.execute("SELECT * FROM replica WHERE id = 1").fetchone()
                if row is None:
                    self._db.execute(
                        "INSERT INTO replica (id, schema_version, partition_id, placement_id, root_segment_id) "
                        "VALUES (1, ?, ?, ?, NULL)",
                        (SCHEMA_VERSION, self.partition_id, self.placement_id),
                    )
                    row = self._db.execute("SELECT * FROM replica WHERE id = 1").fetchone()
            if row["schema_version"] != SCHEMA_VERSION:
                raise SegmentListError(
                    f"{self.path}: schema version {row['schema_version']}, expected {SCHEMA_VERSION}"
                )
            if (row["partition_id"], row["placement_id"]) != (self.partition_id, self.placement_id):
                # Source 3.6: a re-assigned replica has a new placement id and must start empty.
                raise SegmentListError(
                    f"{self.path} belongs to partition {row['partition_id']} placement {row['placement_id']}, "
                    f"not {self.partition_id} placement {self.placement_id}"
                )
        except sqlite3.DatabaseError as exc:
            raise SegmentListCorruptError(f"{self.path} is not a usable segment list: {exc}") from exc
        self._chain = self._read_chain()

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> SegmentList:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _checkpoint(self, step: str) -> None:
        """Called between the writes of one change; tests use it to simulate a crash there."""

    # -- reads ----------------------------------------------------------------------------------

    def _read_records(self) -> list[SegmentRecord]:
        return [_row_to_record(r) for r in self._db.execute("SELECT * FROM segments ORDER BY seq")]

    def _read_chain(self) -> SegmentChain:
        records = self._read_records()
        root = self._db.execute("SELECT root_segment_id FROM replica WHERE id = 1").fetchone()[0]
        try:
            return SegmentChain.of((r.entry for r in records), root)
        except ChainError as exc:
            raise SegmentListCorruptError(f"{self.path}: {exc}") from exc

    @property
    def chain(self) -> SegmentChain:
        """The chain as of the last committed change (cached; :meth:`load_chain` re-reads)."""
        return self._chain

    @property
    def root(self) -> str | None:
        return self._chain.root

    def load_chain(self) -> SegmentChain:
        """Read the list and root from the database into a SegmentChain."""
        try:
            self._chain = self._read_chain()
        except sqlite3.Error as exc:
            raise SegmentListError(f"cannot read {self.path}: {exc}") from exc
        return self._chain

    def records(self) -> tuple[SegmentRecord, ...]:
        """All records in list order (oldest first)."""
        return tuple(self._read_records())

    def record(self, segment_id: str) -> SegmentRecord | None:
        row = self._db.execute("SELECT * FROM segments WHERE segment_id = ?", (segment_id,)).fetchone()
        return None if row is None else _row_to_record(row)

    # -- changes -----------------------------------------------------------------------------

    def _change(
        self, apply: Callable[[SegmentChain], SegmentChain], insert: SegmentRecord | None, remove: Iterable[str] = ()
    ) -> SegmentChain:
        drop = list(remove)
        try:
            with self._tx():
                before = self._read_chain()
                after = apply(before)
                if insert is not None:
                    self._insert(insert)
                self._checkpoint("inserted")
                if drop:
                    self._db.executemany("DELETE FROM segments WHERE segment_id = ?", [(s,) for s in drop])
                self._checkpoint("removed")
                self._db.execute("UPDATE replica SET root_segment_id = ? WHERE id = 1", (after.root,))
                self._checkpoint("root_moved")
        except sqlite3.Error as exc:
            raise SegmentListError(f"cannot change {self.path}: {exc}") from exc
        self._chain = after
        return after

    def _insert(self, rec: SegmentRecord) -> None:
        row = self._db.execute("SELECT * FROM segments WHERE segment_id = ?", (rec.segment_id,)).fetchone()
        if row is not None:
            if not _row_to_record(row).same_file(rec):
                raise ChainError(f"segment {rec.segment_id} is already in the list with a different file")
            return
        e = rec.entry
        self._db.execute(
            "INSERT INTO segments (segment_id, base_segment_id, included_segment_ids, is_major, placement_id, "
            "epoch, covered, sha256, row_count, size_bytes, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                e.segment_id,
                e.base_segment_id,
                json.dumps(list(e.included_segment_ids)),
                int(e.is_major),
                e.placement_id,
                e.epoch,
                json.dumps([r.to_json() for r in e.covered]),
                rec.sha256,
                rec.row_count,
                rec.size_bytes,
                rec.created_at,
            ),
        )

    def fast_forward(self, record: SegmentRecord) -> SegmentChain:
        """Add an entry based on root and make it root, atomically (chain.SegmentChain.fast_forward)."""
        return self._change(lambda c: c.fast_forward(record.entry), record)

    def fast_forward_add(self, record: SegmentRecord) -> SegmentChain:
        """Add an unreferenced major (or any segment onto a NULL root) as the new root, atomically."""
        return self._change(lambda c: c.fast_forward_add(record.entry), record)

    def add_detached(self, record: SegmentRecord) -> SegmentChain:
        """Add an entry without moving root (a received segment awaiting its merge)."""
        return self._change(lambda c: c.add_detached(record.entry), record)

    def commit_compaction(self, record: SegmentRecord, *, leader_epoch: int) -> SegmentChain:
        """Add a compacted major as root if root did not move and the epoch is current."""
        return self._change(lambda c: commit_compaction(c, record.entry, leader_epoch=leader_epoch), record)

    def rewind(self, segment_id: str | None) -> SegmentChain:
        """Move root back to an entry on the chain, atomically (chain.SegmentChain.rewind)."""
        return self._change(lambda c: c.rewind(segment_id), None)

    def remove(self, segment_ids: Iterable[str]) -> SegmentChain:
        """Remove entries (before their files are unlinked). Unknown ids are ignored; root is refused."""
        ids = list(segment_ids)
        return self._change(lambda c: c.without(ids), None, ids)
