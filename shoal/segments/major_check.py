"""Checking a major against the segment files it replaces, in bounded memory.

DESIGN.md section 5: a major replaces the latest major and every minor after it, and once the Tail
truncates the channels behind it, it is the only copy of their rows. :func:`check_major` compares
tables; this module feeds it from the files, key range by key range, so that the memory a check
takes does not grow with the partition.

A check reads the key and version columns (:data:`~shoal.segments.versioned.SYSTEM_COLUMNS`) and,
with ``values`` (the node's default), every other column too. All at once, the key and version
columns alone take about 130-230 bytes of Arrow memory per row read (the merge of the replaced
segments, the major and their hash joins), so a partition of 15M rows would need 2-3.5 GB in the
node on every commit. When the files hold more than a pass's rows together (``rows_per_pass``,
fewer for wide rows: :data:`MAJOR_CHECK_BYTES_PER_PASS`), the check runs in passes instead:
every row of every file is assigned to one key range by the value of one
key column (the ``bucket`` column), and each pass checks one range. All versions of a key have
the same value in every key column, so they fall in the same range, and last-writer-wins per key
within a range is last-writer-wins per key: the verdict is the one-pass verdict, and the counts
add up (``missing``, ``extra`` and ``changed`` are counted over disjoint ranges).

The ranges come from a strided sample of the key columns of every file (the first read); the
bucket column is the key column with the most distinct values in the sample (preferring one whose
row groups statistics can skip, when it has values enough for the passes) among those with an
order (integers, strings, binaries, dates and times, decimals; not floats, whose NaN is in no
range, nor booleans). Each pass then reads the files again, one row group at a time, and keeps
the rows of its range, so a pass holds about ``rows_per_pass`` rows when the ranges are even.
A key column with few distinct values makes few ranges (one value cannot be split): the check
then holds more per pass. A row that falls in no range (a null key: only a broken major can hold
one) is counted, and makes the major refused.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shoal.segments.errors import (
    CorruptSegmentError,
    ReplacedSegmentUnreadableError,
    SegmentFileError,
)
from shoal.segments.merge import MajorDiff, check_major_schema, decoded, diff_major
from shoal.segments.parquet_io import open_segment
from shoal.segments.versioned import SYSTEM_COLUMNS

log = logging.getLogger(__name__)

MAJOR_CHECK_ROWS_PER_PASS = 1_000_000
"""Rows (replaced segments and major together) one pass of a major check holds at most, about
130-230 MB of Arrow memory (measured on 3M rows: ``bench/major_check.py``)."""

SAMPLES_PER_PASS = 64
"""Values sampled per planned pass to place the key ranges' bounds."""

MAJOR_CHECK_BYTES_PER_PASS = 64 * 2**20
"""Uncompressed column bytes (Parquet footers' sizes of the columns read) one pass holds at most:
rows wider than ~65 bytes make passes of fewer than :data:`MAJOR_CHECK_ROWS_PER_PASS` rows."""


@dataclass(frozen=True, slots=True)
class MajorCheck:
    """How a major was checked: ``passes`` (1: all rows at once), the ``bucket`` column the key
    ranges were taken on (None for one pass) and the ``rows`` of every file read per pass."""

    passes: int
    bucket: str | None
    rows: int


@dataclass(slots=True)
class _File:
    segment_id: str
    parquet: pq.ParquetFile
    replaced: bool

    @property
    def num_rows(self) -> int:
        return int(self.parquet.metadata.num_rows)

    def batches(
        self, columns: Sequence[str], *, bucket: str | None = None, low: object = None, high: object = None
    ) -> Iterator[pa.Table]:
        """Every row group, as a table of ``columns``; with ``bucket``, the row groups whose
        statistics show no value in ``[low, high)`` are skipped unread (files are sorted by key, so
        a range of the first key column reads few groups of each file)."""
        meta = self.parquet.metadata
        index = _column_index(meta, bucket) if bucket is not None else None
        try:
            for i in range(meta.num_row_groups):
                if index is not None and not _may_hold(meta.row_group(i).column(index).statistics, low, high):
                    continue
                yield self.parquet.read_row_group(i, columns=list(columns))
        except pa.ArrowMemoryError:
            raise  # out of memory is not an unreadable file: the major must not pass unchecked
        except (pa.ArrowException, OSError, ValueError) as exc:
            error = CorruptSegmentError(f"segment {self.segment_id}: cannot decode: {exc}")
            raise (ReplacedSegmentUnreadableError(self.segment_id, error) if self.replaced else error) from exc

    def column_bytes(self, columns: Sequence[str]) -> int:
        """The uncompressed bytes of ``columns`` in this file, from its footer."""
        meta = self.parquet.metadata
        wanted = {i for i in range(meta.num_columns) if meta.schema.column(i).path in set(columns)}
        return sum(
            meta.row_group(g).column(i).total_uncompressed_size for g in range(meta.num_row_groups) for i in wanted
        )

    def schema(self, columns: Sequence[str]) -> pa.Schema:
        return pa.schema([self.parquet.schema_arrow.field(c) for c in columns])

    def read(self, columns: Sequence[str]) -> pa.Table:
        schema = self.schema(columns)
        return pa.concat_tables([schema.empty_table(), *(t.cast(schema) for t in self.batches(columns))])


def check_major_files(
    directory: Path,
    replaced: Sequence[str],
    major_id: str,
    key_columns: Sequence[str],
    *,
    rows_per_pass: int = MAJOR_CHECK_ROWS_PER_PASS,
    bytes_per_pass: int = MAJOR_CHECK_BYTES_PER_PASS,
    values: bool = True,
) -> MajorCheck:
    """Refuse (:class:`MajorContentError`) the major ``major_id`` unless its columns are those of
    the ``replaced`` segments (:func:`check_major_schema`) and its rows are their last-writer-wins
    merge (:func:`check_major`: keys and versions, and with ``values`` every other column at the
    merge's version), reading at most about ``rows_per_pass`` rows and ``bytes_per_pass`` bytes at
    a time (module docstring). A replaced file missing or unreadable raises
    :class:`ReplacedSegmentUnreadableError`; the major's own file errors as
    :func:`~shoal.segments.parquet_io.read_segment`."""
    if rows_per_pass < 1 or bytes_per_pass < 1:
        raise ValueError(f"rows_per_pass and bytes_per_pass must be >= 1, got {rows_per_pass}, {bytes_per_pass}")
    files = [_open(directory, sid, replaced=True) for sid in replaced]
    major = _open(directory, major_id, replaced=False)
    if files:  # one footer stands for them all: the merge refuses segments whose types disagree
        check_major_schema(files[0].parquet.schema_arrow, major.parquet.schema_arrow, segment_id=major_id)
    columns = [*key_columns, *SYSTEM_COLUMNS]
    schema = (files[0] if files else major).parquet.schema_arrow
    others = [n for n in schema.names if n not in columns] if values else []
    columns += others
    everything = [*files, major]
    total = sum(f.num_rows for f in everything)
    row_bytes = sum(f.column_bytes(columns) for f in everything) / max(1, total)
    per_pass = max(1, min(rows_per_pass, int(bytes_per_pass / row_bytes) if row_bytes else rows_per_pass))
    planned = math.ceil(total / per_pass)
    bucket, bounds = _plan(everything, key_columns, planned) if planned > 1 and files else (None, [])
    if bucket is None or not bounds:
        diff = diff_major([f.read(columns) for f in files], major.read(columns), key_columns, value_columns=others)
        _raise(major_id, diff)
        return MajorCheck(passes=1, bucket=None, rows=total)
    found: list[MajorDiff | None] = []
    taken = [0] * len(everything)
    for low, high in zip([None, *bounds], [*bounds, None], strict=True):
        parts = [_range(f, columns, bucket, low, high) for f in everything]
        for i, part in enumerate(parts):
            taken[i] += part.num_rows
        found.append(diff_major(parts[:-1], parts[-1], key_columns, value_columns=others))
    lost = {f.segment_id: f.num_rows - n for f, n in zip(everything, taken, strict=True) if n != f.num_rows}
    if lost:
        found.append(
            MajorDiff(
                missing=0,
                extra=lost.get(major_id, 0),
                got_rows=0,
                expected_rows=0,
                example=f"rows in no key range of {bucket} (a null key?): {lost}",
            )
        )
    _raise(major_id, _added(found))
    log.debug("major %s checked in %d passes on %s (%d rows)", major_id, len(bounds) + 1, bucket, total)
    return MajorCheck(passes=len(bounds) + 1, bucket=bucket, rows=total)


def _open(directory: Path, segment_id: str, *, replaced: bool) -> _File:
    try:
        return _File(segment_id, open_segment(directory, segment_id), replaced)
    except SegmentFileError as exc:
        if replaced:
            raise ReplacedSegmentUnreadableError(segment_id, exc) from exc
        raise


def _raise(segment_id: str, diff: MajorDiff | None) -> None:
    if diff is not None:
        raise diff.error(segment_id)


def _added(diffs: Sequence[MajorDiff | None]) -> MajorDiff | None:
    """The differences of every pass, added up (the first pass's example)."""
    found = [d for d in diffs if d is not None]
    if not found:
        return None
    return MajorDiff(
        missing=sum(d.missing for d in found),
        extra=sum(d.extra for d in found),
        got_rows=sum(d.got_rows for d in found),
        expected_rows=sum(d.expected_rows for d in found),
        example=found[0].example,
        changed=sum(d.changed for d in found),
    )


def _orderable(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return _orderable(t.value_type)
    return _prunable(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_temporal(t) or pa.types.is_decimal(t)


def _plan(files: Sequence[_File], key_columns: Sequence[str], passes: int) -> tuple[str | None, list[pa.Scalar]]:
    """The bucket column and the sorted bounds of its key ranges (``passes - 1`` at most), from a
    strided sample of every file's key columns; (None, []) when no key column has an order."""
    candidates = [c for c in key_columns if _orderable(files[0].parquet.schema_arrow.field(c).type)]
    if not candidates:
        return None, []
    total = sum(f.num_rows for f in files)
    stride = max(1, total // (passes * SAMPLES_PER_PASS))
    samples: list[pa.Table] = []
    seen = 0
    for f in files:
        for batch in f.batches(candidates):
            first = (-seen) % stride
            if first < batch.num_rows:
                samples.append(batch.take(pa.array(np.arange(first, batch.num_rows, stride))))
            seen += batch.num_rows
    if not samples:
        return None, []
    sample = pa.concat_tables(samples)
    distinct = {c: pc.unique(decoded(sample.column(c)).drop_null()) for c in candidates}
    types = {c: files[0].parquet.schema_arrow.field(c).type for c in candidates}
    # enough distinct values to fill the passes, then row groups skipped by statistics, then the most
    # distinct (the first of equals): a range of an unprunable column decodes every file in every pass
    bucket = max(candidates, key=lambda c: (len(distinct[c]) >= passes, _prunable(types[c]), len(distinct[c])))
    values = distinct[bucket].take(pc.sort_indices(distinct[bucket]))
    picks = sorted({round(i * len(values) / passes) for i in range(1, passes)} - {0})
    return bucket, [values[i] for i in picks if i < len(values)]


def _range(f: _File, columns: Sequence[str], bucket: str, low: pa.Scalar | None, high: pa.Scalar | None) -> pa.Table:
    """The rows of ``f`` whose ``bucket`` value is in ``[low, high)`` (None: open), read one row
    group at a time (groups outside the range skipped by their statistics: :func:`_prunable`)."""
    schema = f.schema(columns)
    prune = _prunable(schema.field(bucket).type)
    bounds = (None if low is None else low.as_py(), None if high is None else high.as_py())
    kept: list[pa.Table] = [schema.empty_table()]
    for group in f.batches(columns, bucket=bucket if prune else None, low=bounds[0], high=bounds[1]):
        values = decoded(group.column(bucket))
        mask = None
        if low is not None:
            mask = pc.greater_equal(values, low)
        if high is not None:
            below = pc.less(values, high)
            mask = below if mask is None else pc.and_(mask, below)
        part = group.filter(mask) if mask is not None else group
        if part.num_rows:
            kept.append(part.cast(schema))
    return pa.concat_tables(kept)


def _prunable(t: pa.DataType) -> bool:
    """Types whose Parquet statistics, as pyarrow writes them (every segment is written by
    :func:`~shoal.segments.parquet_io.write_segment`), are exact bounds in the order of Arrow's
    comparisons: integers, and strings and binaries compared byte by byte (a value too long for
    statistics leaves the group without them: it is read). A group skipped wrongly would show as
    rows in no range: a refusal, never a check passed."""
    return (
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def _column_index(meta: pq.FileMetaData, name: str) -> int | None:
    for j in range(meta.num_columns):
        if meta.schema.column(j).path == name:
            return j
    return None


def _may_hold(stats: pq.Statistics | None, low: object, high: object) -> bool:
    """Whether a row group whose ``stats`` are these may hold a value in ``[low, high)``: True when
    it has no statistics (it is read)."""
    if stats is None or not stats.has_min_max:
        return True
    if low is not None and stats.max < low:
        return False
    return not (high is not None and stats.min >= high)
