"""check_major_files: the verdict of check_major on the files, key range by key range."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from shoal.ids import new_segment_id
from shoal.segments.errors import (
    CorruptSegmentError,
    MajorContentError,
    ReplacedSegmentUnreadableError,
    SegmentFileNotFoundError,
)
from shoal.segments.major_check import check_major_files
from shoal.segments.merge import check_major, lww_merge
from shoal.segments.parquet_io import segment_path, write_segment
from shoal.segments.versioned import DELETED_COLUMN, EPOCH_COLUMN, SEQ_COLUMN

SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("k", pa.int64()),
        ("v", pa.string()),
        (EPOCH_COLUMN, pa.int64()),
        (SEQ_COLUMN, pa.int64()),
        (DELETED_COLUMN, pa.bool_()),
    ]
)
KEY = ["tenant", "k"]


def writes(rnd: random.Random, n: int, keyspace: int, *, string_keys: bool = False) -> pa.Table:
    gtids = rnd.sample([(e, s) for e in range(1, 4) for s in range(5000)], n)
    rows: dict[str, list[Any]] = {f.name: [] for f in SCHEMA}
    for e, s in gtids:
        rows["tenant"].append(rnd.choice(["acme", "bolt"]))  # few values: not the column to split on
        rows["k"].append(rnd.randrange(keyspace))
        rows["v"].append(rnd.choice(["x", "y", None]))
        rows[EPOCH_COLUMN].append(e)
        rows[SEQ_COLUMN].append(s)
        rows[DELETED_COLUMN].append(rnd.random() < 0.1)
    if string_keys:
        rows["k"] = [f"key-{k:06d}" for k in rows["k"]]
        return pa.table(rows, schema=SCHEMA.set(1, pa.field("k", pa.string())))
    return pa.table(rows, schema=SCHEMA)


def store(directory: Path, table: pa.Table, key: list[str] = KEY) -> str:
    sid = new_segment_id()
    write_segment(directory, sid, table, key_columns=key)
    return sid


def spoil(rnd: random.Random, merged: pa.Table, how: str) -> pa.Table:
    i = rnd.randrange(merged.num_rows)
    row = merged.slice(i, 1)
    rest = pa.concat_tables([merged.slice(0, i), merged.slice(i + 1)])
    if how == "lost":
        return rest
    if how == "stale":
        return pa.concat_tables([rest, row.set_column(4, SEQ_COLUMN, pa.array([-1], pa.int64()))])
    if how == "twice":
        return pa.concat_tables([merged, row])
    if how == "undeleted":
        return pa.concat_tables([rest, row.set_column(5, DELETED_COLUMN, pc.invert(row.column(DELETED_COLUMN)))])
    if how == "changed":
        return pa.concat_tables([rest, row.set_column(2, "v", pa.array(["other"], pa.string()))])
    if how == "invented":
        invented = pa.array(
            [10**9] if pa.types.is_integer(row.schema.field("k").type) else ["zz"], row.schema.field("k").type
        )
        return pa.concat_tables([merged, row.set_column(1, row.schema.field("k"), invented)])
    assert how == "none"
    return merged


@pytest.mark.parametrize("seed", range(20))
def test_key_ranges_give_the_one_pass_verdict(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    strings = seed % 2 == 1
    sources = [writes(rnd, rnd.randint(0, 400), 300, string_keys=strings) for _ in range(rnd.randint(1, 5))]
    merged = lww_merge(sources, KEY)
    how = rnd.choice(["none", "lost", "stale", "twice", "undeleted", "invented", "changed"])
    major = spoil(rnd, merged, how)
    replaced = [store(tmp_path, t) for t in sources]
    major_id = store(tmp_path, major)
    try:
        check_major(sources, major, KEY, segment_id=major_id, value_columns=["v"])
        one_pass = None
    except MajorContentError as exc:
        one_pass = exc
    for rows_per_pass in (10**9, 97, 5):
        try:
            check = check_major_files(tmp_path, replaced, major_id, KEY, rows_per_pass=rows_per_pass)
        except MajorContentError as exc:
            assert one_pass is not None, (how, rows_per_pass, exc)
            assert exc.missing == one_pass.missing and exc.extra >= one_pass.extra, (how, exc, one_pass)
            assert exc.changed == one_pass.changed == (how == "changed"), (how, exc, one_pass)
            continue
        assert one_pass is None, (how, rows_per_pass)
        total = sum(t.num_rows for t in sources) + major.num_rows
        assert check.rows == total
        if rows_per_pass == 5 and total > 200:
            assert check.passes > 20 and check.bucket == "k"  # tenant has two values: k splits better


def test_ranges_of_a_sorted_integer_key_skip_row_groups_and_still_find_a_lost_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = np.arange(100_000, dtype=np.int64)
    base = pa.table(
        {
            "k": keys,
            "v": pa.array(["x"] * len(keys)),
            EPOCH_COLUMN: np.ones(len(keys), dtype=np.int64),
            SEQ_COLUMN: keys,
            DELETED_COLUMN: np.zeros(len(keys), dtype=bool),
        }
    )
    upserts = base.slice(40_000, 30_000).set_column(2, EPOCH_COLUMN, pa.array(np.full(30_000, 2, dtype=np.int64)))
    replaced = [store(tmp_path, base, ["k"]), store(tmp_path, upserts, ["k"])]
    merged = lww_merge([base, upserts], ["k"])
    good = store(tmp_path, merged, ["k"])
    reads = []
    read_row_group = pq.ParquetFile.read_row_group
    monkeypatch.setattr(
        pq.ParquetFile, "read_row_group", lambda f, i, **kw: reads.append(i) or read_row_group(f, i, **kw)
    )
    check = check_major_files(tmp_path, replaced, good, ["k"], rows_per_pass=20_000)
    assert (check.passes, check.bucket, check.rows) == (12, "k", 230_000)
    groups = 7 + 2 + 7  # 16Ki-row groups of 100,000, 30,000 and 100,000 rows
    assert len(reads) < 4 * groups  # the sample reads each once; the 12 ranges about 2 groups each
    lost = store(tmp_path, pa.concat_tables([merged.slice(0, 77_777), merged.slice(77_778)]), ["k"])
    with pytest.raises(MajorContentError) as err:
        check_major_files(tmp_path, replaced, lost, ["k"], rows_per_pass=20_000)
    assert (err.value.missing, err.value.extra) == (1, 0) and "k=77777" in err.value.example


def test_null_key_in_the_major_is_in_no_range_and_refused(tmp_path: Path) -> None:
    rnd = random.Random(1)
    sources = [writes(rnd, 300, 200) for _ in range(2)]
    merged = lww_merge(sources, KEY)
    schema = SCHEMA.set(1, pa.field("k", pa.int64(), nullable=True))
    nulled = merged.cast(schema).set_column(
        1, pa.field("k", pa.int64()), pa.array([None] + [1] * (merged.num_rows - 1))
    )
    replaced = [store(tmp_path, t) for t in sources]
    major_id = new_segment_id()
    pa.parquet.write_table(nulled, segment_path(tmp_path, major_id))
    with pytest.raises(MajorContentError):
        check_major_files(tmp_path, replaced, major_id, KEY, rows_per_pass=50)


def test_missing_or_corrupt_files(tmp_path: Path) -> None:
    rnd = random.Random(2)
    source = writes(rnd, 100, 50)
    replaced = store(tmp_path, source)
    major_id = store(tmp_path, lww_merge([source], KEY))
    assert check_major_files(tmp_path, [replaced], major_id, KEY).passes == 1
    gone = new_segment_id()
    with pytest.raises(ReplacedSegmentUnreadableError) as err:
        check_major_files(tmp_path, [replaced, gone], major_id, KEY)
    assert err.value.segment_id == gone and isinstance(err.value.cause, SegmentFileNotFoundError)
    segment_path(tmp_path, major_id).write_bytes(b"PAR1 not a parquet file PAR1")
    with pytest.raises(CorruptSegmentError) as corrupt:
        check_major_files(tmp_path, [replaced], major_id, KEY)
    assert not isinstance(corrupt.value, ReplacedSegmentUnreadableError)
    with pytest.raises(ValueError):
        check_major_files(tmp_path, [replaced], major_id, KEY, rows_per_pass=0)


def test_values_are_compared_unless_asked_not_to(tmp_path: Path) -> None:
    rnd = random.Random(3)
    sources = [writes(rnd, 300, 100) for _ in range(3)]
    merged = lww_merge(sources, KEY)
    values = merged.column("v").to_pylist()
    i = next(i for i, v in enumerate(values) if v is not None)
    values[i] = values[i] + "!"
    replaced = [store(tmp_path, t) for t in sources]
    major_id = store(tmp_path, merged.set_column(2, "v", pa.array(values, pa.string())))
    for rows_per_pass in (10**9, 50):
        with pytest.raises(MajorContentError) as err:
            check_major_files(tmp_path, replaced, major_id, KEY, rows_per_pass=rows_per_pass)
        assert (err.value.missing, err.value.extra, err.value.changed) == (0, 0, 1)
        assert err.value.example.startswith("v of tenant=") and "1 with other values" in str(err.value)
        check_major_files(tmp_path, replaced, major_id, KEY, rows_per_pass=rows_per_pass, values=False)
    wide = check_major_files(tmp_path, replaced, store(tmp_path, merged), KEY, bytes_per_pass=2_000)
    assert wide.passes > 5  # uncompressed column bytes in the footers: passes of ~120 rows


def test_ranges_prefer_a_key_column_whose_row_groups_statistics_can_skip(tmp_path: Path) -> None:
    n = 2_000
    table = pa.table(
        {
            "ts": pa.array(np.arange(n, dtype=np.int64) * 1000, pa.timestamp("ms")),  # most distinct, not pruned
            "k": pa.array(np.arange(n, dtype=np.int64) // 2),  # half as many, pruned by statistics
            EPOCH_COLUMN: np.ones(n, dtype=np.int64),
            SEQ_COLUMN: np.arange(n, dtype=np.int64),
            DELETED_COLUMN: np.zeros(n, dtype=bool),
        }
    )
    key = ["ts", "k"]
    replaced = store(tmp_path, table, key)
    check = check_major_files(tmp_path, [replaced], store(tmp_path, table, key), key, rows_per_pass=500)
    assert check.bucket == "k" and check.passes > 4


def test_out_of_memory_reading_a_replaced_segment_is_not_an_unreadable_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(4)
    source = writes(rnd, 100, 50)
    replaced = store(tmp_path, source)
    major_id = store(tmp_path, lww_merge([source], KEY))

    def oom(*_a: Any, **_k: Any) -> pa.Table:
        raise pa.ArrowMemoryError("malloc of size 1 failed")

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", oom)
    with pytest.raises(pa.ArrowMemoryError):  # not ReplacedSegmentUnreadableError: no unchecked commit
        check_major_files(tmp_path, [replaced], major_id, KEY)
