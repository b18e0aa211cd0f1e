"""One replica of one partition on this node: segment list, segment files, memtable, scans.

The leader role (:mod:`storage_node.roles.leader`) feeds it WAL records and asks it to flush;
scans (:mod:`storage_node.serve`) read it from other threads. One lock guards the memtable swap
and the chain; segment files are immutable, so they are read outside the lock, pinned: garbage
collection (source 3.5 DELETE, :meth:`PartitionReplica.delete_segments`) removes an entry at once
but unlinks a pinned file only when the last scan reading it ends.

Layout on disk: ``<data_dir>/partitions/<partition_id>-<placement_id>/`` holds the SQLite segment
list and the ``<segment_id>.parquet`` files (ids validated: nothing from the wire becomes a path).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from metadata.table import TableDefinition
from shoal.errors import SchemaError
from shoal.ids import new_segment_id, validate_partition_id, validate_placement_id
from shoal.segments import (
    MajorContentError,
    SegmentChain,
    SegmentEntry,
    SegmentList,
    SegmentRecord,
    WalRange,
    commit_compaction,
    lww_merge,
    read_segment,
    read_segment_near,
    segment_list_path,
    write_segment,
)
from shoal.segments.coverage import union
from shoal.segments.errors import SegmentChecksumError, SegmentListCorruptError
from shoal.segments.major_check import check_major_files
from shoal.segments.merge import check_received_columns, exactly_as
from shoal.segments.parquet_io import (
    delete_segment_file,
    file_sha256,
    list_segment_files,
    segment_path,
    write_segment_bytes,
)
from shoal.segments.recovery import reconcile
from shoal.segments.versioned import DELETED_COLUMN, EPOCH_COLUMN, SYSTEM_COLUMNS
from storage_node.replica.catch_up import CatchUp
from storage_node.replica.memtable import Memtable
from storage_node.replica.overlay import WalOverlay

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyFilter:
    """Rows whose first primary-key column equals ``key``, or lies in ``[low, high)`` (None = open)."""

    key: object = None
    low: object = None
    high: object = None

    @property
    def empty(self) -> bool:
        return self.key is None and self.low is None and self.high is None

    def bounds(self) -> tuple[object, object]:
        """Inclusive bounds that hold every matching value (None = open): ``(key, key)`` for a key."""
        if self.key is not None:
            return self.key, self.key
        return self.low, self.high

    def mask(self, col: pa.ChunkedArray) -> pa.ChunkedArray | None:
        """The rows' mask; SchemaError when a bound is not a value of the column's type (a scan
        request names a key the column cannot hold)."""
        if self.empty:
            return None
        conds = []
        if self.key is not None:
            conds.append(pc.equal(col, _scalar(self.key, col.type)))
        if self.low is not None:
            conds.append(pc.greater_equal(col, _scalar(self.low, col.type)))
        if self.high is not None:
            conds.append(pc.less(col, _scalar(self.high, col.type)))
        out = conds[0]
        for c in conds[1:]:
            out = pc.and_(out, c)
        return out


def _scalar(value: object, dtype: pa.DataType) -> pa.Scalar:
    try:
        return pa.scalar(value, dtype)
    except (OverflowError, UnicodeEncodeError, TypeError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SchemaError(f"scan key {value!r:.60} is not a {dtype} value: {exc}") from None


def replica_dir(data_dir: Path, partition_id: str, placement_id: int) -> Path:
    name = f"{validate_partition_id(partition_id)}-{validate_placement_id(placement_id)}"
    return Path(data_dir) / "partitions" / name


def minor_backlog(replica: PartitionReplica) -> int:
    """Minor segments on the chain since its latest major (0 when root is a major or the chain is empty).

    The count the writer stall (DESIGN.md section 9) and the node's metrics read.
    """
    run = replica.chain.since_latest_major()
    return sum(1 for e in run if not e.is_major)


def _refuse_files_without_list(list_path: Path, directory: Path) -> None:
    """Segment files in a directory whose segment list is missing or empty: the list was lost
    (SQLite would open a 0-byte or missing file as a new, empty list, and the reconciliation would
    then delete every segment file as an orphan, while the empty replica served empty scans until
    its bootstrap check ran). Refused, the files left as they are."""
    if list_path.exists() and list_path.stat().st_size > 0:
        return
    files = list_segment_files(directory)
    if files:
        state = "is empty" if list_path.exists() else "is missing"
        raise SegmentListCorruptError(
            f"{directory} holds {len(files)} segment files but its segment list {list_path.name} {state}: "
            f"the files are left as they are; remove the directory to bootstrap this replica again"
        )


class PartitionReplica:
    """Durable state of one (partition, placement) on this node."""

    def __init__(self, table: TableDefinition, partition_id: str, placement_id: int, data_dir: Path) -> None:
        self.table = table
        self.partition_id = validate_partition_id(partition_id)
        self.placement_id = validate_placement_id(placement_id)
        self.directory = replica_dir(data_dir, partition_id, placement_id)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.key_columns = list(table.primary_key)
        self._lock = threading.RLock()
        list_path = segment_list_path(self.directory, partition_id, placement_id)
        _refuse_files_without_list(list_path, self.directory)
        self._list = SegmentList(list_path, partition_id=partition_id, placement_id=placement_id)
        rec = reconcile(self._list.chain, self.directory)
        if rec.orphan_files or rec.removed_temp_files:
            log.info(
                "%s: removed %d orphan segment files and %d temp files",
                self.name,
                len(rec.orphan_files),
                len(rec.removed_temp_files),
            )
        if not rec.consistent:
            log.error("%s: segment files missing for %s (must be re-fetched)", self.name, rec.missing_files)
        self.memtable = Memtable(start_offset=self.covered_end())
        self._frozen: list[Memtable] = []
        self.overlay: WalOverlay | None = None
        """On a follower: the leader's WAL records beyond what the chain covers (fresh reads)."""
        self._pins: Counter[str] = Counter()
        """segment id -> scans reading its file right now (files are read outside the lock)."""
        self._doomed: set[str] = set()
        """Deleted segments whose file is unlinked when the last scan reading it ends."""
        self._verified: set[str] = set()
        """Segments whose file this process wrote, received with its sha256 checked, or hashed on
        first read (:meth:`_check_files`): files are immutable, so each is hashed at most once."""
        self.deleted_segments = 0
        self.catch_up = CatchUp(self.directory)
        """SERVING, or BOOTSTRAPPING from Kafka (:mod:`storage_node.replication.bootstrap`)."""

    @property
    def name(self) -> str:
        return f"{self.table.name}/{self.partition_id}#{self.placement_id}"

    @property
    def chain(self) -> SegmentChain:
        with self._lock:
            return self._list.chain

    @property
    def empty(self) -> bool:
        """No segment in the list (a new replica, or one whose data dir was missing or wiped)."""
        with self._lock:
            return len(self._list.chain) == 0

    def close(self) -> None:
        with self._lock:
            self._list.close()

    # -- WAL coverage ------------------------------------------------------------------------

    def covered_end(self) -> int:
        """One past the last offset of this placement's WAL channel that segments cover (0 if none).

        The leader writes covered ranges contiguously from the previous end, so this is the
        highest end offset of this channel in the chain's coverage.
        """
        channel = (self.partition_id, self.placement_id)
        ends = [r.end_offset for r in self._list.chain.coverage() if r.channel == channel]
        return max(ends, default=0)

    # -- writes ------------------------------------------------------------------------------

    def append(self, versioned: pa.Table, wal_offset: int) -> None:
        with self._lock:
            self.memtable.append(versioned, wal_offset)

    def flush(self, epoch: int) -> SegmentRecord | None:
        """Write the memtable as a segment based on root, durably, and make it root.

        The first segment of a replica (root NULL) must be a major (source section 3). Returns the
        new record, or None if the memtable covered nothing. While the file is written, scans see
        the frozen memtable; it leaves them only once the segment is in the chain.
        """
        with self._lock:
            frozen = self.memtable
            if frozen.empty:
                return None
            assert frozen.end_offset is not None
            self.memtable = Memtable(start_offset=frozen.end_offset)
            self._frozen.append(frozen)
        try:
            rows = frozen.merged(self.key_columns)
            if rows is None:  # only empty WAL records: an empty segment still records the coverage
                rows = self._empty_versioned()
            covered = (WalRange(self.partition_id, self.placement_id, frozen.start_offset, frozen.end_offset),)
            record = self._write_on_root(rows, covered, epoch, then=lambda: self._frozen.remove(frozen))
        except BaseException:
            with self._lock:  # put the rows back in front of the current memtable
                if frozen in self._frozen:
                    self._frozen.remove(frozen)
                    frozen.tables.extend(self.memtable.tables)
                    frozen.rows += self.memtable.rows
                    frozen.nbytes += self.memtable.nbytes
                    frozen.end_offset = self.memtable.end_offset or frozen.end_offset
                    self.memtable = frozen
            raise
        log.info(
            "%s: flushed segment %s (%d rows, WAL [%d, %d))",
            self.name,
            record.segment_id,
            record.row_count,
            frozen.start_offset,
            frozen.end_offset,
        )
        return record

    def _write_on_root(
        self, rows: pa.Table, covered: tuple[WalRange, ...], epoch: int, *, then: Callable[[], None] | None = None
    ) -> SegmentRecord:
        """Write ``rows`` as a durable segment file, then (under the lock) add it on the current root
        and make it root: the first segment of a replica (root NULL) is a major (source section 3).
        ``then`` runs under the same lock, so scans see the new segment and lose its source at once."""
        sid = new_segment_id()
        written = write_segment(self.directory, sid, rows, key_columns=self.key_columns)
        self._verified.add(sid)
        with self._lock:
            root = self._list.chain.root
            entry = SegmentEntry(
                segment_id=sid,
                base_segment_id=root,
                placement_id=self.placement_id,
                epoch=epoch,
                is_major=root is None,
                covered=covered,
            )
            record = SegmentRecord(
                entry=entry, sha256=written.sha256, row_count=written.row_count, size_bytes=written.size_bytes
            )
            self._list.fast_forward(record)
            if then is not None:
                then()
        return record

    def commit_major(self, record: SegmentRecord, *, leader_epoch: int) -> SegmentChain:
        """Make a compacted major the new root, fenced by ``leader_epoch`` (source 3.1).

        Its file must already be written and fsynced in :attr:`directory` under its segment id
        (``write_segment_bytes``). Refused with CompactionConflictError, changing nothing, when the
        root moved since the compaction started, the major is of another epoch, or the chain holds a
        newer epoch; refused with MajorContentError when its rows, columns or covered WAL ranges are
        not those of the segments it replaces (:meth:`_check_major`: a compaction that lost,
        invented or kept a stale row, or changed a value; the major becomes the only copy once the
        channels are truncated), or when its included segment ids are not those it folds. The
        caller then deletes the file (or recovery's reconcile does).
        """
        with self._lock:
            chain = self._list.chain
        # the chain's checks first, on a snapshot: a stale major is a conflict, whatever its rows
        commit_compaction(chain, record.entry, leader_epoch=leader_epoch, check_included=False)
        self._check_major(record, chain.since_latest_major())  # its rows first, then (locked) its list
        with self._lock:  # checked again: root may have moved while the files were read
            chain = self._list.commit_compaction(record, leader_epoch=leader_epoch)
            self._verified.add(record.segment_id)  # the intake checked its sha256 as it stored it
            return chain

    def _check_major(self, record: SegmentRecord, replaced: Sequence[SegmentEntry]) -> None:
        """MajorContentError unless the major is what the segments it replaces make: it covers their
        WAL ranges, has their columns (:func:`~shoal.segments.merge.check_major_schema`) and their
        newest version per key with its values (:func:`~shoal.segments.major_check.check_major_files`:
        in key ranges of bounded memory, outside the lock). A replaced segment whose file is gone or
        unreadable here raises :class:`~shoal.segments.errors.ReplacedSegmentUnreadableError` and
        nothing is committed: unchecked, a major that lost rows would be the only copy once the
        channels are truncated. The caller fetches the file again (:meth:`restore_file`) and retries."""
        sid = record.segment_id
        covered = union(*(e.covered for e in replaced))
        if set(record.entry.covered) != set(covered):

            def shown(ranges: Iterable[WalRange]) -> str:
                return ", ".join(f"#{r.placement_id}[{r.start_offset}, {r.end_offset})" for r in ranges) or "nothing"

            example = f"it covers {shown(record.entry.covered)}; the segments it replaces cover {shown(covered)}"
            raise MajorContentError(sid, missing=0, extra=0, example=example)
        check = check_major_files(self.directory, [e.segment_id for e in replaced], sid, self.key_columns)
        if check.passes > 1:
            log.info("%s: major %s checked in %d key ranges of %s", self.name, sid, check.passes, check.bucket)

    def restore_file(self, segment_id: str, chunks: Iterable[bytes]) -> None:
        """Write the file of chain segment ``segment_id`` again from ``chunks`` (its copy on a segments
        channel), replacing a missing or damaged one: the bytes must match the sha256 and size the
        segment list holds for it (ChecksumMismatchError or CorruptSegmentError otherwise, the file
        left as it was); KeyError when the segment is not in the list."""
        record = self.record(segment_id)
        if record is None:
            raise KeyError(segment_id)
        write_segment_bytes(
            self.directory, segment_id, chunks, expected_sha256=record.sha256, expected_size=record.size_bytes
        )
        with self._lock:
            self._revive(segment_id)
            self._verified.add(segment_id)

    def _revive(self, segment_id: str) -> None:
        """Under the lock, for a segment whose file was just written again: a deletion deferred by a
        scan (``_doomed``) must not unlink the new file when that scan ends."""
        self._doomed.discard(segment_id)

    def write_adopted(
        self, tables: list[pa.Table], covered: WalRange | tuple[WalRange, ...], epoch: int
    ) -> SegmentRecord:
        """Write versioned rows of another placement's WAL channel as a segment on root (failover adoption).

        The rows keep their GTIDs (merge = re-insert keeping GTIDs); the entry covers ``covered``.
        """
        rows = lww_merge(tables, self.key_columns) if any(t.num_rows for t in tables) else self._empty_versioned()
        return self._write_on_root(rows, covered if isinstance(covered, tuple) else (covered,), epoch)

    def merge_detached(self, record: SegmentRecord, epoch: int) -> SegmentRecord:
        """Source 3.5 "accept and merge": a received segment the chain does not reference.

        Its file (already durable in :attr:`directory`) is listed detached, its rows are re-inserted
        keeping their GTIDs as a new segment on root (covering its WAL ranges), and only then are its
        entry and file deleted; a crash in between merges it again (idempotent).
        """
        rows = read_segment(self.directory, record.segment_id).replace_schema_metadata(None)
        self._check_received(rows, epoch, record.segment_id)  # before anything changes
        with self._lock:
            self._list.add_detached(record)
        merged = self.write_adopted([rows], tuple(record.entry.covered), epoch)
        with self._lock:
            self._list.remove([record.segment_id])
        delete_segment_file(self.directory, record.segment_id)
        return merged

    def check_received_schema(self, schema: pa.Schema, segment_id: str) -> None:
        """SchemaError if a segment received from another replica does not hold the table's columns."""
        check_received_columns(schema, self._empty_versioned().schema, segment_id=segment_id)

    def _check_received(self, rows: pa.Table, epoch: int, segment_id: str) -> None:
        """SchemaError for a received segment to merge whose columns are not the table's, or whose rows
        carry an epoch above ``epoch``, the merging leader's: no earlier term stamped those, and merged
        (their GTIDs are kept) they would win over every write this leader accepts."""
        self.check_received_schema(rows.schema, segment_id)
        top = pc.max(rows.column(EPOCH_COLUMN)).as_py() if rows.num_rows else None
        if top is not None and top > epoch:
            raise SchemaError(f"segment {segment_id}: rows of epoch {top}, above this leader's epoch {epoch}")

    def detached(self) -> list[SegmentRecord]:
        """Records in the list that the chain does not reference (e.g. left by a rewind)."""
        with self._lock:
            chain = self._list.chain
            return [r for r in self._list.records() if not chain.is_referenced(r.segment_id)]

    def drop_memtable(self) -> int:
        """Start the memtable again from what the durable segments cover; returns the rows dropped.

        For a replica whose leader term ended in this process (a handover, a resumed SUSPENDED
        leadership, a failed role): its memtable rows are accepted records of its own WAL channel,
        which the next leader adopts (keeping their GTIDs) and which a new term of this replica
        replays. A follower's view is its segments plus the current leader's WAL overlay; a leader's
        is its segments plus what its recovery replays. Kept, the old term's rows would shadow both.
        """
        with self._lock:
            dropped = self.memtable.rows
            self.memtable = Memtable(start_offset=self.covered_end())
        if dropped:
            log.info("%s: dropped %d memtable rows of an ended leader term", self.name, dropped)
        return dropped

    def retire_memtable(self) -> int:
        """Move the memtable's rows into the overlay, as records of this replica's own WAL channel;
        returns the rows moved.

        For a replica whose leader term ended in this process and that now follows: its memtable
        rows are committed records of its own WAL channel (appended after their transaction
        committed), which the next leader adopts into a segment, keeping their GTIDs. In the overlay
        they stay readable here until a segment covers the memtable's last record (the follower
        drops what a segment covers, and after a grace period what none does), so reads on the old
        leader do not go back in time across a handover. Reads merge by newest GTID, so they never
        hide a newer write.
        """
        with self._lock:
            mem = self.memtable
            self.memtable = Memtable(start_offset=self.covered_end())
            if mem.end_offset is None or not mem.tables:
                return 0
            if self.overlay is None:
                self.overlay = WalOverlay()
            channel = (self.partition_id, self.placement_id)
            for table in mem.tables:  # kept until a segment covers the memtable's last record
                self.overlay.add(channel, mem.end_offset - 1, table)
        log.info("%s: %d memtable rows of an ended leader term stay readable until adopted", self.name, mem.rows)
        return mem.rows

    def rewind(self, segment_id: str | None) -> SegmentChain:
        """Move root back to ``segment_id`` (see SegmentChain.rewind).

        The overlay keeps its records: each is a committed WAL record no segment of the chain
        covered, and a rewind only shrinks what the chain covers, so reads do not lose rows they
        returned. The records the detached segments covered were dropped from it when those
        segments arrived: the follower tails its leader's channel again from the new covered end
        (former leaders' records come back with the new leader's adoption segment). Rewound to
        nothing (the replica bootstraps and serves nothing meanwhile), the overlay is emptied."""
        with self._lock:
            chain = self._list.rewind(segment_id)
            if self.overlay is not None and segment_id is None:
                self.overlay.clear()
            return chain

    def record(self, segment_id: str) -> SegmentRecord | None:
        """The segment-list record of ``segment_id`` (None if it is not in the list)."""
        with self._lock:
            return self._list.record(segment_id)

    def apply_received(self, record: SegmentRecord, *, add: bool) -> SegmentChain:
        """Fast-forward (``add=False``) or fast-forward-add a received segment whose file is durable.

        Source 3.5 receive procedure: only the segment-list entry changes, whatever the file's size.
        Overlay rows (WAL records tailed from the leader) that the new chain covers leave the overlay.
        """
        with self._lock:
            self._revive(record.segment_id)
            chain = self._list.fast_forward_add(record) if add else self._list.fast_forward(record)
            self._verified.add(record.segment_id)  # its size and sha256 were checked as it was stored
            if self.overlay is not None:
                self.overlay.drop_covered(chain.coverage())
            return chain

    # -- garbage collection (source 3.5 replicate_partition: DELETE) -----------------------------

    @contextlib.contextmanager
    def reading(self, segment_ids: Iterable[str]) -> Iterator[None]:
        """Pin segment files while they are read outside the lock: deleting them waits until unpinned."""
        ids = list(segment_ids)
        with self._lock:
            self._pins.update(ids)
        try:
            yield
        finally:
            self._unpin(ids)

    def _unpin(self, ids: list[str]) -> None:
        unlink = []
        with self._lock:
            self._pins.subtract(ids)
            for sid in set(ids):
                if self._pins[sid] <= 0:
                    del self._pins[sid]
                    if sid in self._doomed:
                        self._doomed.discard(sid)
                        unlink.append(sid)
        for sid in unlink:
            delete_segment_file(self.directory, sid)

    def delete_segments(self, segment_ids: Iterable[str]) -> list[str]:
        """Delete segments that are off the live chain: their entries first, then their files.

        Ids the chain still needs (root, or on the chain above the latest major) are skipped. A
        file that a scan is reading (pinned) is unlinked when the last such scan ends; a crash in
        between leaves an orphan file that recovery's reconcile removes. Returns the ids whose
        entries were removed.
        """
        with self._lock:
            chain = self._list.chain
            # never a segment the live chain still needs (weak = folded into a newer major, or off the chain)
            ids = [
                s for s in dict.fromkeys(segment_ids) if s in chain and s != chain.root and chain.is_reference_weak(s)
            ]
            if not ids:
                return []
            self._list.remove(ids)
            now = [s for s in ids if self._pins[s] <= 0]
            self._doomed.update(s for s in ids if self._pins[s] > 0)
            self.deleted_segments += len(ids)
        for sid in now:
            delete_segment_file(self.directory, sid)
        log.info("%s: deleted %d segments folded into a major: %s", self.name, len(ids), ids)
        return ids

    def _check_files(self, records: dict[str, SegmentRecord | None]) -> None:
        """Hash each segment file a scan is about to read for the first time in this process against
        its record's sha256 (:class:`SegmentChecksumError` if it differs). Opening a replica checks
        only that the files exist; a changed file that is still valid Parquet (another segment's
        bytes in its place, a footer statistic changed so a key scan skips a row group) would be
        served as it is, and no other replica would show it to ``shoal verify`` but by a full scan."""
        for sid, record in records.items():
            if record is None:
                continue
            actual = file_sha256(segment_path(self.directory, sid))
            if actual != record.sha256:
                raise SegmentChecksumError(sid, record.sha256, actual)
            self._verified.add(sid)

    def _empty_versioned(self) -> pa.Table:
        from shoal.segments.versioned import stamp

        return stamp(self.table.arrow_schema().empty_table(), epoch=0, first_seq=0)

    # -- reads -------------------------------------------------------------------------------

    def scan(
        self, where: KeyFilter | None = None, *, include_system: bool = False, include_deleted: bool = False
    ) -> pa.Table:
        """Newest version per primary key across segments and memtable, tombstones hidden (kept with
        ``include_deleted``, which needs ``include_system`` to tell them apart)."""
        where = where or KeyFilter()
        overlay = self.overlay
        if overlay is not None:
            overlay.decode_pending()  # WAL rows are decoded on first read, not under the replica's lock
        with self._lock:
            entries = self._list.chain.since_latest_major()
            tables = [t for m in [*self._frozen, self.memtable] for t in m.tables]
            if self.overlay is not None:
                tables += self.overlay.tables()
            ids = [e.segment_id for e in entries]
            unverified = {sid: self._list.record(sid) for sid in ids if sid not in self._verified}
            self._pins.update(ids)
        try:
            self._check_files(unverified)
            if where.empty:
                parts = [read_segment(self.directory, sid) for sid in ids]
            else:  # only the row groups that may hold the key (segments are sorted by it)
                low, high = where.bounds()
                key = self.key_columns[0]
                parts = [read_segment_near(self.directory, sid, key, low=low, high=high) for sid in ids]
        finally:
            self._unpin(ids)
        parts = [p.replace_schema_metadata(None) for p in parts] + tables
        schema = self.table.arrow_schema()
        if not parts:
            result = self._empty_versioned()
        else:
            key = self.key_columns[0]
            filtered = []
            for p in parts:
                mask = where.mask(p.column(key))
                filtered.append(p if mask is None else p.filter(mask))
            result = lww_merge(filtered, self.key_columns)
        if not (include_deleted and include_system):
            result = result.filter(pc.invert(result.column(DELETED_COLUMN)))
        if not include_system:
            result = result.select([n for n in result.column_names if n not in SYSTEM_COLUMNS])
        else:  # segments written by the node and by Spark may differ in nullability: one schema out
            if include_deleted:  # a tombstone has no values, whatever the table declares
                keys = set(self.key_columns)
                schema = pa.schema([f if f.name in keys else f.with_nullable(True) for f in schema], schema.metadata)
            schema = pa.schema([*schema, *(result.schema.field(n) for n in SYSTEM_COLUMNS)], metadata=schema.metadata)
        # not from_arrays(schema=): it converts integers into their text and a float into an infinity
        return pa.Table.from_arrays(
            [exactly_as(result.column(f.name), f.type, name=f.name) for f in schema], schema=schema
        )
