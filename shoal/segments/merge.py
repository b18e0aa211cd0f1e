"""Last-writer-wins merge of versioned row sets (segments, WAL batches), by primary key and GTID.

Source: EventQL segment based replication (seed 000), section 3.3: "The merge operation simply
reads in the segment and inserts every row into the local partition like it was a new write ...
repeated writes with the exact same value are idempotent". TokuMX GTIDs (seed 003) order the writes.
DESIGN.md section 5: a primary key keeps the row with the highest GTID ``(epoch, seq)``; deletes are
tombstones with a GTID. Keeping the maximum per key of a *set* of versions makes the merge
idempotent, commutative and associative: every replica that saw the same writes holds the same
rows, whatever order they arrived in.

Columnar (pyarrow compute): one multi-key sort, then a mask of "key differs from the previous row"
built from vectorised comparisons of adjacent keys. No per-row Python. Most inputs (a memtable of
fresh writes, a leader's flush) hold each key once: the merge first sorts the key columns alone,
and when no key repeats that order is already the result (every other sort key only breaks ties
between versions of one key), so the sort over the GTID and value columns is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import SchemaError
from shoal.segments.errors import MajorContentError, MergeInputError
from shoal.segments.versioned import DELETED_COLUMN, EPOCH_COLUMN, SEQ_COLUMN, SYSTEM_COLUMNS, check_versioned


def _unified_schema(tables: Sequence[pa.Table]) -> pa.Schema:
    """The first table's column order and types; a field is nullable if it is in any input."""
    first = tables[0].schema
    names = set(first.names)
    for i, t in enumerate(tables[1:], start=1):
        if set(t.schema.names) != names:
            raise MergeInputError(f"table {i} has columns {sorted(t.schema.names)}, table 0 has {sorted(names)}")
        for f in first:
            other = t.schema.field(f.name)
            if other.type != f.type:
                raise MergeInputError(f"column {f.name!r} is {other.type} in table {i} but {f.type} in table 0")
    fields = [f.with_nullable(any(t.schema.field(f.name).nullable for t in tables)) for f in first]
    return pa.schema(fields, metadata=first.metadata)


def _sortable(col: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """The column as pyarrow can sort and compare it (dictionaries decoded), or None if it cannot.
    Floating point values are sorted by their bits, as :func:`same_values` compares them: a sort
    calls 0.0 and -0.0 (and NaNs of any payload) equal, so a tie between them would go by input
    order."""
    t = col.type
    if pa.types.is_dictionary(t):
        return _sortable(pc.cast(col, t.value_type))
    if pa.types.is_nested(t) or pa.types.is_null(t):
        return None
    if pa.types.is_floating(t) and t.bit_width in _FLOAT_BITS:
        return _bits(col)
    return col


def _version_order(table: pa.Table, key_columns: Sequence[str]) -> pa.Array:
    """Indices sorting by key ascending, then newest GTID first, tombstone first on a tied GTID.

    Remaining value columns break any further tie, so even two different rows carrying the same
    key and GTID (which the protocol never produces) merge the same way in any input order.
    """
    keys: list[tuple[str, str]] = [(k, "ascending") for k in key_columns]
    keys += [(EPOCH_COLUMN, "descending"), (SEQ_COLUMN, "descending"), (DELETED_COLUMN, "descending")]
    taken = set(key_columns) | set(SYSTEM_COLUMNS)
    arrays: dict[str, pa.ChunkedArray] = {}
    for name in table.column_names:
        col = _sortable(table.column(name))
        if col is not None:
            arrays[name] = col
            if name not in taken:
                keys.append((name, "ascending"))
    view = pa.table(arrays)
    return pc.sort_indices(view, sort_keys=keys)  # nulls last (the default) in every version


def _key_view(table: pa.Table, key_columns: Sequence[str]) -> pa.Table:
    """The key columns alone, as pyarrow can sort and compare them."""
    arrays = {}
    for name in key_columns:
        col = _sortable(table.column(name))
        assert col is not None  # check_versioned refused unorderable keys
        arrays[name] = col
    return pa.table(arrays)


def _unique_key_order(table: pa.Table, key_columns: Sequence[str]) -> pa.Array | None:
    """Indices sorting ``table`` by key if no key occurs twice, else None (a full merge is needed).

    With distinct keys the full version order (:func:`_version_order`) equals the key order: its
    further sort keys only break ties between rows of one key.
    """
    view = _key_view(table, key_columns)
    if len(key_columns) == 1 and pa.types.is_integer(view.column(0).type):
        # One integer key (the common case): numpy's unstable sort is 3x pyarrow's stable one, and
        # stability cannot matter when no two keys are equal, which is checked right after.
        keys = view.column(0).combine_chunks().to_numpy()
        order_np = np.argsort(keys, kind="quicksort")
        ranked = keys[order_np]
        if bool(np.all(ranked[1:] != ranked[:-1])):
            return pa.array(order_np)
        return None
    order = pc.sort_indices(view, sort_keys=[(k, "ascending") for k in key_columns])
    first = _first_of_each_key(view.take(order), key_columns)
    if first.null_count == 0 and pc.all(first).as_py():
        return order
    return None


def _first_of_each_key(table: pa.Table, key_columns: Sequence[str]) -> pa.Array:
    """Boolean mask: True for a row whose key differs from the previous row's (and for row 0)."""
    n = table.num_rows
    if n == 0:
        return pa.array([], pa.bool_())
    changed: pa.Array | None = None
    for name in key_columns:
        col = _sortable(table.column(name))
        assert col is not None  # check_versioned refused unorderable keys
        arr = col.combine_chunks()
        neq = pc.not_equal(arr.slice(1), arr.slice(0, n - 1))
        changed = neq if changed is None else pc.or_(changed, neq)
    assert changed is not None
    return pa.concat_arrays([pa.array([True]), changed])


def lww_merge(tables: Sequence[pa.Table], key_columns: Sequence[str], *, drop_tombstones: bool = False) -> pa.Table:
    """Merge versioned tables: one row per key, the one with the highest ``(epoch, seq)``, sorted by key.

    ``drop_tombstones`` removes keys whose newest version is a delete. Only a *full* compaction may
    do that (every version of the partition is an input): a tombstone dropped while an older
    version still exists elsewhere (an unmerged segment, an orphan WAL channel) would let that old
    version come back on the next merge. Without it the merge is idempotent and order-independent.
    The output has the first table's column order and schema metadata.
    """
    if isinstance(tables, pa.Table) or not tables:
        raise MergeInputError("lww_merge needs a non-empty list of tables")
    for t in tables:
        check_versioned(t, key_columns)
    schema = _unified_schema(tables)
    aligned = [pa.Table.from_arrays(t.select(schema.names).columns, schema=schema) for t in tables]
    combined = pa.concat_tables(aligned)
    if combined.num_rows == 0:
        return combined.combine_chunks()
    unique = _unique_key_order(combined, key_columns)
    if unique is not None:
        newest = combined.take(unique).combine_chunks()
    else:
        ordered = combined.take(_version_order(combined, key_columns)).combine_chunks()
        newest = ordered.filter(_first_of_each_key(ordered, key_columns))
    if drop_tombstones:
        newest = newest.filter(pc.invert(newest.column(DELETED_COLUMN)))
    return newest


@dataclass(frozen=True, slots=True)
class MajorDiff:
    """What a major holds against the merge of the segments it replaces (:func:`diff_major`):
    ``missing`` versions of the merge it lacks, ``extra`` rows of its own the merge does not have
    (an anti-join each), ``got_rows`` and ``expected_rows`` (its rows, the merge's), an ``example``,
    and ``changed`` rows of the right version with other values."""

    missing: int
    extra: int
    got_rows: int
    expected_rows: int
    example: str
    changed: int = 0
    """Rows at the merge's version whose values differ (compared only when asked: ``value_columns``)."""

    def error(self, segment_id: str) -> MajorContentError:
        """The refusal of the major ``segment_id`` that these differences make."""
        return MajorContentError(
            segment_id, missing=self.missing, extra=self.extra, changed=self.changed, example=self.example
        )


def check_major(
    sources: Sequence[pa.Table],
    major: pa.Table,
    key_columns: Sequence[str],
    *,
    segment_id: str,
    value_columns: Sequence[str] = (),
) -> None:
    """Refuse (:class:`MajorContentError`) a major whose rows are not those of ``lww_merge(sources)``.

    DESIGN.md section 5: a major replaces the latest major and every minor after it, and once the
    Tail truncates the WAL and segments channels behind it, it is the only copy of their rows; a
    major that lost a row, kept a stale version, folded a delete away or changed a value (a type
    converted on the way through Spark) would lose data silently. The keys and the version columns
    are compared (one row per key, its GTID and delete flag), then, for the rows whose versions
    match, the ``value_columns`` (:func:`same_values`: null equals null, floats are equal when their
    bits are, so 0.0 is not -0.0); tombstones must be kept (compaction never drops them:
    :func:`lww_merge` ``drop_tombstones``).
    :func:`shoal.segments.major_check.check_major_files` feeds it from files in bounded memory.
    """
    diff = diff_major(sources, major, key_columns, value_columns=value_columns)
    if diff is not None:
        raise diff.error(segment_id)


def diff_major(
    sources: Sequence[pa.Table], major: pa.Table, key_columns: Sequence[str], *, value_columns: Sequence[str] = ()
) -> MajorDiff | None:
    """None when ``major``'s key and version columns are ``lww_merge(sources)``'s, in any row order,
    and so are its ``value_columns``; otherwise what differs (:class:`MajorDiff`; ``extra`` counts a
    key held twice too)."""
    columns = [*key_columns, *SYSTEM_COLUMNS]
    wanted = [*columns, *value_columns]
    merged = lww_merge([t.select(wanted) for t in sources], key_columns) if sources else None
    got_all = major.select(wanted)
    got = got_all.select(columns)
    if merged is None:
        if got.num_rows == 0:
            return None
        return MajorDiff(0, got.num_rows, got.num_rows, 0, "rows with nothing to merge")
    expected = merged.select(columns)
    comparable = [_comparable(expected, columns), _comparable(got, columns)]
    for name in columns:
        want, have = comparable[0].schema.field(name).type, comparable[1].schema.field(name).type
        if want != have:
            return MajorDiff(0, 0, got.num_rows, expected.num_rows, f"column {name} is {have}, {want} in the segments")
    if comparable[0].num_rows == comparable[1].num_rows:
        if comparable[0].equals(comparable[1]):  # the usual case: both in key order
            return _diff_values(merged, got_all, key_columns, value_columns)
        order = [(c, "ascending") for c in columns]
        exp_order, got_order = (pc.sort_indices(t, sort_keys=order) for t in comparable)
        if comparable[0].take(exp_order).equals(comparable[1].take(got_order)):
            return _diff_values(merged.take(exp_order), got_all.take(got_order), key_columns, value_columns)
    missing = comparable[0].join(comparable[1], keys=columns, join_type="left anti")
    extra = comparable[1].join(comparable[0], keys=columns, join_type="left anti")
    if missing.num_rows:
        example = f"missing {_describe(missing.slice(0, 1).to_pylist()[0])}"
    elif extra.num_rows:
        example = f"extra {_describe(extra.slice(0, 1).to_pylist()[0])}"
    else:
        example = f"{got.num_rows} rows for {expected.num_rows} keys (a key held twice)"
    return MajorDiff(
        missing=missing.num_rows,
        extra=max(extra.num_rows, got.num_rows - expected.num_rows),
        got_rows=got.num_rows,
        expected_rows=expected.num_rows,
        example=example,
    )


def _diff_values(
    expected: pa.Table, got: pa.Table, key_columns: Sequence[str], value_columns: Sequence[str]
) -> MajorDiff | None:
    """The rows of two tables aligned row by row (same keys and versions) whose ``value_columns``
    differ (:func:`same_values`)."""
    differs: pa.ChunkedArray | pa.Array | None = None
    first: tuple[int, str] | None = None
    for name in value_columns:
        a, b = (decoded(t.column(name)) for t in (expected, got))
        if a.type != b.type:
            return MajorDiff(
                0, 0, got.num_rows, expected.num_rows, f"column {name} is {b.type}, {a.type} in the segments"
            )
        column_differs = pc.invert(same_values(a, b))
        if first is None and pc.any(column_differs).as_py():
            first = (pc.index(column_differs, True).as_py(), name)
        differs = column_differs if differs is None else pc.or_(differs, column_differs)
    if first is None or differs is None:
        return None
    at, name = first
    row = expected.select([*key_columns, *SYSTEM_COLUMNS]).slice(at, 1).to_pylist()[0]
    want, have = expected.column(name)[at].as_py(), got.column(name)[at].as_py()
    return MajorDiff(
        missing=0,
        extra=0,
        got_rows=got.num_rows,
        expected_rows=expected.num_rows,
        example=f"{name} of {_describe(row)} is {have!r:.60}, {want!r:.60} in the segments",
        changed=int(pc.sum(differs).as_py() or 0),
    )


def decoded(values: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """``values`` with a dictionary decoded to its value type (anything else as it is)."""
    return pc.cast(values, values.type.value_type) if pa.types.is_dictionary(values.type) else values


_FLOAT_BITS = {16: pa.uint16(), 32: pa.uint32(), 64: pa.uint64()}


def _bits(values: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """Floating point ``values`` as the unsigned integers of their bits (nulls kept)."""
    bits = _FLOAT_BITS[values.type.bit_width]
    if isinstance(values, pa.ChunkedArray):
        return pa.chunked_array([c.view(bits) for c in values.chunks], bits)
    return values.view(bits)


def same_values(ours: pa.ChunkedArray | pa.Array, theirs: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """Row by row, whether two columns of equal length hold the same value: two nulls are the same,
    a null and a value are not, and floating point values are the same when their bits are: 0.0 and
    -0.0 differ (``1/x`` tells them apart), and so do NaNs with different payloads, while a NaN is
    the same as itself. Every copy of a row keeps its bits (Parquet, Arrow IPC and the Spark
    compaction do not canonicalize), so a check that called 0.0 and -0.0 equal would pass a value
    that changed. Dictionaries are decoded; ``theirs`` is cast to ``ours``' type when they differ, except
    a wider float, to which ``ours`` is cast instead (a float32 1.0 is not a float64 1.0000000001)."""
    ours, theirs = decoded(ours), decoded(theirs)
    if (
        pa.types.is_floating(ours.type)
        and pa.types.is_floating(theirs.type)
        and theirs.type.bit_width > ours.type.bit_width
    ):
        ours = pc.cast(ours, theirs.type)  # compared in the wider type: narrowing theirs would round it to ours
    elif theirs.type != ours.type:
        theirs = pc.cast(theirs, ours.type)
    if pa.types.is_floating(ours.type):
        ours, theirs = _bits(ours), _bits(theirs)
    both_null = pc.and_(pc.is_null(ours), pc.is_null(theirs))
    return pc.or_(pc.fill_null(pc.equal(ours, theirs), False), both_null)


def same_kind(ours: pa.DataType, theirs: pa.DataType) -> bool:
    """Whether values of ``theirs`` may be compared with, or converted to, ``ours``: the same type once
    a dictionary is decoded, or two of one kind (integers, floats, timestamps, strings, binaries), so
    a wider timestamp or a large string qualifies, while ``1`` never passes for ``"1"``."""
    ours = ours.value_type if pa.types.is_dictionary(ours) else ours
    theirs = theirs.value_type if pa.types.is_dictionary(theirs) else theirs
    if ours == theirs:
        return True
    kinds = (
        pa.types.is_integer,
        pa.types.is_floating,
        pa.types.is_timestamp,
        lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
        lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t),
    )
    return any(kind(ours) and kind(theirs) for kind in kinds)


def exactly_as(values: pa.ChunkedArray | pa.Array, target: pa.DataType, *, name: str) -> pa.ChunkedArray | pa.Array:
    """``values`` as ``target`` when that keeps every value (the same kind, and converting back gives
    them all again: float64 1e300 is no float32, a microsecond is no millisecond); SchemaError
    otherwise. Arrow's own conversion would turn integers into their text or a float into an
    infinity without a word."""
    if values.type == target:
        return values
    if same_kind(target, values.type):
        try:
            converted, plain = pc.cast(values, target), decoded(values)
            if pc.all(same_values(plain, pc.cast(converted, plain.type))).as_py() is not False:
                return converted
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    raise SchemaError(f"column {name!r} holds {values.type}, which the table's {target} cannot hold exactly")


def check_received_columns(have: pa.Schema, want: pa.Schema, *, segment_id: str) -> None:
    """Refuse (:class:`SchemaError`) a segment received from another replica whose columns are not the
    table's stored ones: a column more or less, or one of another kind (:func:`same_kind`: a string
    column holding integers). Stored, it would make every later scan of the partition fail; scans
    convert a column of the same kind exactly (:func:`exactly_as`) or refuse it."""
    theirs = {f.name: f.type for f in have}
    ours = {f.name: f.type for f in want}
    more, less = sorted(set(theirs) - set(ours)), sorted(set(ours) - set(theirs))
    other = [
        f"{n} is {theirs[n]}, the table's is {t}"
        for n, t in ours.items()
        if n in theirs and not same_kind(t, theirs[n])
    ]
    if more or less or other:
        wrong = [*(f"a column {n} the table does not have" for n in more), *(f"no column {n}" for n in less), *other]
        raise SchemaError(f"segment {segment_id}: its columns are not the table's: {'; '.join(wrong)}")


def check_major_schema(replaced: pa.Schema, major: pa.Schema, *, segment_id: str) -> None:
    """Refuse (:class:`MajorContentError`) a major whose columns are not those of the segments it
    replaces, by name and type (nullability aside): a major with a column more, a column less or a
    column of another type (a dictionary, a large string, a delete flag that is not a bool) would
    make every later merge and scan of the partition fail."""
    want = {f.name: f.type for f in replaced}
    have = {f.name: f.type for f in major}
    if want == have:
        return
    more, less = sorted(set(have) - set(want)), sorted(set(want) - set(have))
    other = [f"{n} is {have[n]}, {want[n]} in the segments" for n in want if n in have and have[n] != want[n]]
    example = "; ".join(
        [*(f"a column {n} the segments do not have" for n in more), *(f"no column {n}" for n in less), *other]
    )
    raise MajorContentError(segment_id, missing=0, extra=0, example=example)


def _comparable(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``columns`` as a hash join can take them: dictionaries decoded, the delete flag as int8."""
    arrays = {}
    for name in columns:
        col = decoded(table.column(name))
        if pa.types.is_boolean(col.type):
            col = pc.cast(col, pa.int8())
        arrays[name] = col
    return pa.table(arrays)


def _describe(row: dict[str, object]) -> str:
    keys = ", ".join(f"{k}={v!r}" for k, v in row.items() if k not in SYSTEM_COLUMNS)
    gtid = f"{row[EPOCH_COLUMN]}:{row[SEQ_COLUMN]}"
    return f"{keys} at gtid {gtid}" + (" (a delete)" if row[DELETED_COLUMN] else "")
