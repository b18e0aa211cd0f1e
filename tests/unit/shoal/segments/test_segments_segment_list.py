"""The transactional SQLite segment list (seed 000 section 3; DESIGN.md section 4.4) and recovery."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from shoal.segments.chain import SegmentChain, SegmentEntry
from shoal.segments.compaction import compaction_entry
from shoal.segments.coverage import WalRange
from shoal.segments.errors import (
    ChainError,
    CompactionConflictError,
    InvalidSegmentEntryError,
    SegmentListCorruptError,
    SegmentListError,
)
from shoal.segments.parquet_io import delete_segment_file, list_segment_files, write_segment
from shoal.segments.recovery import reconcile
from shoal.segments.segment_list import SegmentList, SegmentRecord, segment_list_path
from shoal.segments.versioned import stamp

P = "ab" * 16
PLACEMENT = 3


def sid(n: int) -> str:
    return f"{n:032x}"


def rec(n: int, base: int | None, *, major: bool = False, epoch: int = 1) -> SegmentRecord:
    return SegmentRecord(
        entry=SegmentEntry(
            segment_id=sid(n),
            base_segment_id=None if base is None else sid(base),
            placement_id=PLACEMENT,
            epoch=epoch,
            is_major=major,
            covered=(WalRange(P, PLACEMENT, 10 * n, 10 * n + 10),),
        ),
        sha256=f"{n:064x}",
        row_count=n,
        size_bytes=100 * n,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return segment_list_path(tmp_path, P, PLACEMENT)


def open_list(db: Path) -> SegmentList:
    return SegmentList(db, partition_id=P, placement_id=PLACEMENT)


def snapshot(db: Path) -> tuple[str | None, tuple[SegmentRecord, ...]]:
    with open_list(db) as sl:
        return sl.root, sl.records()


class TestBasics:
    def test_new_list_is_empty_and_durable_settings(self, db: Path) -> None:
        with open_list(db) as sl:
            assert sl.root is None and sl.records() == () and sl.load_chain() == SegmentChain()
            assert sl._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert sl._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
            assert sl._db.execute("PRAGMA foreign_keys").fetchone()[0] == 1

    def test_changes_survive_reopen(self, db: Path) -> None:
        with open_list(db) as sl:
            sl.fast_forward(rec(1, None, major=True))
            sl.fast_forward(rec(2, 1))
            sl.add_detached(rec(9, 8))
            chain = sl.fast_forward(rec(3, 2))
        with open_list(db) as sl:
            assert sl.load_chain() == chain
            assert sl.root == sid(3)
            assert [r.segment_id for r in sl.records()] == [sid(1), sid(2), sid(9), sid(3)]  # list order
            stored = sl.record(sid(2))
            assert stored is not None and stored.same_file(rec(2, 1))
            assert sl.record(sid(77)) is None

    def test_refused_changes_change_nothing(self, db: Path) -> None:
        with open_list(db) as sl:
            sl.fast_forward(rec(1, None, major=True))
            before = snapshot(db)
            with pytest.raises(ChainError):
                sl.fast_forward(rec(5, 4))  # base is not root
            with pytest.raises(ChainError):
                sl.fast_forward_add(rec(5, 4))  # a minor
            with pytest.raises(ChainError):
                sl.remove([sid(1)])  # the root
            assert snapshot(db) == before

    def test_same_id_with_another_file_is_refused(self, db: Path) -> None:
        with open_list(db) as sl:
            sl.fast_forward_add(rec(9, 8, major=True))
            sl.fast_forward_add(rec(1, None, major=True))  # 9 is now off the chain
            other = SegmentRecord(entry=rec(9, 8, major=True).entry, sha256="f" * 64, row_count=9, size_bytes=900)
            with pytest.raises(ChainError, match="different file"):
                sl.fast_forward_add(other)
            assert sl.fast_forward_add(rec(9, 8, major=True)).root == sid(9)  # identical: re-attached

    def test_fast_forward_add_remove_and_compaction(self, db: Path) -> None:
        with open_list(db) as sl:
            sl.fast_forward(rec(1, None, major=True))
            sl.fast_forward(rec(2, 1))
            major_entry = compaction_entry(sl.chain, sid(10), placement_id=PLACEMENT, epoch=1)
            major = SegmentRecord(entry=major_entry, sha256="a" * 64, row_count=3, size_bytes=300)
            with pytest.raises(CompactionConflictError):
                sl.commit_compaction(major, leader_epoch=2)
            chain = sl.commit_compaction(major, leader_epoch=1)
            assert chain.root == sid(10)
            chain = sl.remove([sid(1), sid(2), sid(55)])
            assert set(chain.entries) == {sid(10)} and chain.is_referenced(sid(1))
        with open_list(db) as sl:
            assert sl.load_chain() == chain

    def test_record_validation(self) -> None:
        with pytest.raises(InvalidSegmentEntryError):
            SegmentRecord(entry=rec(1, None, major=True).entry, sha256="x", row_count=1, size_bytes=1)
        with pytest.raises(InvalidSegmentEntryError):
            SegmentRecord(entry=rec(1, None, major=True).entry, sha256="a" * 64, row_count=-1, size_bytes=1)


class TestPlacementAndCorruption:
    def test_other_placement_or_partition_is_refused(self, db: Path) -> None:
        open_list(db).close()
        with pytest.raises(SegmentListError, match="placement"):
            SegmentList(db, partition_id=P, placement_id=PLACEMENT + 1)  # source 3.6: re-assigned = new placement
        with pytest.raises(SegmentListError):
            SegmentList(db, partition_id="cd" * 16, placement_id=PLACEMENT)

    def test_not_a_database(self, tmp_path: Path) -> None:
        bad = tmp_path / "x.sqlite3"
        bad.write_bytes(b"this is not sqlite" * 100)
        with pytest.raises(SegmentListCorruptError):
            open_list(bad)

    def test_corrupt_row(self, db: Path) -> None:
        with open_list(db) as sl:
            sl.fast_forward(rec(1, None, major=True))
        con = sqlite3.connect(db)
        con.execute("UPDATE segments SET included_segment_ids = '[\"../etc\"]'")
        con.commit()
        con.close()
        with pytest.raises(SegmentListCorruptError):
            open_list(db)

    def test_root_cannot_dangle(self, db: Path) -> None:
        with open_list(db) as sl:
            sl.fast_forward(rec(1, None, major=True))
        con = sqlite3.connect(db)
        con.execute("PRAGMA foreign_keys=ON")
        with pytest.raises(sqlite3.IntegrityError):
            con.execute("DELETE FROM segments")
        con.close()


class TestCrashes:
    @pytest.mark.parametrize("step", ["inserted", "removed", "root_moved"])
    def test_failure_between_steps_rolls_back(self, db: Path, step: str, monkeypatch: pytest.MonkeyPatch) -> None:
        with open_list(db) as sl:
            sl.fast_forward(rec(1, None, major=True))
            sl.fast_forward(rec(2, 1))
        before = snapshot(db)

        def crash(self: SegmentList, at: str) -> None:
            if at == step:
                raise RuntimeError(f"crash at {at}")

        monkeypatch.setattr(SegmentList, "_checkpoint", crash)
        with open_list(db) as sl:
            with pytest.raises(RuntimeError):
                sl.fast_forward(rec(3, 2))
            with pytest.raises(RuntimeError):
                sl.commit_compaction(
                    SegmentRecord(
                        entry=compaction_entry(sl.chain, sid(10), placement_id=PLACEMENT, epoch=1),
                        sha256="a" * 64,
                        row_count=1,
                        size_bytes=1,
                    ),
                    leader_epoch=1,
                )
            assert sl.chain.root == sid(2)  # the cached chain did not move either
        assert snapshot(db) == before

    @pytest.mark.parametrize("step", ["inserted", "removed", "root_moved", "after_commit"])
    def test_process_killed_between_steps(self, db: Path, step: str) -> None:
        """A real crash: the process exits (no rollback, no close) in the middle of a change."""
        with open_list(db) as sl:
            sl.fast_forward(rec(1, None, major=True))
        before = snapshot(db)
        script = textwrap.dedent(
            f"""
            import os, sys
            from pathlib import Path
            from shoal.segments.segment_list import SegmentList, SegmentRecord
            from shoal.segments.chain import SegmentEntry

            def crash(self, at):
                if at == {step!r}:
                    os._exit(17)

            SegmentList._checkpoint = crash
            sl = SegmentList(Path({str(db)!r}), partition_id={P!r}, placement_id={PLACEMENT})
            entry = SegmentEntry(segment_id={sid(2)!r}, base_segment_id={sid(1)!r}, placement_id={PLACEMENT}, epoch=1)
            sl.fast_forward(SegmentRecord(entry=entry, sha256="b" * 64, row_count=2, size_bytes=200))
            os._exit(17)  # after_commit: exits without closing
            """
        )
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
        assert proc.returncode == 17, proc.stderr.decode()
        root, records = snapshot(db)
        if step == "after_commit":
            assert root == sid(2) and [r.segment_id for r in records] == [sid(1), sid(2)]
        else:
            assert (root, records) == before
        with open_list(db) as sl:  # and the list is usable again
            assert sl.fast_forward(rec(3, 2 if step == "after_commit" else 1)).root == sid(3)


class TestRecovery:
    def table(self) -> pa.Table:
        return stamp(pa.table({"k": [3, 1, 2]}), epoch=1, first_seq=0)

    def test_file_written_but_entry_not_committed(self, tmp_path: Path) -> None:
        seg_dir = tmp_path / "segments"
        seg_dir.mkdir()
        with open_list(segment_list_path(tmp_path, P, PLACEMENT)) as sl:
            w = write_segment(seg_dir, sid(1), self.table(), key_columns=["k"])
            sl.fast_forward(
                SegmentRecord(
                    entry=rec(1, None, major=True).entry, sha256=w.sha256, row_count=3, size_bytes=w.size_bytes
                )
            )
            write_segment(seg_dir, sid(2), self.table(), key_columns=["k"])  # crash before its entry
            (seg_dir / f".{sid(3)}.parquet.1.ab.tmp").write_bytes(b"half")  # crash during a write
            result = reconcile(sl.chain, seg_dir)
        assert result.orphan_files == (sid(2),) and result.consistent
        assert [p.name for p in result.removed_temp_files] == [f".{sid(3)}.parquet.1.ab.tmp"]
        assert list_segment_files(seg_dir) == {sid(1)}

    def test_entry_removed_but_file_not_unlinked(self, tmp_path: Path) -> None:
        seg_dir = tmp_path / "segments"
        seg_dir.mkdir()
        with open_list(segment_list_path(tmp_path, P, PLACEMENT)) as sl:
            for n, base in ((1, None), (2, 1)):
                w = write_segment(seg_dir, sid(n), self.table(), key_columns=["k"])
                r = rec(n, base, major=base is None)
                sl.fast_forward(SegmentRecord(entry=r.entry, sha256=w.sha256, row_count=3, size_bytes=w.size_bytes))
            major_entry = compaction_entry(sl.chain, sid(10), placement_id=PLACEMENT, epoch=1)
            w = write_segment(seg_dir, sid(10), self.table(), key_columns=["k"])
            sl.commit_compaction(
                SegmentRecord(entry=major_entry, sha256=w.sha256, row_count=3, size_bytes=w.size_bytes), leader_epoch=1
            )
            sl.remove([sid(1), sid(2)])
            delete_segment_file(seg_dir, sid(1))  # crash before unlinking sid(2)
            chain = sl.load_chain()
        result = reconcile(chain, seg_dir)
        assert result.orphan_files == (sid(2),)
        assert list_segment_files(seg_dir) == {sid(10)}

    def test_missing_file_is_reported(self, tmp_path: Path) -> None:
        chain = SegmentChain().fast_forward(rec(1, None, major=True).entry)
        result = reconcile(chain, tmp_path, delete_orphans=False)
        assert result.missing_files == (sid(1),) and not result.consistent
