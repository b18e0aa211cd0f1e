"""The in-process major (small inputs, no Spark job): reassembly checks and the LWW merge, Kafka faked."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metadata.table import Column, ColumnType, TableDefinition
from shoal.ids import new_segment_id
from shoal.kafka import admin, readers
from shoal.segments.versioned import stamp
from shoal.wire.records import SegmentChunk
from spark_jobs.compaction.compute import SegmentSource, compute_major_local, versioned_schema, write_major
from spark_jobs.errors import CompactionJobError

TABLE = TableDefinition("t", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1)


class _Msg:
    def __init__(self, offset: int, kind: bytes, value: bytes) -> None:
        self._offset, self._kind, self._value = offset, kind, value

    def offset(self) -> int:
        return self._offset

    def headers(self) -> list[tuple[str, bytes]]:
        return [("shoal.kind", self._kind)]

    def value(self) -> bytes:
        return self._value


def _segment(keys: list[int], values: list[str], seq: int, deleted: bool = False) -> bytes:
    rows = stamp(pa.table({"k": pa.array(keys, pa.uint64()), "v": values}), epoch=1, first_seq=seq)
    if deleted:
        rows = rows.set_column(
            rows.schema.get_field_index("_shoal_deleted"), "_shoal_deleted", pa.array([True] * len(keys))
        )
    sink = io.BytesIO()
    pq.write_table(rows, sink)
    return sink.getvalue()


def _channel(segments: list[tuple[str, bytes]], size: int) -> tuple[list[_Msg], list[SegmentSource]]:
    """A segments channel: per segment a manifest record, then its chunks."""
    msgs: list[_Msg] = []
    sources = []
    for sid, data in segments:
        parts = [data[o : o + size] for o in range(0, len(data), size)]
        sources.append(SegmentSource(sid, "topic", len(msgs), len(parts), len(data), hashlib.sha256(data).hexdigest()))
        msgs.append(_Msg(len(msgs), b"manifest", b"not a chunk"))
        for i, part in enumerate(parts):
            msgs.append(_Msg(len(msgs), b"chunk", SegmentChunk(sid, i, len(parts), part).to_bytes()))
    return msgs, sources


def _fake_kafka(monkeypatch: pytest.MonkeyPatch, msgs: list[_Msg]) -> None:
    def read(_settings: Any, _topic: str, start: int, **_kw: Any) -> Iterator[_Msg]:
        return iter([m for m in msgs if m.offset() >= start])

    monkeypatch.setattr(readers, "read_to_end", read)
    monkeypatch.setattr(admin, "log_start_and_end", lambda *_a, **_k: (0, len(msgs)))


def test_local_major_keeps_the_newest_version_per_key(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = new_segment_id(), new_segment_id(), new_segment_id()
    msgs, sources = _channel(
        [
            (a, _segment([1, 2, 3], ["a1", "a2", "a3"], seq=0)),
            (b, _segment([2, 4], ["b2", "b4"], seq=10)),
            (c, _segment([3], ["c3"], seq=20, deleted=True)),
        ],
        size=200,
    )
    _fake_kafka(monkeypatch, msgs)
    out = compute_major_local(None, sources, TABLE, drop_tombstones=False)  # type: ignore[arg-type]
    assert out.schema == versioned_schema(TABLE)
    got = {
        k: (v, d) for k, v, d in zip(*(out.column(n).to_pylist() for n in ("k", "v", "_shoal_deleted")), strict=True)
    }
    assert got == {1: ("a1", False), 2: ("b2", False), 3: ("c3", True), 4: ("b4", False)}
    full = compute_major_local(None, sources, TABLE, drop_tombstones=True)  # type: ignore[arg-type]
    assert sorted(full.column("k").to_pylist()) == [1, 2, 4]


def test_local_major_refuses_a_corrupt_or_incomplete_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    a = new_segment_id()
    msgs, sources = _channel([(a, _segment([1, 2], ["x", "y"], seq=0))], size=100)
    bad = SegmentSource(a, "topic", 0, sources[0].chunk_count, sources[0].size_bytes, "0" * 64)
    _fake_kafka(monkeypatch, msgs)
    with pytest.raises(CompactionJobError, match="do not match the manifest"):
        compute_major_local(None, [bad], TABLE, drop_tombstones=False)  # type: ignore[arg-type]
    _fake_kafka(monkeypatch, [m for m in msgs if m.offset() != 2])  # chunk 1 is gone
    with pytest.raises(CompactionJobError, match="chunk 1 of"):
        compute_major_local(None, sources, TABLE, drop_tombstones=False)  # type: ignore[arg-type]


def test_a_major_of_a_table_with_a_not_null_column_keeps_its_tombstones(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A tombstone has no values: the major's columns outside the key are nullable, as the node's
    flushes are, or a major of such a table with a delete could not be written."""
    strict = TableDefinition(
        "t", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING, False)), ("k",), "k", 1
    )
    deleted = stamp(
        pa.table({"k": pa.array([3], pa.uint64()), "v": pa.array([None], pa.string())}),
        epoch=1,
        first_seq=20,
        deleted=True,
    )
    sink = io.BytesIO()
    pq.write_table(deleted, sink)
    a, c = new_segment_id(), new_segment_id()
    msgs, sources = _channel([(a, _segment([1, 3], ["a1", "a3"], seq=0)), (c, sink.getvalue())], size=200)
    _fake_kafka(monkeypatch, msgs)
    out = compute_major_local(None, sources, strict, drop_tombstones=False)  # type: ignore[arg-type]
    assert not out.schema.field("k").nullable and out.schema.field("v").nullable
    written = write_major(tmp_path, new_segment_id(), out, strict)
    assert written.row_count == 2
