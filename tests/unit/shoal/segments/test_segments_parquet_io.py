"""Segment files: atomic Parquet writes, checksums, typed errors for corrupt files (DESIGN.md 4.3, 6)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shoal.errors import InvalidIdError
from shoal.segments.atomic import remove_temp_files
from shoal.segments.errors import (
    ChecksumMismatchError,
    CorruptSegmentError,
    SegmentArgumentError,
    SegmentFileNotFoundError,
)
from shoal.segments.parquet_io import (
    delete_segment_file,
    file_sha256,
    list_segment_files,
    read_segment,
    read_segment_metadata,
    segment_path,
    write_segment,
    write_segment_bytes,
)
from shoal.segments.versioned import stamp

SID = "0123456789abcdef" * 2


def rows(n: int = 1000) -> pa.Table:
    keys = list(range(n, 0, -1))  # unsorted on purpose
    return stamp(pa.table({"k": keys, "s": [f"v{i}" for i in keys]}), epoch=1, first_seq=0)


def only_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


class TestWriteRead:
    def test_round_trip_sorted_with_checksum(self, tmp_path: Path) -> None:
        w = write_segment(tmp_path, SID, rows(), key_columns=["k"])
        assert w.path == tmp_path / f"{SID}.parquet"
        assert only_files(tmp_path) == [f"{SID}.parquet"]  # no temp file left
        assert w.sha256 == file_sha256(w.path) == hashlib.sha256(w.path.read_bytes()).hexdigest()
        assert w.size_bytes == w.path.stat().st_size and w.row_count == 1000
        t = read_segment(tmp_path, SID, expected_sha256=w.sha256)
        assert t.column("k").to_pylist() == list(range(1, 1001))
        assert read_segment(tmp_path, SID, columns=["s"]).column_names == ["s"]
        meta = read_segment_metadata(tmp_path, SID)
        assert meta.num_rows == 1000
        assert meta.row_group(0).sorting_columns == (pq.SortingColumn(0),)

    @pytest.mark.parametrize(
        ("a", "b"),
        [
            ([1, 2, 3, 4], ["d", "c", "b", "a"]),  # sorted by a alone
            ([1, 1, 2, 2], ["a", "b", "a", "b"]),  # sorted, ties on a broken by b
            ([1, 1, 2, 2], ["b", "a", "a", "b"]),  # a sorted, b not within a tie
            ([2, 1, 3, 4], ["a", "a", "a", "a"]),
            ([1, 1, 1, 1], ["a", "a", "a", "a"]),
        ],
    )
    def test_rows_come_out_sorted_whether_or_not_they_went_in_sorted(
        self, tmp_path: Path, a: list[int], b: list[str]
    ) -> None:
        t = stamp(pa.table({"a": pa.array(a, pa.int64()), "b": b, "i": list(range(4))}), epoch=1, first_seq=0)
        w = write_segment(tmp_path, SID, t, key_columns=["a", "b"])
        back = read_segment(tmp_path, SID, expected_sha256=w.sha256)
        pairs = list(zip(back.column("a").to_pylist(), back.column("b").to_pylist(), strict=True))
        assert pairs == sorted(zip(a, b, strict=True))
        assert sorted(back.column("i").to_pylist()) == [0, 1, 2, 3]

    def test_file_names_come_only_from_valid_ids(self, tmp_path: Path) -> None:
        for bad in ("../" + SID, SID + "/x", "", SID.upper()[:-1] + "G"):
            with pytest.raises(InvalidIdError):
                write_segment(tmp_path, bad, rows(3), key_columns=["k"])
            with pytest.raises(InvalidIdError):
                read_segment(tmp_path, bad)
        with pytest.raises(InvalidIdError):
            segment_path(tmp_path, "..")

    def test_bad_key_columns(self, tmp_path: Path) -> None:
        with pytest.raises(SegmentArgumentError):
            write_segment(tmp_path, SID, rows(3), key_columns=["nope"])
        with pytest.raises(SegmentArgumentError):
            write_segment(tmp_path, SID, rows(3), key_columns=[])
        assert only_files(tmp_path) == []

    def test_streamed_checksum(self, tmp_path: Path) -> None:
        p = tmp_path / "blob"
        data = os.urandom(3 * 1024 + 17)
        p.write_bytes(data)
        assert file_sha256(p, chunk_size=1000) == hashlib.sha256(data).hexdigest()
        with pytest.raises(SegmentFileNotFoundError):
            file_sha256(tmp_path / "missing")


class TestCorruptFiles:
    def test_missing(self, tmp_path: Path) -> None:
        with pytest.raises(SegmentFileNotFoundError):
            read_segment(tmp_path, SID)

    def test_truncated(self, tmp_path: Path) -> None:
        w = write_segment(tmp_path, SID, rows(), key_columns=["k"])
        data = w.path.read_bytes()
        for cut in (0, 3, len(data) // 2, len(data) - 1):
            w.path.write_bytes(data[:cut])
            with pytest.raises(CorruptSegmentError):
                read_segment(tmp_path, SID)

    def test_garbage(self, tmp_path: Path) -> None:
        segment_path(tmp_path, SID).write_bytes(b"PAR1" + os.urandom(500) + b"PAR1")
        with pytest.raises(CorruptSegmentError):
            read_segment(tmp_path, SID)

    def test_bit_flip_in_a_data_page(self, tmp_path: Path) -> None:
        w = write_segment(tmp_path, SID, rows(), key_columns=["k"], compression="none")
        data = bytearray(w.path.read_bytes())
        data[200] ^= 0xFF  # inside the first column chunk, not the footer
        w.path.write_bytes(bytes(data))
        with pytest.raises(ChecksumMismatchError):
            read_segment(tmp_path, SID, expected_sha256=w.sha256)
        with pytest.raises(CorruptSegmentError):  # page checksums catch it without the sha256, too
            read_segment(tmp_path, SID)


class TestReceivedBytes:
    def test_chunks_are_verified_before_the_file_appears(self, tmp_path: Path) -> None:
        src = tmp_path / "src"
        src.mkdir()
        w = write_segment(src, SID, rows(), key_columns=["k"])
        data = w.path.read_bytes()
        dst = tmp_path / "dst"
        dst.mkdir()
        chunks = [data[i : i + 1000] for i in range(0, len(data), 1000)]
        got = write_segment_bytes(dst, SID, chunks, expected_sha256=w.sha256, expected_size=len(data))
        assert got.sha256 == w.sha256 and got.row_count == 1000
        assert read_segment(dst, SID).equals(read_segment(src, SID))

    def test_wrong_checksum_or_size_leaves_nothing(self, tmp_path: Path) -> None:
        src = tmp_path / "src"
        src.mkdir()
        w = write_segment(src, SID, rows(), key_columns=["k"])
        data = w.path.read_bytes()
        dst = tmp_path / "dst"
        dst.mkdir()
        with pytest.raises(ChecksumMismatchError):
            write_segment_bytes(dst, SID, [data[:-1] + b"x"], expected_sha256=w.sha256)
        with pytest.raises(ChecksumMismatchError):
            write_segment_bytes(dst, SID, [data], expected_sha256=w.sha256, expected_size=len(data) - 5)
        with pytest.raises(ChecksumMismatchError):
            write_segment_bytes(dst, SID, [data], expected_sha256=w.sha256, expected_size=len(data) + 5)
        assert only_files(dst) == []

    def test_matching_checksum_of_non_parquet_bytes_is_corrupt(self, tmp_path: Path) -> None:
        junk = b"not a parquet file"
        with pytest.raises(CorruptSegmentError):
            write_segment_bytes(tmp_path, SID, [junk], expected_sha256=hashlib.sha256(junk).hexdigest())
        assert only_files(tmp_path) == []

    def test_failing_source_leaves_nothing(self, tmp_path: Path) -> None:
        def chunks() -> Iterator[bytes]:
            yield b"PAR1"
            raise ConnectionError("broker went away")

        with pytest.raises(ConnectionError):
            write_segment_bytes(tmp_path, SID, chunks(), expected_sha256="0" * 64)
        assert only_files(tmp_path) == []

    def test_bad_expected_checksum_argument(self, tmp_path: Path) -> None:
        with pytest.raises(SegmentArgumentError):
            write_segment_bytes(tmp_path, SID, [b""], expected_sha256="xyz")


class TestDirectory:
    def test_list_delete_and_temp_cleanup(self, tmp_path: Path) -> None:
        write_segment(tmp_path, SID, rows(3), key_columns=["k"])
        (tmp_path / "notes.txt").write_text("x")
        (tmp_path / f".{SID}.parquet.123.abcd.tmp").write_bytes(b"partial")
        assert list_segment_files(tmp_path) == {SID}
        assert [p.name for p in remove_temp_files(tmp_path)] == [f".{SID}.parquet.123.abcd.tmp"]
        assert delete_segment_file(tmp_path, SID) is True
        assert delete_segment_file(tmp_path, SID) is False
        assert only_files(tmp_path) == ["notes.txt"]
