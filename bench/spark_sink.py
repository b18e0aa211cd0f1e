"""Spark sink benchmark: rows/s of ``df.write.format("shoal")`` vs Spark writing the same DataFrame to Parquet.

Each round writes one cached DataFrame twice in the same Spark session: the shoal sink (validation,
routing, Arrow IPC to the ingest topics, idempotent acks=all, and ``sync()`` until the leaders
accepted every row) and Spark's own Parquet writer to a local directory. The ratio says what the
sink costs relative to Spark's fastest local sink. ``--warmup`` rounds run first, unmeasured (the
first write of a session starts the data source's Python workers and the cluster's first
transactions; it is reported as "cold"), then ``--repeat`` rounds, alternating which side goes
first, and the medians are compared. Every round has keys of its own, so the leaders see fresh
writes, not upserts of the round before. DESIGN.md section 9.

    python -m bench.spark_sink --rows 2000000 --partitions 2
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common


def _meta_and_table(ep: common.Endpoints, prefix: str) -> tuple[Any, Any]:
    from metadata.client import MetadataConfig
    from metadata.table import Column, ColumnType, TableDefinition

    meta = MetadataConfig(zk_hosts=ep.zk_connect, bootstrap_servers=ep.bootstrap_servers, topic_prefix=prefix)
    table = TableDefinition(
        "bench_sink",
        (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING), Column("n", ColumnType.INT64)),
        ("k",),
        "k",
        1,
    )
    return meta, table


def main(argv: list[str] | None = None) -> None:
    p = common.parser(__doc__.splitlines()[0], cluster=True)
    p.add_argument("--rows", type=common.positive_int, default=100_000, help="rows in the DataFrame")
    p.add_argument("--value-bytes", type=common.positive_int, default=64, help="bytes of the string column per row")
    p.add_argument("--partitions", type=common.positive_int, default=2, help="table partitions (one leader each)")
    p.add_argument("--spark-partitions", type=common.positive_int, default=2, help="DataFrame partitions (tasks)")
    p.add_argument("--master", default="local[2]", help="Spark master")
    p.add_argument("--repeat", type=common.positive_int, default=3, help="measured rounds (each writes to both sinks)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first")
    args = p.parse_args(argv)
    say = common.progress_printer(args.output)
    from spark_jobs.datasource import register
    from spark_jobs.session import SparkConfig, build_session

    cache = common.cache_dir()
    sink_times: list[float] = []
    parquet_times: list[float] = []
    cold_sink: list[float] = []
    cold_parquet: list[float] = []
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-sink-"))
    prefix = f"bench{int(time.time())}"
    try:
        with common.cluster(args, say) as ep:
            from storage_node.config import FlushPolicy

            meta, table = _meta_and_table(ep, prefix)
            step = 2**63 // args.partitions
            splits = [(step * i).to_bytes(8, "big") for i in range(1, args.partitions)]
            spark = None
            with common.leading_node(
                ep, meta, table, work / "node", flush=FlushPolicy(max_age_s=2.0), split_points=splits
            ):
                try:
                    spark = build_session(SparkConfig(cache_dir=cache, master=args.master, app_name="bench-sink"))
                    register(spark)
                    options = {
                        "table": "bench_sink",
                        "zk": meta.zk_hosts,
                        "bootstrapServers": meta.bootstrap_servers,
                        "topicPrefix": prefix,
                    }
                    key_step = (2**63 - 1 - args.warmup - args.repeat) // args.rows
                    for run in range(args.warmup + args.repeat):
                        warm = run < args.warmup
                        label = f"warm-up {run + 1}" if warm else f"run {run - args.warmup + 1} of {args.repeat}"
                        df = (
                            spark.range(args.rows, numPartitions=args.spark_partitions)
                            .selectExpr(
                                f"id * {key_step} + {run} as k", f"repeat('x', {args.value_bytes}) as v", "id as n"
                            )
                            .cache()
                        )
                        df.count()

                        sides = ("parquet", "sink") if run % 2 == 0 else ("sink", "parquet")
                        for side in sides:  # alternated, so neither side always follows the other
                            what = (
                                "Parquet" if side == "parquet" else "shoal sink (until the leaders accepted every row)"
                            )
                            say(f"Spark -> {what} ({label})")
                            with common.timer() as t:
                                if side == "parquet":
                                    df.write.mode("overwrite").parquet(str(work / "parquet"))
                                else:
                                    df.write.format("shoal").options(**options).mode("append").save()
                            times = {"parquet": (cold_parquet, parquet_times), "sink": (cold_sink, sink_times)}[side]
                            times[0 if warm else 1].append(t())
                        df.unpersist()
                finally:
                    if spark is not None:
                        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sink_s, parquet_s = statistics.median(sink_times), statistics.median(parquet_times)
    rows = [
        {
            "sink": "shoal (format('shoal'), synced)",
            "rows": args.rows,
            "seconds": sink_s,
            "rows/s": args.rows / sink_s,
        },
        {
            "sink": "parquet (df.write.parquet)",
            "rows": args.rows,
            "seconds": parquet_s,
            "rows/s": args.rows / parquet_s,
        },
    ]
    ratio = parquet_s / sink_s
    settings = {
        "rows": args.rows,
        "value_bytes": args.value_bytes,
        "table_partitions": args.partitions,
        "spark_partitions": args.spark_partitions,
        "master": args.master,
        "repeat": args.repeat,
        "warmup": args.warmup,
        "cluster": "throwaway local (1 broker)" if ep.started_here else ep.bootstrap_servers,
    }
    cold = ", ".join(f"sink {a:.2f} s, Parquet {b:.2f} s" for a, b in zip(cold_sink, cold_parquet, strict=True))
    notes = [
        f"shoal sink / Parquet rows/s ratio: {ratio:.2f} (medians of {args.repeat} rounds)",
        "sink runs (s): " + ", ".join(f"{t:.2f}" for t in sink_times),
        "Parquet runs (s): " + ", ".join(f"{t:.2f}" for t in parquet_times),
        "warm-up rounds (cold, not in the ratio): " + (cold or "none (--warmup 0)"),
        "the sink's time includes Kafka acks=all and waiting for the leaders (sync); Parquet is a local write",
    ]
    common.report(
        "Spark sink: format('shoal') vs Parquet",
        ["sink", "rows", "seconds", "rows/s"],
        rows,
        settings,
        args.output,
        notes,
        ratio=ratio,
        ratio_meaning="P5: shoal sink rows/s / Spark-to-Parquet rows/s (goal >= 0.5)",
    )


if __name__ == "__main__":
    main()
