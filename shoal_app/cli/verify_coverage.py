"""``shoal verify``'s coverage check: every write still on a channel is in every replica (DESIGN.md section 6).

Replicas that agree with each other can still agree on the wrong rows: a compaction that kept an
older version or lost rows, a fast-forward to a segment built from nothing, a segment every replica
dropped, a leader that reused GTIDs. What the channels still hold (committed records only) is
writes every replica must reflect:

- each WAL channel from its Tail to its end: a leader commits a WAL record in the same transaction
  as the ingest offsets it accepts, a new leader adopts its predecessor's channel to the end, so
  every committed record is an accepted write;
- each segments channel from its start (Tail truncates it below a published major, which keeps
  every key's newest version and its tombstones): a segment holds rows a leader accepted (a flush
  of its memtable, an adopted or merged channel, a major of such segments), at their GTIDs. A
  segment's file is checked against its manifest's sha256 before its rows count.

For each primary key on those channels, the newest version (highest GTID, TokuMX seed 003; a
delete is a tombstone with its GTID) is the *floor* a replica's row must reach. The replica's scan
includes its tombstones (``ScanRequest.deleted``), so a later delete the channels no longer hold
(a leaving placement's channels deleted after it led) reaches an older write's floor:

- a written row: the replica holds the key (a row or a tombstone) with a GTID at or above it (a
  later write may have replaced it, on a channel already truncated), and at that very GTID the
  row the channel wrote, with its values: every replica holding the same wrong values at the right
  GTID (a compaction that stamped an older version's values with the newest GTID, then
  fast-forwarded everywhere) is a mismatch too;
- a delete: the replica does not hold the key, or holds it with a GTID above the delete, or its
  tombstone at the delete's GTID.

Two channels holding one key at the same GTID with different rows (a WAL record and the segment
that covers it, a major and a minor) are a mismatch by themselves: the last-writer-wins merge breaks
such a tie by the delete flag and the values, so either could become the floor and the wrong one
would pass (:attr:`WalFloors.conflicts`). Rows are read as the WAL carries them: columns outside
the key nullable, whatever the table declares (a tombstone has no values).

A channel is a suffix of its placement's writes (Tail truncates from the front), so what is newer
than a version on a channel is either on the same channel or on a newer leader's channel, where the
GTID comparison finds it. The floors keep the newest whole row per key (values, GTID, delete flag),
merged last-writer-wins as records are read (:func:`shoal.segments.lww_merge`), so the check holds
one row per key, never a channel.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from metadata.table import TableDefinition
from shoal.errors import ShoalError
from shoal.kafka.readers import ChannelRecord
from shoal.segments import lww_merge
from shoal.segments.merge import same_kind, same_values
from shoal.segments.versioned import DELETED_COLUMN, EPOCH_COLUMN, SEQ_COLUMN, SYSTEM_COLUMNS, SYSTEM_TYPES
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import ManifestRecord as WireManifest
from shoal_app.cli.models import ReplicaDescription
from storage_node.replica import versioned_rows


@dataclass(frozen=True)
class ChannelSegment:
    """One segment on a segments channel: its manifest at ``offset``, and when asked for, the file its
    chunks carry (``data``; None with ``error`` saying why when they are not all there)."""

    offset: int
    manifest: WireManifest
    data: bytes | None = None
    error: str | None = None


_MERGE_EVERY = 256
"""Merge the collected floors after this many records, so memory stays one row per key."""

_EXAMPLES = 3


@dataclass
class WalFloors:
    """The newest version per primary key of the WAL records and segments read so far (the whole
    row, its GTID and delete flag)."""

    table: TableDefinition
    records: int = 0
    segments: int = 0
    undecodable: list[str] = field(default_factory=list)
    """WAL records and segments whose rows cannot be read (``WAL record topic@offset: error``,
    ``segment id at topic@offset: error``): their writes cannot be checked."""
    conflicts: list[str] = field(default_factory=list)
    """Keys two channels hold at the same GTID with different rows (a WAL record and a segment, two
    segments): one of them is wrong, whichever the last-writer-wins merge would keep."""
    keep: pa.Table | None = None
    """Primary keys with GTIDs (``_shoal_epoch``, ``_shoal_seq``): every version read at one of
    them is kept too, unmerged (:meth:`kept`, :mod:`~shoal_app.cli.verify_newer`)."""
    first_seq: dict[int, int] = field(default_factory=dict)
    """Per epoch, the lowest sequence number of a WAL record read (a WAL channel holds every GTID
    of its epochs from there on: one placement writes an epoch, in GTID order)."""
    shared: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    """GTIDs that versions read hold for more than one key, with those keys: every version merged is
    looked at, not only each key's newest (a row stamped with another key's GTID is a phantom also
    once a later write of that other key replaced its version there)."""
    _parts: list[pa.Table] = field(default_factory=list)
    _kept: list[pa.Table] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._wanted = _by_epoch(self.keep, [*self.table.primary_key, EPOCH_COLUMN, SEQ_COLUMN])
        self._merged = False
        self._schema = ingest_schema(self.table.arrow_schema(), self.table.primary_key)
        self._columns = [*self.table.arrow_schema().names, *SYSTEM_COLUMNS]
        # rows as the WAL carries them: columns outside the key nullable (a tombstone has no values)
        own = [self._schema.field(n) for n in self.table.arrow_schema().names]
        self._stored = pa.schema([*own, *(pa.field(n, SYSTEM_TYPES[n]) for n in SYSTEM_COLUMNS)])

    def tap(self, topic: str, records: Iterable[ChannelRecord]) -> Iterator[ChannelRecord]:
        """``records`` unchanged, each one's rows added to the floors as it passes."""
        for item in records:
            self.add(topic, item)
            yield item

    def add(self, topic: str, item: ChannelRecord) -> None:
        record = item.record
        try:  # a record whose header says no rows is decoded too: its payload must agree
            rows = versioned_rows(record.rows(self._schema), record.gtid)
        except ShoalError as exc:
            self.undecodable.append(f"WAL record {topic}@{item.offset}: {exc}")
            return
        self.records += 1
        epoch, seq = record.gtid.epoch, record.gtid.seq
        self.first_seq[epoch] = min(seq, self.first_seq.get(epoch, seq))
        self._keep(rows)

    def tap_segments(self, topic: str, segments: Iterable[ChannelSegment]) -> Iterator[ChannelSegment]:
        """``segments`` unchanged, each one's rows added to the floors as it passes."""
        for segment in segments:
            self.add_segment(topic, segment)
            yield segment

    def add_segment(self, topic: str, segment: ChannelSegment) -> None:
        m = segment.manifest
        where = f"segment {m.segment_id} at {topic}@{segment.offset}"
        if segment.data is None:
            self.undecodable.append(f"{where}: {segment.error or 'its file was not read'}")
            return
        digest = hashlib.sha256(segment.data).hexdigest()
        if digest != m.checksum:
            self.undecodable.append(f"{where}: its chunks' sha256 {digest} is not its manifest's {m.checksum}")
            return
        try:
            rows = pq.read_table(pa.BufferReader(segment.data))
            absent = [c for c in self._columns if c not in rows.column_names]
            if absent:
                raise ValueError(f"no column {absent}")
            other = [
                f"{f.name} as {rows.schema.field(f.name).type}"
                for f in self._stored
                if not same_kind(f.type, rows.schema.field(f.name).type)
            ]
            if other:
                raise ValueError(f"it holds {', '.join(other)}")
            rows = rows.select(self._columns).cast(self._stored)
        except (pa.ArrowException, OSError, ValueError) as exc:
            self.undecodable.append(f"{where}: not a segment of this table: {exc}")
            return
        outside = _outside_declared(rows, m)
        if outside is not None:
            self.undecodable.append(f"{where}: {outside}")
            return
        self.segments += 1
        self._keep(rows)

    def fresh(self) -> WalFloors:
        """Empty floors for the same table, keeping the same versions (a read started again)."""
        return WalFloors(self.table, keep=self.keep)

    def _keep(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        self._parts.append(rows.select(self._columns))
        self._merged = False
        if self._wanted:
            self._keep_wanted(self._parts[-1])
        if len(self._parts) >= _MERGE_EVERY:
            self._merge()

    def _keep_wanted(self, rows: pa.Table) -> None:
        """Keep the rows of ``rows`` at a key and GTID of :attr:`keep`: per epoch, only the slice of
        its wanted sequence numbers within the rows' range is looked at (a WAL record is one range),
        so each record costs a binary search, not a join with everything wanted."""
        by = [*self.table.primary_key, EPOCH_COLUMN, SEQ_COLUMN]
        epochs = rows.column(EPOCH_COLUMN)
        distinct = pc.unique(epochs).to_pylist()
        for epoch in distinct:
            wanted = self._wanted.get(epoch)
            if wanted is None:
                continue
            seqs, table = wanted
            part = rows if len(distinct) == 1 else rows.filter(pc.equal(epochs, epoch))
            bounds = pc.min_max(part.column(SEQ_COLUMN)).as_py()
            lo = int(np.searchsorted(seqs, bounds["min"], side="left"))
            hi = int(np.searchsorted(seqs, bounds["max"], side="right"))
            if lo >= hi:
                continue
            kept = part.join(table.slice(lo, hi - lo), keys=by, join_type="left semi")
            if kept.num_rows:
                self._kept.append(kept.select(self._columns).cast(self._stored))

    def _merge(self) -> None:
        if self._merged and len(self._parts) == 1:
            return  # merged already, nothing read since: the conflicts are counted once
        self._merged = True
        combined = pa.concat_tables(self._parts, promote_options="permissive")
        self._conflicts(combined)
        by = [*self.table.primary_key, EPOCH_COLUMN, SEQ_COLUMN]
        versions = combined.select(by).group_by(by).aggregate([])  # a WAL row and its copy in a segment: one
        for gtid, keys in _keys_per_gtid(versions, self.table.primary_key).items():
            self.shared.setdefault(gtid, keys)
        self._parts = [lww_merge([combined], self.table.primary_key)]

    def _conflicts(self, rows: pa.Table) -> None:
        """Add to :attr:`conflicts` the keys ``rows`` holds twice at one GTID with different rows (the
        delete flag, or a written row's values, compared by :func:`~shoal.segments.merge.same_values`)."""
        if rows.num_rows < 2:
            return
        keys = list(self.table.primary_key)
        by = [*keys, EPOCH_COLUMN, SEQ_COLUMN]
        ordered = rows.sort_by([(c, "ascending") for c in by])
        a, b = ordered.slice(0, rows.num_rows - 1), ordered.slice(1)
        same_version = pa.chunked_array([pa.array(np.ones(a.num_rows, np.bool_))])
        for c in by:
            same_version = pc.and_(same_version, pc.fill_null(pc.equal(a.column(c), b.column(c)), False))
        written = pc.invert(a.column(DELETED_COLUMN))
        differ = pc.invert(same_values(a.column(DELETED_COLUMN), b.column(DELETED_COLUMN)))
        for c in (n for n in rows.column_names if n not in by and n != DELETED_COLUMN):
            differ = pc.or_(differ, pc.and_(written, pc.invert(same_values(a.column(c), b.column(c)))))
        bad = pc.and_(same_version, differ)
        if not pc.any(bad).as_py():
            return
        for one, other in zip(a.filter(bad).to_pylist(), b.filter(bad).to_pylist(), strict=True):
            self.conflicts.append(
                ", ".join(f"{k}={show(one[k])}" for k in keys)
                + f" at gtid {one[EPOCH_COLUMN]}:{one[SEQ_COLUMN]}: {_describe(one, by)} and {_describe(other, by)}"
            )

    def floors(self) -> pa.Table | None:
        """One row per key: its newest version on the channels read (None when they held no rows)."""
        if not self._parts:
            return None
        self._merge()
        return self._parts[0]

    def kept(self) -> pa.Table:
        """Every version read at a key and GTID of :attr:`keep`, as read (one may be read twice: a
        WAL record and the segment that covers it)."""
        return pa.concat_tables(self._kept) if self._kept else self._stored.empty_table()

    def empty(self) -> pa.Table:
        """No floor, typed as :meth:`floors` would be: replicas are still scanned against it (a key
        held twice, a column of another kind) when the channels hold no row."""
        return self._stored.empty_table()


def _outside_declared(rows: pa.Table, manifest: WireManifest) -> str | None:
    """Why ``rows`` (a segment's file) do not fit its manifest's declared GTID range (the publisher
    computes it from the file, and the GTID order checks trust it), or None when they do."""
    nulls = rows.column(EPOCH_COLUMN).null_count + rows.column(SEQ_COLUMN).null_count
    if nulls:
        return f"{nulls} of its rows' GTID values are null"
    if manifest.min_gtid is None or manifest.max_gtid is None or rows.num_rows == 0:
        return None
    bounds = lowest_and_highest_gtid(rows)
    assert bounds is not None  # no null GTID, at least one row
    low, high = bounds
    declared = ((manifest.min_gtid.epoch, manifest.min_gtid.seq), (manifest.max_gtid.epoch, manifest.max_gtid.seq))
    if declared[0] <= low and high <= declared[1]:
        return None
    return (
        f"its rows' GTIDs {low[0]}:{low[1]}..{high[0]}:{high[1]} lie outside its manifest's "
        f"{declared[0][0]}:{declared[0][1]}..{declared[1][0]}:{declared[1][1]}"
    )


def lowest_and_highest_gtid(rows: pa.Table | None) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The lowest and highest GTID (epoch, then sequence) of ``rows``; None when no row has an epoch."""
    if rows is None or rows.num_rows == 0:
        return None
    epochs = rows.column(EPOCH_COLUMN)
    bounds = pc.min_max(epochs).as_py()
    if bounds["min"] is None:
        return None
    low_e, high_e = int(bounds["min"]), int(bounds["max"])
    low_s = pc.min(rows.filter(pc.equal(epochs, low_e)).column(SEQ_COLUMN)).as_py()
    high_s = pc.max(rows.filter(pc.equal(epochs, high_e)).column(SEQ_COLUMN)).as_py()
    return (low_e, int(low_s)), (high_e, int(high_s))


def _by_epoch(keep: pa.Table | None, by: Sequence[str]) -> dict[int, tuple[np.ndarray, pa.Table]]:
    """``keep`` (keys and GTIDs) per epoch: its sequence numbers sorted, and its rows in that order."""
    if keep is None or keep.num_rows == 0:
        return {}
    out = {}
    rows = keep.select(list(by))
    for epoch in pc.unique(rows.column(EPOCH_COLUMN)).to_pylist():
        if epoch is None:
            continue
        mine = rows.filter(pc.equal(rows.column(EPOCH_COLUMN), epoch)).sort_by(SEQ_COLUMN)
        out[int(epoch)] = (mine.column(SEQ_COLUMN).to_numpy(), mine)
    return out


def _describe(row: dict[str, object], skip: Iterable[str]) -> str:
    if row[DELETED_COLUMN]:
        return "a delete"
    shown = [f"{c}={show(v)}" for c, v in row.items() if c not in set(skip) and c != DELETED_COLUMN]
    return "a row " + ", ".join(shown)


def gtid_above(epoch: Any, seq: Any, other_epoch: Any, other_seq: Any, *, or_equal: bool = False) -> pa.ChunkedArray:
    """Row by row, whether (epoch, seq) is above (``or_equal``: at or above) (other_epoch,
    other_seq), arrays or scalars; a null on either side is not."""
    seq_test = pc.greater_equal if or_equal else pc.greater
    above = pc.or_kleene(
        pc.greater(epoch, other_epoch), pc.and_kleene(pc.equal(epoch, other_epoch), seq_test(seq, other_seq))
    )
    return pc.fill_null(above, False)


def replica_name(i: int | str) -> str:
    return f"\x00replica {i}"  # no table column can be named so (metadata.table.validate_column_name)


_R_EPOCH, _R_SEQ, _R_DELETED = replica_name("epoch"), replica_name("seq"), replica_name("deleted")


def show(value: object) -> str:
    if isinstance(value, float) and math.isnan(value):
        return f"nan(0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016x})"  # which NaN
    return f"{value!r:.40}"


def _same_py(ours: object, theirs: object) -> bool:
    """:func:`~shoal.segments.merge.same_values` for two Python values: floats by their bits."""
    if isinstance(ours, float) and isinstance(theirs, float):
        return struct.pack("<d", ours) == struct.pack("<d", theirs)
    return ours == theirs


class ReplicaTypeError(ShoalError):
    """A replica's scan holds column ``column`` as ``replica_type``, which the channels' ``channel_type``
    does not compare with value for value: its rows are not the table's rows, whatever they hold."""

    def __init__(self, column: str, replica_type: pa.DataType, channel_type: pa.DataType) -> None:
        super().__init__(f"its scan holds column {column!r} as {replica_type}, the channels as {channel_type}")
        self.column = column
        self.replica_type = replica_type
        self.channel_type = channel_type


def missing_writes(floors: pa.Table, replica_rows: pa.Table, key_columns: Iterable[str]) -> tuple[int, list[str]]:
    """How many floors ``replica_rows`` (a scan with its GTID columns, with or without its tombstones)
    does not reach, and a few of them (``key=... gtid E:S written|deleted, replica has ...``). A written
    row the replica holds at the very same GTID must hold the values the channel wrote."""
    keys = list(key_columns)
    values = [c for c in floors.column_names if c not in keys and c not in SYSTEM_COLUMNS]
    theirs_names = [*keys, *values, EPOCH_COLUMN, SEQ_COLUMN]
    missing = [c for c in theirs_names if c not in replica_rows.column_names]
    if missing:
        raise ShoalError(f"the replica's scan lacks the columns {missing}")
    if DELETED_COLUMN not in replica_rows.column_names:  # a scan without its tombstones: none is a delete
        replica_rows = replica_rows.append_column(DELETED_COLUMN, pa.array(np.zeros(replica_rows.num_rows, np.bool_)))
    replica_rows = channel_keys(floors.schema, replica_rows, keys)
    renamed = [*keys, *(replica_name(i) for i in range(len(values))), _R_EPOCH, _R_SEQ, _R_DELETED]
    theirs = replica_rows.select([*theirs_names, DELETED_COLUMN]).rename_columns(renamed)
    joined = floors.join(theirs, keys=keys, join_type="left outer")
    held = pc.is_valid(joined.column(_R_EPOCH))
    e, s = joined.column(EPOCH_COLUMN), joined.column(SEQ_COLUMN)
    re, rs = joined.column(_R_EPOCH), joined.column(_R_SEQ)
    their_delete = pc.fill_null(joined.column(_R_DELETED), False)
    reaches = gtid_above(re, rs, e, s, or_equal=True)
    same_gtid = pc.fill_null(pc.and_(pc.equal(re, e), pc.equal(rs, s)), False)
    deleted = joined.column(DELETED_COLUMN)
    alike = pa.chunked_array([pa.array(np.ones(joined.num_rows, np.bool_))])
    for i, name in enumerate(values):
        try:
            alike = pc.and_(alike, same_values(joined.column(name), joined.column(replica_name(i))))
        except pa.ArrowInvalid as exc:  # a value the channel's type cannot hold (a finer timestamp, say)
            raise ReplicaTypeError(
                name, theirs.schema.field(replica_name(i)).type, floors.schema.field(name).type
            ) from exc
    # a write: reached, and at its own GTID the same row (not a delete, the same values)
    other_at_gtid = pc.and_(same_gtid, pc.or_(their_delete, pc.invert(alike)))
    write_bad = pc.and_(pc.invert(deleted), pc.or_(pc.invert(reaches), other_at_gtid))
    # a delete: no row, a newer version, or its own tombstone
    delete_bad = pc.and_(
        pc.and_(deleted, held), pc.or_(pc.invert(reaches), pc.and_(same_gtid, pc.invert(their_delete)))
    )
    bad = joined.filter(pc.or_(write_bad, delete_bad))
    examples = []
    for row in bad.slice(0, _EXAMPLES).to_pylist():
        key = ", ".join(f"{k}={show(row[k])}" for k in keys)
        what = "deleted" if row[DELETED_COLUMN] else "written"
        at = f"{row[EPOCH_COLUMN]}:{row[SEQ_COLUMN]}"
        theirs_at = f"{row[_R_EPOCH]}:{row[_R_SEQ]}"
        if row[_R_EPOCH] is None:
            has = "no row"
        elif row[_R_DELETED]:
            has = f"a delete at gtid {theirs_at}"
        elif (row[_R_EPOCH], row[_R_SEQ]) == (row[EPOCH_COLUMN], row[SEQ_COLUMN]) and not row[DELETED_COLUMN]:
            differ = [
                f"{c}={show(row[replica_name(i)])} (channel {show(row[c])})"
                for i, c in enumerate(values)
                if not _same_py(row[c], row[replica_name(i)])
            ]
            has = "other values at that gtid: " + ", ".join(differ)
        else:
            has = f"gtid {theirs_at}"
        examples.append(f"{key} {what} at gtid {at}, replica has {has}")
    return bad.num_rows, examples


def channel_keys(channel: pa.Schema, replica_rows: pa.Table, key_columns: Sequence[str]) -> pa.Table:
    """``replica_rows`` with its key and GTID columns as the channels' types (a join needs one type), once
    every column of ``channel`` it holds is of the same kind (:func:`~shoal.segments.merge.same_kind`);
    ReplicaTypeError otherwise, or when a key does not survive the cast."""
    for name in channel.names:
        if name == DELETED_COLUMN or name not in replica_rows.column_names:
            continue
        want, have = channel.field(name).type, replica_rows.schema.field(name).type
        if not same_kind(want, have):
            raise ReplicaTypeError(name, have, want)
        if (name in key_columns or name in (EPOCH_COLUMN, SEQ_COLUMN)) and have != want:
            try:
                replica_rows = replica_rows.set_column(
                    replica_rows.schema.get_field_index(name), name, pc.cast(replica_rows.column(name), want)
                )
            except pa.ArrowInvalid as exc:
                raise ReplicaTypeError(name, have, want) from exc
    return replica_rows


Rows = Callable[[str, str], pa.Table]
"""``rows(server_id, partition_id)``: a replica's scan with its GTID columns and tombstones."""


def gtids_of_two_keys(newest: pa.Table, key_columns: Sequence[str]) -> list[str]:
    """The GTIDs ``newest`` (one row per key) holds for more than one key, each with two of its keys:
    a leader stamps every row it accepts with a GTID of its own, and segments keep them, so a GTID on
    two keys is a row stamped with another write's GTID (a phantom, a lost write's replacement)."""
    return _shown(_keys_per_gtid(newest, key_columns))


def _shown(shared: dict[tuple[int, int], list[str]]) -> list[str]:
    return [f"gtid {e}:{s}: {' and '.join(keys[:2])}" for (e, s), keys in shared.items()]


def _keys_per_gtid(newest: pa.Table, key_columns: Sequence[str]) -> dict[tuple[int, int], list[str]]:
    """The GTIDs ``newest`` (one row per key and GTID) holds for more than one key, with those keys."""
    if newest.num_rows < 2:
        return {}
    by = [EPOCH_COLUMN, SEQ_COLUMN]
    counts = newest.select(by).group_by(by).aggregate([([], "count_all")])
    twice = counts.filter(pc.greater(counts.column("count_all"), 1))
    if twice.num_rows == 0:
        return {}
    held = newest.join(twice.select(by), keys=by, join_type="left semi")
    held = held.sort_by([(c, "ascending") for c in (*by, *key_columns)])
    out: dict[tuple[int, int], list[str]] = {}
    for row in held.select([*key_columns, *by]).to_pylist():
        key = ", ".join(f"{k}={show(row[k])}" for k in key_columns)
        out.setdefault((row[EPOCH_COLUMN], row[SEQ_COLUMN]), []).append(key)
    return out


def floor_problems(floors: WalFloors) -> tuple[pa.Table | None, list[str]]:
    """The floors (:meth:`WalFloors.floors`, None when no channel held a row), and what makes them a
    mismatch by themselves: records or segments that could not be read, and keys two channels hold
    at one GTID with different rows (found while the floors are merged, so they are merged first)."""
    newest = floors.floors()
    problems = [f"undecodable {u}" for u in floors.undecodable[:3]]
    shared = _shown(floors.shared)  # every version merged (each key's newest among them)
    if shared:
        problems.append(f"{len(shared)} GTID(s) held by more than one key on the channels ({'; '.join(shared[:3])})")
    if floors.conflicts:
        shown = "; ".join(floors.conflicts[:3])
        problems.append(
            f"{len(floors.conflicts)} key(s) held at the same GTID with different rows on the channels ({shown})"
        )
    return newest, problems


Seen = Callable[[str, pa.Table], None]
"""``seen(who, scan)``: a replica's scan once checked, its key columns of the channels' types."""


def replicas_missing(
    newest: pa.Table,
    replicas: Sequence[ReplicaDescription],
    rows: Rows,
    key_columns: Sequence[str],
    *,
    seen: Seen | None = None,
) -> list[str]:
    """One problem per replica that does not reach every floor of ``newest``; ``seen`` is given each
    scan that could be compared (:mod:`~shoal_app.cli.verify_newer` looks at it again)."""
    problems = []
    for r in replicas:
        who = f"{r.server_id}#{r.placement_id}"
        try:
            scan = rows(r.server_id, r.partition_id)
            count, examples = missing_writes(newest, scan, key_columns)
            keyed = channel_keys(newest.schema, scan, key_columns)
            if seen is not None:
                seen(who, keyed)
        except ReplicaTypeError as exc:
            problems.append(f"{who}: {exc}")
            continue
        except ShoalError as exc:
            problems.append(f"{who}: cannot scan: {type(exc).__name__}: {exc}")
            continue
        if count:
            problems.append(f"{who} misses {count} of {newest.num_rows} writes on the channels ({'; '.join(examples)})")
        twice = held_more_than_once(scan, key_columns)
        if twice:
            problems.append(f"{who} holds {twice} key(s) more than once in its scan")
        shared = gtids_held_twice(keyed, newest, key_columns)
        if shared:
            problems.append(f"{who} holds {len(shared)} GTID(s) on another key too ({'; '.join(shared[:3])})")
        nulls = null_keys(scan, key_columns)
        if nulls:
            problems.append(f"{who} holds {nulls} row(s) with a null primary key column (in no partition's range)")
        unstamped = null_gtids(scan)
        if unstamped:
            problems.append(f"{who} holds {unstamped} row(s) with a null GTID (no leader stamped them)")
    return problems


def gtids_held_twice(scan: pa.Table, newest: pa.Table, key_columns: Sequence[str]) -> list[str]:
    """The GTIDs ``scan`` (its keys of the channels' types, :func:`channel_keys`) holds on a key other
    than one it, or the channels' newest versions (``newest``), hold them on
    (:func:`gtids_of_two_keys`): a leader stamps one GTID per row, so such a row is one nobody wrote,
    whatever its epoch (the newer check judges only epochs the channels account for)."""
    by = [*key_columns, EPOCH_COLUMN, SEQ_COLUMN]
    mine = scan.select(by).drop_null()
    versions = pa.concat_tables([newest.select(by), mine], promote_options="permissive")
    return gtids_of_two_keys(versions.group_by(by).aggregate([]), key_columns)


def null_gtids(scan: pa.Table) -> int:
    """How many rows of ``scan`` have a null ``_shoal_epoch`` or ``_shoal_seq``: never a version a
    leader wrote, and one the GTID comparisons of the newer check would all skip (a null is not above)."""
    if scan.num_rows == 0:
        return 0
    null = pc.or_(pc.is_null(scan.column(EPOCH_COLUMN)), pc.is_null(scan.column(SEQ_COLUMN)))
    return int(pc.sum(null.cast(pa.int64())).as_py() or 0)


def null_keys(scan: pa.Table, key_columns: Sequence[str]) -> int:
    """How many rows of ``scan`` have a null in a primary key column: never a row a leader accepted
    (key columns are NOT NULL), and a node's lowest and highest key leave nulls out."""
    if scan.num_rows == 0:
        return 0
    null = pa.chunked_array([pa.array(np.zeros(scan.num_rows, np.bool_))])
    for name in key_columns:
        null = pc.or_(null, pc.is_null(scan.column(name)))
    return int(pc.sum(null.cast(pa.int64())).as_py() or 0)


def held_more_than_once(scan: pa.Table, key_columns: Sequence[str]) -> int:
    """How many primary keys ``scan`` holds in more than one row (a scan has one version per key;
    the left join of :func:`missing_writes` lets every copy of a key pass)."""
    if scan.num_rows < 2:
        return 0
    counts = scan.select(list(key_columns)).group_by(list(key_columns)).aggregate([([], "count_all")])
    return int(pc.sum(pc.greater(counts.column("count_all"), 1)).as_py() or 0)
