"""Rows versioned by GTID: the system columns every stored row carries, checked and stamped.

Source: TokuMX GTIDs (seed 003): a GTID is ``(primarySeqNumber, GTSeqNumber)``; the first part
changes only when the primary changes, the second increases with each transaction, and "no GTID
in the system will ever be assigned twice". In shoal (DESIGN.md section 2) that is
``(epoch, seq)``: the partition's leader epoch and a sequence within it. Each stored row carries:

* ``_shoal_epoch`` (int64) and ``_shoal_seq`` (int64): the GTID of the write that produced it;
* ``_shoal_deleted`` (bool): the write was a delete (a tombstone keeps the key and its GTID).

Columnar; no per-row Python.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from shoal.segments.errors import MergeInputError

EPOCH_COLUMN = "_shoal_epoch"
SEQ_COLUMN = "_shoal_seq"
DELETED_COLUMN = "_shoal_deleted"
SYSTEM_COLUMNS = (EPOCH_COLUMN, SEQ_COLUMN, DELETED_COLUMN)
SYSTEM_TYPES = {EPOCH_COLUMN: pa.int64(), SEQ_COLUMN: pa.int64(), DELETED_COLUMN: pa.bool_()}


def _key_type_problem(t: pa.DataType) -> str | None:
    if pa.types.is_dictionary(t):
        return _key_type_problem(t.value_type)
    if pa.types.is_floating(t):
        return "floating point (NaN != NaN; use an integer, decimal or string key)"
    if pa.types.is_nested(t) or pa.types.is_null(t):
        return f"not orderable ({t})"
    return None


def check_versioned(table: pa.Table, key_columns: Sequence[str]) -> None:
    """Raise MergeInputError unless ``table`` has the system columns and a usable primary key.

    The key: one or more distinct, non-system columns of an orderable, non-float type, no nulls.
    System columns: the exact types above and no nulls.
    """
    if not isinstance(table, pa.Table):
        raise MergeInputError(f"expected a pyarrow.Table, got {type(table).__name__}")
    names = table.column_names
    if len(set(names)) != len(names):
        raise MergeInputError(f"duplicate column names in {names}")
    if isinstance(key_columns, str) or not key_columns or len(set(key_columns)) != len(key_columns):
        raise MergeInputError(f"key_columns must be a non-empty list of distinct column names, got {key_columns!r}")
    for name in SYSTEM_COLUMNS:
        if name not in names:
            raise MergeInputError(f"missing system column {name}")
        col = table.column(name)
        if col.type != SYSTEM_TYPES[name]:
            raise MergeInputError(f"system column {name} must be {SYSTEM_TYPES[name]}, got {col.type}")
        if col.null_count:
            raise MergeInputError(f"system column {name} has {col.null_count} nulls")
    for name in key_columns:
        if name in SYSTEM_COLUMNS or name not in names:
            raise MergeInputError(f"key column {name!r} is missing or is a system column")
        col = table.column(name)
        problem = _key_type_problem(col.type)
        if problem:
            raise MergeInputError(f"key column {name!r} is {problem}")
        if col.null_count:
            raise MergeInputError(f"key column {name!r} has {col.null_count} nulls (a primary key is never null)")


def stamp(table: pa.Table, *, epoch: int, first_seq: int, deleted: bool | pa.Array = False) -> pa.Table:
    """Append the system columns: GTIDs ``(epoch, first_seq + i)`` for row i, and the tombstone flag.

    One GTID per row, so two writes of the same key in one batch stay ordered (the later row wins).
    """
    n = table.num_rows
    if not 0 <= epoch < 2**63 or not 0 <= first_seq <= 2**63 - 1 - n:
        raise MergeInputError(f"GTID out of range: epoch {epoch}, seq {first_seq}..{first_seq + n}")
    for name in SYSTEM_COLUMNS:
        if name in table.column_names:
            raise MergeInputError(f"table already has system column {name}")
    dele = pa.array(np.full(n, deleted, dtype=np.bool_)) if isinstance(deleted, bool) else deleted
    if len(dele) != n or dele.type != pa.bool_() or dele.null_count:
        raise MergeInputError("deleted flags must be a non-null bool array with one value per row")
    epochs = pa.array(np.full(n, epoch, dtype=np.int64))
    seqs = pa.array(np.arange(first_seq, first_seq + n, dtype=np.int64))
    return (
        table.append_column(pa.field(EPOCH_COLUMN, pa.int64(), nullable=False), epochs)
        .append_column(pa.field(SEQ_COLUMN, pa.int64(), nullable=False), seqs)
        .append_column(pa.field(DELETED_COLUMN, pa.bool_(), nullable=False), dele)
    )
