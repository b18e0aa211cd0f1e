"""Fast-forward benchmark: applying a replicated segment costs (almost) nothing per row.

A follower that receives a segment stores its bytes (``write_segment_bytes``: checksum, fsync,
rename) and fast-forwards its segment list onto it (``SegmentList.fast_forward``: one SQLite
transaction). Seed 000 section 3.3: the follower never touches the rows. The baseline, measured in
the same run on the same file, is row-based replication: decode the Parquet and merge each row batch
into a memtable (``lww_merge``), which grows with the segment. DESIGN.md section 5.

    python -m bench.fast_forward --sizes 1000,10000,100000,1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench import common


def versioned_rows(n: int, first_key: int, value_bytes: int, seq: int) -> pa.Table:
    from shoal.segments.versioned import stamp

    values = common.random_strings(n, value_bytes, seed=first_key)
    keys = pa.array(np.arange(first_key, first_key + n, dtype=np.uint64), pa.uint64())
    return stamp(pa.table({"k": keys, "v": values}), epoch=1, first_seq=seq)


class Replica:
    """A follower's segment list with a base segment as root, onto which segments are fast-forwarded."""

    def __init__(self, directory: Path, base_rows: pa.Table) -> None:
        from shoal.ids import new_partition_id, new_segment_id
        from shoal.segments import SegmentEntry, SegmentList, SegmentRecord, segment_list_path, write_segment

        self.directory = directory
        self.partition_id = new_partition_id()
        self.list = SegmentList(
            segment_list_path(directory, self.partition_id, 1), partition_id=self.partition_id, placement_id=1
        )
        sid = new_segment_id()
        w = write_segment(directory, sid, base_rows, key_columns=["k"])
        entry = SegmentEntry(segment_id=sid, base_segment_id=None, placement_id=1, epoch=1, is_major=True)
        self.list.fast_forward_add(
            SegmentRecord(entry=entry, sha256=w.sha256, row_count=w.row_count, size_bytes=w.size_bytes)
        )
        self.offset = 1

    def apply(self, payload: bytes, sha256: str, rows: int) -> None:
        """What a follower does with a received segment: store the bytes, fast-forward the list."""
        from shoal.ids import new_segment_id
        from shoal.segments import SegmentEntry, SegmentRecord, WalRange, write_segment_bytes

        sid = new_segment_id()
        chunks = (payload[i : i + (1 << 20)] for i in range(0, len(payload), 1 << 20))
        w = write_segment_bytes(self.directory, sid, chunks, expected_sha256=sha256, expected_size=len(payload))
        covered = (WalRange(self.partition_id, 1, self.offset, self.offset + 1),)
        self.offset += 1
        entry = SegmentEntry(segment_id=sid, base_segment_id=self.list.root, placement_id=1, epoch=1, covered=covered)
        self.list.fast_forward(SegmentRecord(entry=entry, sha256=w.sha256, row_count=rows, size_bytes=w.size_bytes))

    def close(self) -> None:
        self.list.close()


def row_based_apply(payload: bytes, memtable_rows: pa.Table) -> pa.Table:
    """The baseline: decode the segment and merge each of its row batches into the memtable."""
    from shoal.segments import lww_merge

    current = memtable_rows
    for batch in pq.ParquetFile(io.BytesIO(payload)).iter_batches(batch_size=64 * 1024):
        current = lww_merge([current, pa.Table.from_batches([batch])], ["k"])
    return current


def measure(size: int, repeat: int, value_bytes: int, workdir: Path) -> dict[str, Any]:
    import hashlib

    from shoal.ids import new_segment_id
    from shoal.segments import write_segment

    base = versioned_rows(1000, 0, value_bytes, 0)
    rows = versioned_rows(size, 500, value_bytes, 1000)  # half the base keys are overwritten, then new keys
    scratch = workdir / f"src-{size}"
    scratch.mkdir()
    written = write_segment(scratch, new_segment_id(), rows, key_columns=["k"])
    payload = written.path.read_bytes()
    sha = hashlib.sha256(payload).hexdigest()
    replica_dir = workdir / f"replica-{size}"
    replica_dir.mkdir()
    replica = Replica(replica_dir, base)
    ff: list[float] = []
    ff_list: list[float] = []
    row_based: list[float] = []
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            replica.apply(payload, sha, size)
            ff.append(time.perf_counter() - t0)
            t0 = time.perf_counter()  # the list operation alone, on a file that is already there
            from shoal.segments import SegmentEntry, SegmentRecord

            entry = SegmentEntry(
                segment_id=new_segment_id(), base_segment_id=replica.list.root, placement_id=1, epoch=1
            )
            replica.list.fast_forward(SegmentRecord(entry=entry, sha256=sha, row_count=size, size_bytes=len(payload)))
            ff_list.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            merged = row_based_apply(payload, base)
            row_based.append(time.perf_counter() - t0)
            assert merged.num_rows == size + 500
    finally:
        replica.close()
    ff_s, list_s, rb_s = statistics.median(ff), statistics.median(ff_list), statistics.median(row_based)
    return {
        "rows": size,
        "segment MB": len(payload) / 1e6,
        "fast-forward ms": ff_s * 1e3,
        "list only ms": list_s * 1e3,
        "row-based ms": rb_s * 1e3,
        "row-based / ff": rb_s / ff_s,
        "ff us/row": ff_s / size * 1e6,
        "row-based us/row": rb_s / size * 1e6,
    }


def main(argv: list[str] | None = None) -> None:
    p: argparse.ArgumentParser = common.parser(__doc__.splitlines()[0], cluster=False)
    p.add_argument(
        "--sizes",
        type=common.int_list,
        default=[1000, 10_000, 100_000, 1_000_000],
        help="segment sizes in rows (comma-separated)",
    )
    p.add_argument("--repeat", type=common.positive_int, default=3, help="runs per size (median reported)")
    p.add_argument("--value-bytes", type=common.positive_int, default=32, help="bytes of the string column per row")
    p.add_argument("--dir", type=Path, default=None, help="where to write segments (default: a temp dir)")
    args = p.parse_args(argv)
    say = common.progress_printer(args.output)
    results = []
    with tempfile.TemporaryDirectory(prefix="shoal-bench-ff-", dir=args.dir) as tmp:
        for size in args.sizes:
            say(f"segment of {size:,} rows")
            results.append(measure(size, args.repeat, args.value_bytes, Path(tmp)))
    first, last = results[0], results[-1]
    growth = last["rows"] / first["rows"]
    notes = [
        f"from {first['rows']:,} to {last['rows']:,} rows ({growth:,.0f}x): fast-forward grew "
        f"{last['fast-forward ms'] / first['fast-forward ms']:.1f}x (list alone "
        f"{last['list only ms'] / first['list only ms']:.1f}x), row-based apply grew "
        f"{last['row-based ms'] / first['row-based ms']:.1f}x",
        "fast-forward = write_segment_bytes (sha256, fsync, rename, footer check) + SegmentList.fast_forward; "
        "row-based = Parquet decode + lww_merge of each 64k-row batch into a memtable",
    ]
    settings = {
        "sizes": ",".join(str(s) for s in args.sizes),
        "repeat": args.repeat,
        "value_bytes": args.value_bytes,
        "parquet": "zstd, sorted by key",
    }
    common.report(
        "fast-forward vs row-based apply, by segment size",
        list(results[0]),
        results,
        settings,
        args.output,
        notes,
        ratio=last["row-based / ff"],
        ratio_meaning=f"row-based apply time / fast-forward time at {last['rows']:,} rows (higher = fast-forward wins)",
    )


if __name__ == "__main__":
    main()
