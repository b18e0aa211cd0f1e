"""``shoal verify``'s check of replica versions newer than the channels (DESIGN.md section 6).

The coverage check (:mod:`~shoal_app.cli.verify_coverage`) lets a replica's version of a key pass
when its GTID is at or above the channels' newest version of that key: a later write may have
replaced it. That alone would pass a version nobody wrote: every replica holding a tombstone, or
other values, at a GTID no channel holds reads as "a later delete". Such a version is either a
write that landed after verify read the channels (live writes), one whose channel is gone (a
leaving placement's, deleted by its UNLOAD_FINAL), one the Tail truncated, or a phantom. What tells
them apart:

- one placement writes an epoch, in GTID order, and its WAL channel holds every GTID of that epoch
  from its Tail on: a version at an epoch a WAL record read carries, at or above the lowest
  sequence number read for it (:attr:`WalFloors.first_seq`), was on that channel;
- a leader appends a batch's rows to its memtable only after the transaction that commits its WAL
  record (DESIGN.md section 4), and followers read committed records only, so every version a
  replica shows was on a channel, committed, before the replica was scanned;
- epochs come from the partition's epoch znode, which only grows (a split seeds its children's at
  the parent's): a version whose epoch is above the one ZooKeeper holds after the scans was never
  written by a leader.

So the versions above their key's newest on the channels (:func:`newer_than_floors`) that a WAL
channel accounts for, or that lie above everything read (a write after the read, a new leader's
epoch), make verify read the partition's channels again after the scans, keeping every version at
their keys and GTIDs (:attr:`WalFloors.keep`). Then (:func:`newer_problems`) each one a WAL channel
of either read accounts for, or whose epoch is ZooKeeper's current one while that leader's WAL
channel exists (whatever it wrote is on its channels, WAL or segments), must be on a channel at its
GTID with the same delete flag and values; only one whose WAL record the Tail already truncated may
instead be replaced there by a newer version of its key (a write after the scan, whose predecessor
a major may have dropped from the segments channel). None may carry an epoch above ZooKeeper's.
What the second read finds wrong by itself (two rows at one GTID, a broken chain) is reported as
well. Records the Tail truncated between the reads are in a segment the second read finds; a Tail
that moves under it makes the partition's channels read again, as for the first read.

A version at an epoch a WAL channel read has records of, but below the first of them (the Tail
truncated its record), is judged as well (:func:`known_epoch`): the Tail never passes what segments
cover, so the second read must find it in a segment, or a newer version of its key.

Not checked: a version at an epoch that left no WAL record on the channels read (all truncated, or
its channel gone) at or below ZooKeeper's epoch, unless it is ZooKeeper's current one: then it is
judged while that leader's WAL channel exists, and is a mismatch when the channel is gone
(``shoal_app.cli.verify.coverage``: a leader creates its channel before it stamps a row). A split child's
versions at its parent's epochs are judged against the parent's channels
(:func:`~shoal_app.cli.verify_retired.phantoms`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import ShoalError
from shoal.segments.merge import same_values
from shoal.segments.versioned import DELETED_COLUMN, EPOCH_COLUMN, SEQ_COLUMN, SYSTEM_COLUMNS
from shoal_app.cli.verify_coverage import WalFloors, gtid_above, replica_name, show

Gtid = tuple[int, int]

_EXAMPLES = 3
_ROW = replica_name("row")
_FIRST = replica_name("first")


def _flags(n: int, value: bool) -> pa.ChunkedArray:
    return pa.chunked_array([pa.array(np.full(n, value, dtype=np.bool_))])


def newer_than_floors(scan: pa.Table, floors: pa.Table | None, key_columns: Sequence[str]) -> pa.Table:
    """The rows of ``scan`` (its key columns of the channels' types) whose key the channels do not
    hold or hold at a lower GTID than the scan (``floors``: the newest version per key read). Only
    the keys, GTIDs and row numbers are joined; the rows are then taken from ``scan``."""
    if scan.num_rows == 0 or floors is None or floors.num_rows == 0:
        return scan
    keys = list(key_columns)
    theirs = floors.select([*keys, EPOCH_COLUMN, SEQ_COLUMN]).rename_columns(
        [*keys, replica_name("epoch"), replica_name("seq")]
    )
    mine = scan.select([*keys, EPOCH_COLUMN, SEQ_COLUMN]).append_column(
        _ROW, pa.array(np.arange(scan.num_rows, dtype=np.int64))
    )
    joined = mine.join(theirs, keys=keys, join_type="left outer")
    e, s = joined.column(replica_name("epoch")), joined.column(replica_name("seq"))
    newer = pc.or_(pc.is_null(e), gtid_above(joined.column(EPOCH_COLUMN), joined.column(SEQ_COLUMN), e, s))
    return scan.take(np.sort(joined.filter(newer).column(_ROW).to_numpy()))


def accounted(rows: pa.Table, first_seq: Mapping[int, int]) -> pa.ChunkedArray:
    """Row by row, whether a WAL channel read holds every GTID of the row's epoch from below its
    sequence number on (:attr:`WalFloors.first_seq`)."""
    if not first_seq:
        return _flags(rows.num_rows, False)
    epochs = pa.array(list(first_seq), rows.schema.field(EPOCH_COLUMN).type)
    firsts = pa.array(list(first_seq.values()), rows.schema.field(SEQ_COLUMN).type)
    where = pc.index_in(rows.column(EPOCH_COLUMN), value_set=epochs)
    first = pc.take(firsts, where)
    return pc.fill_null(pc.greater_equal(rows.column(SEQ_COLUMN), first), False)


def known_epoch(rows: pa.Table, first_seq: Mapping[int, int]) -> pa.ChunkedArray:
    """Row by row, whether a WAL channel read holds records of the row's epoch (at any sequence
    number). Below the first of them, the Tail truncated the records, and the Tail never passes what
    segments cover (DESIGN.md section 6): such a version of a key is in a segment, or replaced there
    by a newer one, so one newer than the channels' was never written or was lost from them."""
    if not first_seq:
        return _flags(rows.num_rows, False)
    epochs = pa.array(list(first_seq), rows.schema.field(EPOCH_COLUMN).type)
    return pc.fill_null(pc.is_in(rows.column(EPOCH_COLUMN), value_set=epochs), False)


def to_read_again(newer: pa.Table, first_seq: Mapping[int, int], high: Gtid | None, led: int | None = None) -> pa.Table:
    """The rows of ``newer`` (:func:`newer_than_floors`) the second read can judge: those a WAL
    channel accounts for (:func:`accounted`) or holds records of the epoch of (:func:`known_epoch`:
    below its first record, the Tail truncated them into segments), those above ``high``, everything the first read held
    (a write after it, or a new leader's epoch), and those of epoch ``led`` (ZooKeeper's current
    epoch, given when its leader's WAL channel exists: whatever it wrote is on its channels)."""
    if newer.num_rows == 0:
        return newer
    after = (
        _flags(newer.num_rows, True)
        if high is None
        else gtid_above(newer.column(EPOCH_COLUMN), newer.column(SEQ_COLUMN), high[0], high[1])
    )
    keep = pc.or_(pc.or_(accounted(newer, first_seq), known_epoch(newer, first_seq)), after)
    if led is not None:
        keep = pc.or_(keep, pc.fill_null(pc.equal(newer.column(EPOCH_COLUMN), led), False))
    return newer.filter(keep)


def unexplained(
    replica: pa.Table, versions: pa.Table, newest: pa.Table | None, key_columns: Sequence[str]
) -> tuple[int, list[str]]:
    """How many rows of ``replica`` (versions to explain, its key columns of the channels' types) are
    neither one of ``versions`` (same key, GTID, delete flag and, for a written row, values) nor
    replaced by a newer version of their key in ``newest`` (the newest version per key read); and a
    few of them."""
    keys = list(key_columns)
    values = [c for c in versions.column_names if c not in keys and c not in SYSTEM_COLUMNS]
    if DELETED_COLUMN not in replica.column_names:
        replica = replica.append_column(DELETED_COLUMN, pa.array(np.zeros(replica.num_rows, dtype=np.bool_)))
    gtid = [EPOCH_COLUMN, SEQ_COLUMN]
    mine = replica.select([*keys, *gtid, *values, DELETED_COLUMN]).append_column(
        _ROW, pa.array(np.arange(replica.num_rows, dtype=np.int64))
    )
    renamed = [*keys, *gtid, *(replica_name(i) for i in range(len(values))), replica_name("deleted"), _ROW]
    mine = mine.rename_columns(renamed)
    explained: list[pa.Array] = []
    if versions.num_rows:
        same = mine.join(versions.select([*keys, *gtid, *values, DELETED_COLUMN]), keys=[*keys, *gtid])
        ok = pc.equal(pc.fill_null(same.column(replica_name("deleted")), False), same.column(DELETED_COLUMN))
        alike = _flags(same.num_rows, True)
        for i, name in enumerate(values):
            try:
                alike = pc.and_(alike, same_values(same.column(name), same.column(replica_name(i))))
            except pa.ArrowInvalid:  # a value the channel's type cannot hold: not the channel's row
                alike = _flags(same.num_rows, False)
        ok = pc.and_(ok, pc.or_(same.column(DELETED_COLUMN), alike))
        explained.append(same.filter(ok).column(_ROW).combine_chunks())
    if newest is not None and newest.num_rows:
        later = newest.select([*keys, *gtid]).rename_columns([*keys, replica_name("epoch"), replica_name("seq")])
        joined = mine.select([*keys, *gtid, _ROW]).join(later, keys=keys)
        newer = gtid_above(
            joined.column(replica_name("epoch")),
            joined.column(replica_name("seq")),
            joined.column(EPOCH_COLUMN),
            joined.column(SEQ_COLUMN),
        )
        explained.append(joined.filter(newer).column(_ROW).combine_chunks())
    found = pa.concat_arrays(explained) if explained else pa.array([], pa.int64())
    bad = mine.filter(pc.invert(pc.is_in(mine.column(_ROW), value_set=found)))
    held: set[tuple[object, ...]] = set()
    if versions.num_rows and bad.num_rows:
        held = {
            (*(r[k] for k in keys), r[EPOCH_COLUMN], r[SEQ_COLUMN]) for r in versions.select([*keys, *gtid]).to_pylist()
        }
    examples = []
    for row in bad.slice(0, _EXAMPLES).to_pylist():
        key = ", ".join(f"{k}={show(row[k])}" for k in keys)
        what = "a delete" if row[replica_name("deleted")] else "a row"
        where = (*(row[k] for k in keys), row[EPOCH_COLUMN], row[SEQ_COLUMN])
        why = "the channels hold another row at that gtid" if where in held else "no channel holds that gtid"
        examples.append(f"{key}: {what} at gtid {row[EPOCH_COLUMN]}:{row[SEQ_COLUMN]}, {why}")
    return bad.num_rows, examples


def newer_problems(
    newer: Mapping[str, pa.Table],
    late: WalFloors,
    first_seq: Mapping[int, int],
    epoch_now: Callable[[], tuple[int, str | None]] | None,
    present: Collection[str] = (),
) -> list[str]:
    """One problem per replica (``newer``: who -> its versions :func:`to_read_again` kept) holding a
    version the channels, read again after the scans into ``late``, do not explain
    (:func:`unexplained`) while something says they must hold it, or one no leader wrote.

    ``epoch_now()``: the partition's epoch in ZooKeeper, read after the scans, and its leader's WAL
    channel (not checked when None). A version is judged when a WAL channel of either read
    (``first_seq`` of the first, ``late.first_seq`` of the second) holds its epoch from below its
    sequence number on, or when its epoch is ZooKeeper's and that leader's WAL channel exists
    (``present``: its writes are on its channels, WAL or segments, whatever the Tail truncated);
    one the second read's WAL channel holds the record of must be that very version, a newer
    version of its key does not excuse it. A version whose epoch is above ZooKeeper's is a mismatch."""
    keys = list(late.table.primary_key)
    newest, versions = late.floors(), late.kept()
    firsts = dict(first_seq)
    for epoch, seq in late.first_seq.items():
        firsts[epoch] = min(seq, firsts.get(epoch, seq))
    problems = []
    ceiling: tuple[int, str | None] | None = None
    if epoch_now is not None and any(t.num_rows for t in newer.values()):
        try:
            ceiling = epoch_now()
        except ShoalError as exc:  # ZooKeeper not answering: the epochs stay unchecked, and say so
            problems.append(f"the partition's epoch in ZooKeeper could not be read: {type(exc).__name__}: {exc}")
    for who, rows in newer.items():
        judged = pc.or_(accounted(rows, firsts), known_epoch(rows, firsts))
        if ceiling is not None:
            epoch, leader_wal = ceiling
            beyond = rows.filter(pc.greater(rows.column(EPOCH_COLUMN), epoch))
            if beyond.num_rows:
                shown = "; ".join(
                    ", ".join(f"{k}={show(r[k])}" for k in keys) + f" at gtid {r[EPOCH_COLUMN]}:{r[SEQ_COLUMN]}"
                    for r in beyond.slice(0, _EXAMPLES).to_pylist()
                )
                problems.append(
                    f"{who} holds {beyond.num_rows} version(s) with an epoch above the partition's epoch "
                    f"{epoch} in ZooKeeper, which no leader has had ({shown})"
                )
            if leader_wal is not None and leader_wal in present:
                judged = pc.or_(judged, pc.equal(rows.column(EPOCH_COLUMN), epoch))
            keep = pc.less_equal(rows.column(EPOCH_COLUMN), epoch)
            rows, judged = rows.filter(keep), judged.filter(keep)
        rows = rows.filter(judged)
        exact = accounted(rows, late.first_seq)  # its WAL record was in the second read
        count, examples = unexplained(rows.filter(exact), versions, None, keys)
        more, others = unexplained(rows.filter(pc.invert(exact)), versions, newest, keys)
        count, examples = count + more, (examples + others)[:_EXAMPLES]
        if count:
            problems.append(
                f"{who} holds {count} version(s) newer than the channels' that the channels should hold "
                f"and, read again after its scan, do not ({'; '.join(examples)})"
            )
    return problems
