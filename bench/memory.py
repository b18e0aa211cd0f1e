"""Memory benchmark: what a memtable of N rows costs a node, against the Arrow size of its rows.

A leader (and a follower's WAL overlay) keeps the rows it accepted since the last flush as the
versioned Arrow tables of its WAL records (DESIGN.md section 5). This feeds N rows through that
path as a node does, without a cluster: an ingest batch of ~100-byte rows is encoded as a WAL
record's payload (Arrow IPC, the wire codec), decoded (``WalRecord.rows``), stamped with its GTID
columns (``versioned_rows``) and appended to a :class:`~storage_node.replica.memtable.Memtable`.
It reports the process's RSS growth and Arrow's memory pool growth against the Arrow size of the
memtable's tables (``nbytes``), and the merge a flush runs (``Memtable.merged``) on top.

    python -m bench.memory --rows 1000000
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import psutil
import pyarrow as pa

from bench import common


def ingest_batch(first_key: int, n: int, value_bytes: int) -> pa.Table:
    """``n`` rows of the ingest schema (key, ~``value_bytes`` string, not deleted)."""
    from shoal.wire.ingest import DELETED_COLUMN

    values = common.random_strings(n, value_bytes, seed=first_key)
    keys = pa.array(np.arange(first_key, first_key + n, dtype=np.uint64), pa.uint64())
    return pa.table({"k": keys, "v": values, DELETED_COLUMN: pa.array(np.zeros(n, dtype=bool))})


def measure(rows: int, batch_rows: int, value_bytes: int, say: Any) -> dict[str, Any]:
    from shoal.ids import new_partition_id
    from shoal.wire.arrow_ipc import encode_batch
    from shoal.wire.records import Gtid, WalRecord
    from storage_node.replica import versioned_rows
    from storage_node.replica.memtable import Memtable

    pid = new_partition_id()
    process = psutil.Process()
    # every payload is encoded first (a node receives them from Kafka, so they are not the memtable's)
    payloads = []
    for first in range(0, rows, batch_rows):
        n = min(batch_rows, rows - first)
        payloads.append((first, n, encode_batch(ingest_batch(first, n, value_bytes))))
    gc.collect()
    rss_before, pool_before = process.memory_info().rss, pa.total_allocated_bytes()
    memtable = Memtable(start_offset=0)
    with common.timer() as elapsed:
        for i, (first, n, payload) in enumerate(payloads):
            record = WalRecord.create(
                partition_id=pid, placement_id=1, gtid=Gtid(1, first), row_count=n, payload=payload
            )
            memtable.append(versioned_rows(record.rows(), record.gtid), i)
        append_s = elapsed()
    del payloads
    gc.collect()
    rss_after, pool_after = process.memory_info().rss, pa.total_allocated_bytes()
    say(f"{rows:,} rows in the memtable; merging as a flush does")
    with common.timer() as elapsed:
        merged = memtable.merged(["k"])
        merge_s = elapsed()
    assert merged is not None and merged.num_rows == rows
    rss_merged, pool_merged = process.memory_info().rss, pa.total_allocated_bytes()
    mib = 1 << 20
    arrow = memtable.nbytes
    return {
        "rows": rows,
        "arrow MiB": arrow / mib,
        "RSS growth MiB": (rss_after - rss_before) / mib,
        "pool growth MiB": (pool_after - pool_before) / mib,
        "RSS / arrow": (rss_after - rss_before) / arrow,
        "pool / arrow": (pool_after - pool_before) / arrow,
        "append s": append_s,
        "merge s": merge_s,
        "peak with merge MiB": (max(rss_merged, rss_after) - rss_before) / mib,
        "merge pool MiB": (pool_merged - pool_after) / mib,
    }


def main(argv: list[str] | None = None) -> None:
    p = common.parser(__doc__.splitlines()[0], cluster=False)
    p.add_argument("--rows", type=common.positive_int, default=1_000_000, help="rows in the memtable")
    p.add_argument("--batch-rows", type=common.positive_int, default=5_000, help="rows per WAL record")
    p.add_argument("--value-bytes", type=common.positive_int, default=100, help="bytes of the string column per row")
    args = p.parse_args(argv)
    say = common.progress_printer(args.output)
    say(f"feeding {args.rows:,} rows in WAL records of {args.batch_rows:,}")
    result = measure(args.rows, args.batch_rows, args.value_bytes, say)
    notes = [
        "arrow = Memtable.nbytes (the Arrow size of its versioned tables: key, value, GTID columns); "
        "RSS growth counts everything the memtable keeps alive (decoded buffers, Python objects)",
        "the merge (sort + newest version per key) is what a flush adds on top, for as long as it runs",
    ]
    settings = {"rows": args.rows, "batch_rows": args.batch_rows, "value_bytes": args.value_bytes}
    common.report(
        "memtable memory against its Arrow size",
        list(result),
        [result],
        settings,
        args.output,
        notes,
        ratio=result["RSS / arrow"],
        ratio_meaning="RSS growth of a memtable / the Arrow size of its rows (goal <= 2)",
    )


if __name__ == "__main__":
    main()
