"""Major check benchmark: memory and time of a leader's major check in key ranges against all at once.

Before a leader commits a compacted major (DESIGN.md section 5) it checks the major's rows (keys,
versions and values) against the last-writer-wins merge of the segment files it replaces
(:func:`shoal.segments.major_check.check_major_files`). All at once, that check holds every row of
the partition in memory; in key ranges (the default: about 1M rows or 64 MiB of columns a pass) it
holds about one range. This writes a partition's worth of segments (a previous major and
``--minors`` minors of overlapping upserts, ~100-byte rows, uint64 or string keys) and the major
they make, then runs the check all at once, in key ranges, and in key ranges on keys and versions
only, each in a fresh process so that its peak is its own: the Arrow memory pool's peak, the
process's peak RSS growth and the seconds. The ratio is the key-range check's Arrow peak over the
one-pass check's (lower is better).

    python -m bench.major_check --rows 3000000
"""

from __future__ import annotations

import multiprocessing as mp
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench import common

KEY = ["k"]


def _segment(first: int, n: int, keyspace: int, seq0: int, value_bytes: int, key_type: str, seed: int) -> pa.Table:
    from shoal.segments.versioned import DELETED_COLUMN, EPOCH_COLUMN, SEQ_COLUMN

    rng = np.random.default_rng(seed)
    ints = (first + rng.permutation(n)) % keyspace if first >= 0 else rng.integers(0, keyspace, n)
    keys = pa.array(ints.astype(np.uint64), pa.uint64())
    if key_type == "string":
        keys = pa.array([f"user-{k:020d}" for k in ints.tolist()], pa.string())
    return pa.table(
        {
            "k": keys,
            "v": common.random_strings(n, value_bytes, seed=seed),
            EPOCH_COLUMN: pa.array(np.full(n, 1, dtype=np.int64)),
            SEQ_COLUMN: pa.array(np.arange(seq0, seq0 + n, dtype=np.int64)),
            DELETED_COLUMN: pa.array(np.zeros(n, dtype=bool)),
        }
    )


def write_partition(directory: Path, rows: int, minors: int, value_bytes: int, key_type: str) -> tuple[list[str], str]:
    """A previous major of half the rows, ``minors`` minors of upserts (half of them new keys) and
    the major they make; returns (replaced ids, major id)."""
    from shoal.ids import new_segment_id
    from shoal.segments.merge import lww_merge
    from shoal.segments.parquet_io import read_segment, write_segment

    base = rows // 2
    replaced = []
    sid = new_segment_id()
    write_segment(directory, sid, _segment(0, base, base, 0, value_bytes, key_type, 1), key_columns=KEY)
    replaced.append(sid)
    per = max(1, (rows - base) // minors)
    for i in range(minors):
        sid = new_segment_id()
        table = _segment(-1, per, base * 2, base + i * per, value_bytes, key_type, 2 + i)
        write_segment(directory, sid, table, key_columns=KEY)
        replaced.append(sid)
    merged = lww_merge([read_segment(directory, s) for s in replaced], KEY)
    major = new_segment_id()
    write_segment(directory, major, merged, key_columns=KEY)
    return replaced, major


def _peak_rss_kib() -> int:
    """The process's peak RSS (``VmHWM``; ``ru_maxrss`` would carry the parent's over ``execve``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _run(directory: str, replaced: list[str], major: str, whole: bool, values: bool, out: Any) -> None:
    import time

    from shoal.segments.major_check import check_major_files
    from storage_node.allocator import use_arrow_memory_pool
    from storage_node.config import DEFAULT_ARROW_MEMORY_POOL

    pool = use_arrow_memory_pool(DEFAULT_ARROW_MEMORY_POOL)  # the node's
    rss0 = _peak_rss_kib()
    started = time.perf_counter()
    limits = {"rows_per_pass": 2**62, "bytes_per_pass": 2**62} if whole else {}
    check = check_major_files(Path(directory), replaced, major, KEY, values=values, **limits)
    seconds = time.perf_counter() - started
    rss1 = _peak_rss_kib()
    out.put(
        {
            "passes": check.passes,
            "rows of all files": check.rows,
            "seconds": seconds,
            "Arrow peak MiB": pool.max_memory() / 2**20,
            "peak RSS growth MiB": (rss1 - rss0) / 1024,
            "pool": pool.backend_name,
        }
    )


def measure(directory: Path, replaced: list[str], major: str, *, whole: bool, values: bool = True) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_run, args=(str(directory), replaced, major, whole, values, out))
    proc.start()
    try:
        result = out.get(timeout=600)
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    return dict(result)


def main(argv: list[str] | None = None) -> None:
    p = common.parser(__doc__.splitlines()[0], cluster=False)
    p.add_argument("--rows", type=common.positive_int, default=3_000_000, help="rows in the replaced segments")
    p.add_argument("--minors", type=common.positive_int, default=9, help="minors after the previous major")
    p.add_argument("--value-bytes", type=common.positive_int, default=84, help="bytes of the string column per row")
    p.add_argument("--key-type", choices=("uint64", "string"), default="uint64", help="the primary key's type")
    args = p.parse_args(argv)
    say = common.progress_printer(args.output)
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-major-check-"))
    try:
        say(f"writing {args.rows:,} rows as a major and {args.minors} minors, and the major they make")
        replaced, major = write_partition(work, args.rows, args.minors, args.value_bytes, args.key_type)
        say("checking all at once (one pass)")
        whole = {"check": "one pass", **measure(work, replaced, major, whole=True)}
        say("checking in key ranges (the default)")
        ranges = {"check": "key ranges", **measure(work, replaced, major, whole=False)}
        say("checking in key ranges, keys and versions only (values not compared)")
        versions = {"check": "key ranges, versions only", **measure(work, replaced, major, whole=False, values=False)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratio = ranges["Arrow peak MiB"] / whole["Arrow peak MiB"] if whole["Arrow peak MiB"] else None
    settings = {
        "rows": args.rows,
        "minors": args.minors,
        "value_bytes": args.value_bytes,
        "key_type": args.key_type,
    }
    notes = [
        "each check runs in a fresh process with the node's Arrow memory pool: "
        "Arrow peak = the pool's max_memory(), RSS = VmHWM growth",
        "rows of all files: the replaced segments and the major together",
    ]
    common.report(
        "a leader's major check: key ranges against all at once",
        list(ranges),
        [whole, ranges, versions],
        settings,
        args.output,
        notes,
        ratio=ratio,
        ratio_meaning="Arrow peak of the check in key ranges / Arrow peak of the check all at once (lower is better)",
    )


if __name__ == "__main__":
    main()
