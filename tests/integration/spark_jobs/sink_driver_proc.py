"""A Spark driver process for the sink kill test: JSON files -> format("shoal"), until killed.

argv: options-json checkpoint-dir input-dir cache-dir
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from spark_jobs.datasource import register
from spark_jobs.session import SparkConfig, build_session


def main() -> None:
    options = json.loads(sys.argv[1])
    checkpoint, source, cache = sys.argv[2], sys.argv[3], Path(sys.argv[4])
    spark = build_session(SparkConfig(cache_dir=cache, master="local[1]", app_name="sink-kill", shuffle_partitions=1))
    register(spark)
    df = spark.readStream.schema("k long, v string, n long").json(source)
    query = (
        df.writeStream.format("shoal")
        .options(**options)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    print("started", query.id, flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
