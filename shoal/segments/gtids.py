"""The GTIDs a segment holds, read from its own columns (DESIGN.md sections 2 and 7).

A segment's rows carry ``_shoal_epoch`` and ``_shoal_seq`` (:mod:`shoal.segments.versioned`), so the
GTID range of a segment is durable wherever the file is, whatever happened to the WAL channel it
came from (Tail truncates WAL channels; segments stay). :func:`footer_gtid_bound` reads a bound of
the highest GTID from the Parquet footer's row-group statistics (no data pages);
:func:`rows_gtid_range` computes the exact range of rows with pyarrow compute;
:func:`segment_gtid_bound` combines them for a segment file.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shoal.segments.parquet_io import read_segment, read_segment_metadata
from shoal.segments.versioned import EPOCH_COLUMN, SEQ_COLUMN
from shoal.wire.records import Gtid


def footer_gtid_bound(meta: pq.FileMetaData) -> Gtid | None:
    """An upper bound of the highest GTID in a segment file, from its footer statistics (None: no rows).

    Per row group: the highest epoch is exact (``_shoal_epoch`` max); with the highest seq of the row
    group it bounds every GTID in it (exact when the row group holds one epoch). A caller that refuses
    an epoch below the bound's and stamps seqs above it needs no more. A row group without statistics
    raises :class:`ValueError` (the caller reads the columns instead).
    """
    schema = meta.schema.to_arrow_schema()
    epoch_i, seq_i = schema.get_field_index(EPOCH_COLUMN), schema.get_field_index(SEQ_COLUMN)
    if epoch_i < 0 or seq_i < 0:
        raise ValueError("the segment has no GTID columns")
    best: Gtid | None = None
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        if group.num_rows == 0:
            continue
        epochs, seqs = group.column(epoch_i).statistics, group.column(seq_i).statistics
        if epochs is None or seqs is None or not (epochs.has_min_max and seqs.has_min_max):
            raise ValueError(f"row group {g} has no GTID statistics")
        bound = Gtid(int(epochs.max), int(seqs.max))
        best = bound if best is None or bound > best else best
    return best


def rows_gtid_range(rows: pa.Table) -> tuple[Gtid, Gtid] | None:
    """The lowest and highest GTID of versioned rows (None: no rows)."""
    if rows.num_rows == 0:
        return None
    epochs, seqs = rows.column(EPOCH_COLUMN), rows.column(SEQ_COLUMN)
    low, high = pc.min(epochs).as_py(), pc.max(epochs).as_py()
    low_seq = pc.min(seqs.filter(pc.equal(epochs, low))).as_py()
    high_seq = pc.max(seqs.filter(pc.equal(epochs, high))).as_py()
    return Gtid(int(low), int(low_seq)), Gtid(int(high), int(high_seq))


def segment_gtid_range(directory: Path, segment_id: str) -> tuple[Gtid, Gtid] | None:
    """The exact GTID range of a segment file (reads its two GTID columns only)."""
    return rows_gtid_range(read_segment(directory, segment_id, columns=[EPOCH_COLUMN, SEQ_COLUMN]))


def segment_gtid_bound(directory: Path, segment_id: str) -> Gtid | None:
    """A bound of the highest GTID of a segment file: its footer, or its columns when it has no statistics."""
    try:
        return footer_gtid_bound(read_segment_metadata(directory, segment_id))
    except ValueError:
        found = segment_gtid_range(directory, segment_id)
        return None if found is None else found[1]
