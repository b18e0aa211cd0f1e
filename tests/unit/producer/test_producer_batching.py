from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from producer.batching import split_messages
from producer.errors import RowValidationError
from shoal.wire.arrow_ipc import decode_batch


def _rows(n: int, width: int = 50) -> pa.Table:
    rng = np.random.default_rng(7)
    text = ["".join(chr(97 + c) for c in rng.integers(0, 26, size=width)) for _ in range(min(n, 64))]
    return pa.table({"k": pa.array(np.arange(n, dtype=np.uint64)), "v": pa.array([text[i % 64] for i in range(n)])})


def test_one_message_when_it_fits() -> None:
    rows = _rows(100)
    msgs = split_messages("t", rows, max_bytes=1_000_000, max_rows=1000)
    assert len(msgs) == 1 and decode_batch(msgs[0].payload).equals(rows)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_big_batches_are_split_under_the_limit(compression: str | None) -> None:
    rows = _rows(20_000, width=80)
    msgs = split_messages("t", rows, max_bytes=64 * 1024, max_rows=100_000, compression=compression)
    assert len(msgs) > 1
    assert all(len(m.payload) <= 64 * 1024 for m in msgs)
    back = pa.concat_tables([decode_batch(m.payload) for m in msgs])
    assert back.column("k").to_pylist() == list(range(20_000))
    assert sum(m.num_rows for m in msgs) == 20_000


def test_row_limit_and_recursive_halving() -> None:
    rows = _rows(1000)
    msgs = split_messages("t", rows, max_bytes=10_000_000, max_rows=300)
    assert [m.num_rows for m in msgs] == [300, 300, 300, 100]
    # incompressible values much bigger than the estimate allows: halving must still converge
    blobs = pa.table({"b": pa.array([np.random.default_rng(i).bytes(3000) for i in range(40)])})
    msgs = split_messages("t", blobs, max_bytes=8000, max_rows=1000, compression="zstd")
    assert all(len(m.payload) <= 8000 for m in msgs) and sum(m.num_rows for m in msgs) == 40


def test_single_row_too_big() -> None:
    rows = pa.table({"b": pa.array([np.random.default_rng(0).bytes(9000)])})
    with pytest.raises(RowValidationError, match="one row encodes"):
        split_messages("t", rows, max_bytes=8000, max_rows=10)
    assert split_messages("t", rows.slice(0, 0), max_bytes=8000, max_rows=10) == []
