"""Compaction benchmark: MB/s of the compaction service vs plain pyarrow read + dedup + write of the same segments.

A storage node leads one partition; rounds of overlapping upserts make one major and several minors,
which the leader publishes on its segments channel. Measured in the same run over the same
segments: the compaction service computing the major (the chunks read back from Kafka, reassembled
and checked, the newest version per key kept, the Parquet major written; by a Spark job, or in the
service's process for inputs up to ``--local-max-bytes``), and the baseline, a
single process reading the segment files with pyarrow, ``lww_merge`` and ``write_segment``. MB = the
input segments' bytes. Each side runs ``--repeat`` times, alternated, after ``--warmup`` unmeasured
runs of each; the medians are compared, and the service's cold first run is reported apart.
DESIGN.md sections 5 and 9.

    python -m bench.compaction --rounds 6 --rows-per-round 50000
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common


def main(argv: list[str] | None = None) -> None:
    p = common.parser(__doc__.splitlines()[0], cluster=True)
    p.add_argument("--rounds", type=common.positive_int, default=5, help="write rounds (one segment each)")
    p.add_argument("--rows-per-round", type=common.positive_int, default=20_000, help="rows per round")
    p.add_argument("--value-bytes", type=common.positive_int, default=64, help="bytes of the string column per row")
    p.add_argument("--master", default="local[2]", help="Spark master")
    p.add_argument(
        "--local-max-bytes",
        type=int,
        default=None,
        help="the service's local_max_bytes (inputs up to it skip the Spark job; 0 = always Spark; "
        "default: the service's default)",
    )
    p.add_argument(
        "--repeat",
        type=common.positive_int,
        default=3,
        help="runs of each side, alternated (service, pyarrow, service, ...); the medians are compared",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="unmeasured runs of each side first (the service's first run in a process is reported as 'cold')",
    )
    p.add_argument(
        "--profile",
        default=None,
        help="write a cProfile of the last timed compaction (service.prepare, warm) to this file",
    )
    args = p.parse_args(argv)
    say = common.progress_printer(args.output)

    from metadata.client import MetadataConfig
    from metadata.table import Column, ColumnType, TableDefinition
    from producer import Producer, ProducerConfig
    from shoal.kafka.settings import ConnectionSettings
    from shoal.segments import lww_merge, read_segment, write_segment
    from spark_jobs.compaction.policy import CompactionPolicy
    from spark_jobs.compaction.service import CompactionConfig, CompactionService
    from spark_jobs.session import SparkConfig, build_session
    from storage_node.config import FlushPolicy

    cache = common.cache_dir()
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-compaction-"))
    prefix = f"benchc{int(time.time())}"
    table = TableDefinition(
        "bench_compact", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
    )
    try:
        with common.cluster(args, say) as ep:
            meta = MetadataConfig(zk_hosts=ep.zk_connect, bootstrap_servers=ep.bootstrap_servers, topic_prefix=prefix)
            spark = None
            with common.leading_node(ep, meta, table, work / "node", flush=FlushPolicy(max_age_s=1.0)) as node:
                try:
                    held = next(iter(node.partitions().values()))
                    say(f"writing {args.rounds} rounds of {args.rows_per_round} rows")
                    with Producer(
                        ProducerConfig(ConnectionSettings.plain(ep.bootstrap_servers, ep.zk_connect, prefix))
                    ) as producer:
                        for r in range(args.rounds):
                            before = len(held.replica.chain.since_latest_major())
                            start = r * args.rows_per_round // 2  # half of each round overwrites the previous one
                            producer.write(table.name, _round_rows(start, args.rows_per_round, args.value_bytes, r))
                            producer.sync(120)
                            common.wait_for(
                                lambda b=before: len(held.replica.chain.since_latest_major()) > b,
                                120,
                                "a segment flush",
                            )
                    spark = build_session(SparkConfig(cache_dir=cache, master=args.master, app_name="bench-compaction"))
                    local = {} if args.local_max_bytes is None else {"local_max_bytes": args.local_max_bytes}
                    config = CompactionConfig(
                        meta, CompactionPolicy(min_minors=1), table=table.name, work_dir=work / "out", **local
                    )
                    with CompactionService(spark, config) as service:
                        entries = held.replica.chain.since_latest_major()
                        common.wait_for(lambda: _published(service, held.partition_id, len(entries)), 120, "publishing")
                        mb = (
                            sum(
                                held.replica.chain.get(e.segment_id) is not None
                                and (held.replica.directory / f"{e.segment_id}.parquet").stat().st_size
                                for e in entries
                            )
                            / 1e6
                        )
                        service_times: list[float] = []
                        arrow_times: list[float] = []
                        arrow_peaks: list[float] = []
                        cold: list[float] = []

                        def baseline() -> int:
                            """pyarrow alone: read the segment files, merge, write the major; its rows."""
                            merged = lww_merge(
                                [read_segment(held.replica.directory, e.segment_id) for e in entries],
                                list(table.primary_key),
                            )
                            write_segment(work, "0" * 32, merged, key_columns=list(table.primary_key))
                            return int(merged.num_rows)

                        for run in range(args.warmup):  # unmeasured: first reads of the channel, allocator growth
                            say(f"warm-up {run + 1} of {args.warmup}: the service, then pyarrow")
                            with common.timer() as warm_s:
                                service.prepare(held.partition_id, force=True)
                            cold.append(warm_s())
                            baseline()
                        for run in range(args.repeat):  # alternated, so neither side gets the warm caches
                            say(f"compaction service (compute + write the major), run {run + 1} of {args.repeat}")
                            profile = args.profile if run == args.repeat - 1 else None
                            with ArrowPeak() as peak, common.timer() as service_timer, common.profiled(profile):
                                prepared = service.prepare(held.partition_id, force=True)
                            arrow_peaks.append(peak.mib)
                            assert prepared is not None
                            service_times.append(service_timer())
                            out_rows = prepared.manifest.row_count
                            say(f"pyarrow read + lww_merge + write, run {run + 1} of {args.repeat}")
                            with common.timer() as arrow_timer:
                                baseline_rows = baseline()
                            arrow_times.append(arrow_timer())
                            assert baseline_rows == out_rows, (baseline_rows, out_rows)
                finally:
                    if spark is not None:
                        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    service_s, baseline_s = statistics.median(service_times), statistics.median(arrow_times)
    rows = [
        {
            "compaction": "compaction service (Kafka chunks -> major)",
            "segments": len(entries),
            "input MB": mb,
            "output rows": out_rows,
            "seconds": service_s,
            "MB/s": mb / service_s,
        },
        {
            "compaction": "pyarrow read + dedup + write",
            "segments": len(entries),
            "input MB": mb,
            "output rows": out_rows,
            "seconds": baseline_s,
            "MB/s": mb / baseline_s,
        },
    ]
    ratio = baseline_s / service_s
    settings = {
        "rounds": args.rounds,
        "rows_per_round": args.rows_per_round,
        "value_bytes": args.value_bytes,
        "master": args.master,
        "repeat": args.repeat,
        "warmup": args.warmup,
        "local_max_bytes": config.local_max_bytes,
        "path": "in-process (no Spark job)" if mb * 1e6 <= config.local_max_bytes else "Spark job",
        "cluster": "throwaway local (1 broker)" if ep.started_here else ep.bootstrap_servers,
    }
    notes = [
        f"service / pyarrow MB/s ratio: {ratio:.2f} (medians of {args.repeat} alternated runs)",
        "service runs (s): " + ", ".join(f"{t:.3f}" for t in service_times),
        "the service's first run in this process (cold, not in the ratio): "
        + (f"{cold[0]:.3f} s" if cold else "not run (--warmup 0)"),
        "pyarrow runs (s): " + ", ".join(f"{t:.3f}" for t in arrow_times),
        f"Arrow memory held by the service's run at its peak (sampled every 5 ms): {max(arrow_peaks):.0f} MiB "
        f"for {mb:.1f} MB of input segments (plus the chunk bytes in Python, about twice the input)",
        "the service's time includes reading every chunk back from Kafka and checking each segment's sha256; "
        "the baseline reads the leader's local files",
    ]
    common.report(
        "compaction: the compaction service vs plain pyarrow",
        ["compaction", "segments", "input MB", "output rows", "seconds", "MB/s"],
        rows,
        settings,
        args.output,
        notes,
        ratio=ratio,
        ratio_meaning=f"P6 at {mb:.1f} MB of minors: compaction MB/s / plain pyarrow MB/s "
        "(goal >= 0.3 at 5 MB, >= 0.7 at 50 MB)",
    )


class ArrowPeak:
    """Peak of Arrow's allocated bytes above the level at entry, sampled every 5 ms on a thread."""

    def __init__(self) -> None:
        import threading

        self.mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="arrow-peak", daemon=True)

    def _sample(self) -> None:
        import pyarrow as pa

        base = peak = pa.total_allocated_bytes()
        while not self._stop.wait(0.005):
            peak = max(peak, pa.total_allocated_bytes())
        self.mib = (max(peak, pa.total_allocated_bytes()) - base) / 2**20

    def __enter__(self) -> ArrowPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _round_rows(start: int, n: int, value_bytes: int, round_no: int) -> Any:
    """``n`` rows with keys ``start..start+n`` and random (barely compressible) values, as one Arrow table."""
    import numpy as np
    import pyarrow as pa

    from bench.write_path import build_rows

    rows = build_rows(n, value_bytes, seed=round_no)
    return pa.table({"k": pa.array(np.arange(start, start + n, dtype=np.uint64)), "v": rows.column("v")})


def _published(service: object, partition_id: str, count: int) -> bool:
    from spark_jobs.compaction.service import CompactionService

    assert isinstance(service, CompactionService)
    service.refresh()
    found = service._leader_view(partition_id)
    return found is not None and len(found[0].chain.since_latest_major()) >= count


if __name__ == "__main__":
    main()
