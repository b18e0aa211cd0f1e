"""Spark sink benchmark: rows/s of ``df.write.format("shoal")`` vs Spark writing the same DataFrame to Parquet.

Both runs write one cached DataFrame in the same Spark session: the shoal sink (validation, routing,
Arrow IPC to the ingest topics, idempotent acks=all, and ``sync()`` until the leaders accepted every
row) and Spark's own Parquet writer to a local directory. The ratio says what the sink costs
relative to Spark's fastest local sink. DESIGN.md section 9.

    python -m bench.spark_sink --rows 200000 --partitions 2
"""

from __future__ import annotations

import shutil
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
    args = p.parse_args(argv)
    say = common.progress_printer(args.output)
    from spark_jobs.datasource import register
    from spark_jobs.session import SparkConfig, build_session

    cache = common.cache_dir()
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
                    df = (
                        spark.range(args.rows, numPartitions=args.spark_partitions)
                        .selectExpr(
                            f"id * {(2**63 - 1) // args.rows} as k", f"repeat('x', {args.value_bytes}) as v", "id as n"
                        )
                        .cache()
                    )
                    df.count()
                    say("Spark -> Parquet")
                    with common.timer() as parquet_s:
                        df.write.mode("overwrite").parquet(str(work / "parquet"))
                    options = {
                        "table": "bench_sink",
                        "zk": meta.zk_hosts,
                        "bootstrapServers": meta.bootstrap_servers,
                        "topicPrefix": prefix,
                    }
                    say("Spark -> shoal sink (until the leaders accepted every row)")
                    with common.timer() as sink_s:
                        df.write.format("shoal").options(**options).mode("append").save()
                finally:
                    if spark is not None:
                        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [
        {
            "sink": "shoal (format('shoal'), synced)",
            "rows": args.rows,
            "seconds": sink_s(),
            "rows/s": args.rows / sink_s(),
        },
        {
            "sink": "parquet (df.write.parquet)",
            "rows": args.rows,
            "seconds": parquet_s(),
            "rows/s": args.rows / parquet_s(),
        },
    ]
    ratio = parquet_s() / sink_s()
    settings = {
        "rows": args.rows,
        "value_bytes": args.value_bytes,
        "table_partitions": args.partitions,
        "spark_partitions": args.spark_partitions,
        "master": args.master,
        "cluster": "throwaway local (1 broker)" if ep.started_here else ep.bootstrap_servers,
    }
    notes = [
        f"shoal sink / Parquet rows/s ratio: {ratio:.2f}",
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
