"""``shoal verify``'s coverage check: every write still on a WAL channel is in every replica (DESIGN.md section 6).

Replicas that agree with each other can still agree on the wrong rows: a compaction that kept an
older version, a fast-forward to a segment built from nothing, a leader that reused GTIDs. What the
channels still hold (each WAL channel from its Tail to its end, committed records only) is writes
every replica must reflect: a leader commits a WAL record in the same transaction as the ingest
offsets it accepts, a new leader adopts its predecessor's channel to the end, so every committed
record is an accepted write.

For each primary key on those channels, the newest version (highest GTID, TokuMX seed 003; a
delete is a tombstone with its GTID) is the *floor* a replica's row must reach:

- a written row: the replica holds the key with a GTID at or above it (a later write may have
  replaced it, on a channel already truncated), and at that very GTID the values the WAL record
  wrote: every replica holding the same wrong values at the right GTID (a compaction that stamped
  an older version's values with the newest GTID, then fast-forwarded everywhere) is a mismatch too;
- a delete: the replica does not hold the key, or holds it with a GTID above the delete.

A channel is a suffix of its placement's writes (Tail truncates from the front), so what is newer
than a version on a channel is either on the same channel or on a newer leader's channel, where the
GTID comparison finds it. The floors keep the newest whole row per key (values, GTID, delete flag),
merged last-writer-wins as records are read (:func:`shoal.segments.lww_merge`), so the check holds
one row per key, never a channel.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from metadata.table import TableDefinition
from shoal.errors import ShoalError
from shoal.kafka.readers import ChannelRecord
from shoal.segments import lww_merge
from shoal.segments.versioned import DELETED_COLUMN, EPOCH_COLUMN, SEQ_COLUMN, SYSTEM_COLUMNS
from shoal.wire.ingest import ingest_schema
from storage_node.replica import versioned_rows

_MERGE_EVERY = 256
"""Merge the collected floors after this many records, so memory stays one row per key."""

_EXAMPLES = 3


@dataclass
class WalFloors:
    """The newest version per primary key of the WAL records read so far (the whole row, its GTID and delete flag)."""

    table: TableDefinition
    records: int = 0
    undecodable: list[str] = field(default_factory=list)
    """Records whose rows do not decode (``topic@offset: error``): their writes cannot be checked."""
    _parts: list[pa.Table] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._schema = ingest_schema(self.table.arrow_schema(), self.table.primary_key)
        self._columns = [*self.table.arrow_schema().names, *SYSTEM_COLUMNS]

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
            self.undecodable.append(f"{topic}@{item.offset}: {exc}")
            return
        self.records += 1
        if rows.num_rows == 0:
            return
        self._parts.append(rows.select(self._columns))
        if len(self._parts) >= _MERGE_EVERY:
            self._parts = [lww_merge(self._parts, self.table.primary_key)]

    def floors(self) -> pa.Table | None:
        """One row per key: its newest version on the channels read (None when they held no rows)."""
        if not self._parts:
            return None
        self._parts = [lww_merge(self._parts, self.table.primary_key)]
        return self._parts[0]


def _at_or_above(epoch: pa.ChunkedArray, seq: pa.ChunkedArray, floor_epoch: pa.Array, floor_seq: pa.Array) -> pa.Array:
    return pc.or_kleene(
        pc.greater(epoch, floor_epoch), pc.and_kleene(pc.equal(epoch, floor_epoch), pc.greater_equal(seq, floor_seq))
    )


def _same_value(ours: pa.ChunkedArray, theirs: pa.ChunkedArray) -> pa.ChunkedArray:
    """Row by row: equal values, two nulls, or (floating point) two NaNs."""
    if theirs.type != ours.type:
        theirs = theirs.cast(ours.type)
    same = pc.or_(pc.fill_null(pc.equal(ours, theirs), False), pc.and_(pc.is_null(ours), pc.is_null(theirs)))
    if pa.types.is_floating(ours.type):
        same = pc.or_(same, pc.fill_null(pc.and_(pc.is_nan(ours), pc.is_nan(theirs)), False))
    return same


def _replica_name(i: int | str) -> str:
    return f"\x00replica {i}"  # no table column can be named so (metadata.table.validate_column_name)


_R_EPOCH, _R_SEQ = _replica_name("epoch"), _replica_name("seq")


def _show(value: object) -> str:
    return f"{value!r:.40}"


def missing_writes(floors: pa.Table, replica_rows: pa.Table, key_columns: Iterable[str]) -> tuple[int, list[str]]:
    """How many floors ``replica_rows`` (a scan with its GTID columns, tombstones hidden) does not reach,
    and a few of them (``key=... gtid E:S written|deleted, replica has ...``). A written row the replica
    holds at the very same GTID must hold the values the WAL record wrote."""
    keys = list(key_columns)
    values = [c for c in floors.column_names if c not in keys and c not in SYSTEM_COLUMNS]
    theirs_names = [*keys, *values, EPOCH_COLUMN, SEQ_COLUMN]
    missing = [c for c in theirs_names if c not in replica_rows.column_names]
    if missing:
        raise ShoalError(f"the replica's scan lacks the columns {missing}")
    renamed = [*keys, *(_replica_name(i) for i in range(len(values))), _R_EPOCH, _R_SEQ]
    theirs = replica_rows.select(theirs_names).rename_columns(renamed)
    joined = floors.join(theirs, keys=keys, join_type="left outer")
    held = pc.is_valid(joined.column(_R_EPOCH))
    e, s = joined.column(EPOCH_COLUMN), joined.column(SEQ_COLUMN)
    re, rs = joined.column(_R_EPOCH), joined.column(_R_SEQ)
    reaches = pc.fill_null(_at_or_above(re, rs, e, s), False)
    same_gtid = pc.fill_null(pc.and_(pc.equal(re, e), pc.equal(rs, s)), False)
    above = pc.and_(reaches, pc.invert(same_gtid))
    deleted = joined.column(DELETED_COLUMN)
    live_missing = pc.and_(pc.invert(deleted), pc.invert(reaches))
    delete_undone = pc.and_(deleted, pc.and_(held, pc.invert(above)))
    same_values = pa.chunked_array([pa.array([True] * joined.num_rows, pa.bool_())])
    for i, name in enumerate(values):
        same_values = pc.and_(same_values, _same_value(joined.column(name), joined.column(_replica_name(i))))
    wrong_values = pc.and_(pc.and_(pc.invert(deleted), same_gtid), pc.invert(same_values))
    bad = joined.filter(pc.or_(pc.or_(live_missing, delete_undone), wrong_values))
    examples = []
    for row in bad.slice(0, _EXAMPLES).to_pylist():
        key = ", ".join(f"{k}={_show(row[k])}" for k in keys)
        what = "deleted" if row[DELETED_COLUMN] else "written"
        at = f"{row[EPOCH_COLUMN]}:{row[SEQ_COLUMN]}"
        if row[_R_EPOCH] is None:
            has = "no row"
        elif (row[_R_EPOCH], row[_R_SEQ]) == (row[EPOCH_COLUMN], row[SEQ_COLUMN]) and not row[DELETED_COLUMN]:
            differ = [
                f"{c}={_show(row[_replica_name(i)])} (WAL {_show(row[c])})"
                for i, c in enumerate(values)
                if row[c] != row[_replica_name(i)]
            ]
            has = "other values at that gtid: " + ", ".join(differ or ["NaN vs a number"])
        else:
            has = f"gtid {row[_R_EPOCH]}:{row[_R_SEQ]}"
        examples.append(f"{key} {what} at gtid {at}, replica has {has}")
    return bad.num_rows, examples
