"""The shoal sink against real Spark, Kafka, ZooKeeper and storage nodes.

- batch ``df.write.format("shoal")`` then the reader returns exactly what ``shoal scan`` returns;
- a DataFrame that does not fit the table fails before anything is produced;
- a streaming query killed (kill -9) mid-batch, restarted, then replayed again after its last
  commit-log entry is deleted: every row once, and the replay does not undo a newer write.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition
from spark_it_support import SparkCluster, spark_cluster, start_node, wait_for_leaders

from producer import Producer, ProducerConfig
from shoal.jvm import jars
from shoal.topics import TopicNames
from shoal_app.cli.node import scan_command
from shoal_app.testing.wait import wait_until
from spark_jobs.datasource import register
from storage_node.config import FlushPolicy

pytestmark = [pytest.mark.integration, pytest.mark.spark]

HERE = Path(__file__).parent


def _ends(sc: SparkCluster) -> dict[str, int]:
    """High watermark of every ingest topic of the table (0 for a topic not created yet)."""
    topics = TopicNames(sc.meta.topic_prefix)
    c = Consumer({"bootstrap.servers": sc.meta.bootstrap_servers, "group.id": "spark-it-watermarks"})
    try:
        out = {}
        existing = c.list_topics(timeout=10).topics
        for p in sc.file.partitions:
            topic = topics.ingest(p.partition_id)
            out[topic] = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1] if topic in existing else 0
        return out
    finally:
        c.close()


def _scan_json(sc: SparkCluster, *extra: str) -> list[dict[str, Any]]:
    res = CliRunner().invoke(scan_command, [sc.table.name, "--output", "json", *extra], env=sc.env)
    assert res.exit_code == 0, res.output
    return [json.loads(line) for line in res.output.splitlines() if line.startswith("{")]


def test_batch_write_and_reader_match_shoal_scan(
    spark: Any, cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    register(spark)
    with spark_cluster(cluster.bootstrap_servers, zk_hosts, topic_prefix, tmp_path) as sc:
        data = [(k, f"v{k}", k * 10) for k in [*range(1, 40), *range(1000, 1030)]]
        df = spark.createDataFrame(data, "k long, v string, n long").repartition(3)
        df.write.format("shoal").options(**sc.options).mode("append").save()
        # an upsert and a row whose nullable columns are left out
        spark.createDataFrame([(5, "five", 1)], "k long, v string, n long").write.format("shoal").options(
            **sc.options
        ).mode("append").save()
        spark.createDataFrame([(2000,)], "k long").write.format("shoal").options(**sc.options).mode("append").save()

        expected = _scan_json(sc)
        assert len(expected) == len(data) + 1
        assert {"k": 5, "v": "five", "n": 1} in expected and {"k": 2000, "n": None, "v": None} in expected

        read = spark.read.format("shoal").options(**sc.options).load()
        assert read.rdd.getNumPartitions() == len(sc.file.partitions)
        assert read.schema.simpleString() == "struct<k:bigint,v:string,n:bigint>"
        got = sorted((r.asDict() for r in read.collect()), key=lambda r: r["k"])
        assert got == expected
        from_node = spark.read.format("shoal").options(**sc.options).option("node", "node-1").load().collect()
        assert sorted((r.asDict() for r in from_node), key=lambda r: r["k"]) == _scan_json(sc, "--node", "node-1")


def test_type_mismatch_fails_before_anything_is_written(
    spark: Any, cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    register(spark)
    with spark_cluster(cluster.bootstrap_servers, zk_hosts, topic_prefix, tmp_path, start=False) as sc:
        bad = spark.createDataFrame([(1, 2, 3)], "k long, v int, n long")
        with pytest.raises(Exception, match=r"column 'v' is int in the DataFrame, but string in the table"):
            bad.write.format("shoal").options(**sc.options).mode("append").save()
        no_key = spark.createDataFrame([("x",)], "v string")
        with pytest.raises(Exception, match=r"column 'k' \(uint64, not null\) is missing"):
            no_key.write.format("shoal").options(**sc.options).mode("append").save()
        stream = spark.readStream.format("rate").load().selectExpr("value as k", "timestamp as v")
        with pytest.raises(Exception, match=r"column 'v' is timestamp in the DataFrame, but string"):
            q = (
                stream.writeStream.format("shoal")
                .options(**sc.options)
                .option("checkpointLocation", str(tmp_path / "ck"))
                .start()
            )
            try:
                q.awaitTermination(120)
            finally:
                q.stop()
        with pytest.raises(Exception, match=r"needs .option\('table', NAME\)"):
            spark.createDataFrame([(1,)], "k long").write.format("shoal").mode("append").save()
        assert set(_ends(sc).values()) == {0}  # nothing reached any ingest topic


def _run_stream(spark: Any, sc: SparkCluster, source: Path, checkpoint: Path) -> None:
    q = (
        spark.readStream.schema("k long, v string, n long")
        .json(str(source))
        .writeStream.format("shoal")
        .options(**sc.options)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()


def test_stream_killed_mid_batch_and_replayed_writes_each_row_once(
    spark: Any, cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    register(spark)
    source, checkpoint = tmp_path / "in", tmp_path / "ck"
    source.mkdir()
    keys = [*range(1, 61), *range(1000, 1040)]
    (source / "a.json").write_text("".join(json.dumps({"k": k, "v": "a", "n": k}) + "\n" for k in keys))
    flush = FlushPolicy(max_rows=100_000, max_age_s=1.0)
    with spark_cluster(cluster.bootstrap_servers, zk_hosts, topic_prefix, tmp_path, start=False, flush=flush) as sc:
        # 1. a driver process writes batch 0 but blocks in sync() (no leader yet): kill -9 it mid-batch.
        options = {**sc.options, "syncTimeout": "600"}
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        cache = str(jars.cache_dir_from(os.environ))
        proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "sink_driver_proc.py"),
                json.dumps(options),
                str(checkpoint),
                str(source),
                cache,
            ],
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert wait_until(lambda: all(v > 0 for v in _ends(sc).values()), 240), "driver never produced"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM: its own process group
            proc.wait(30)
        assert (checkpoint / "offsets" / "0").exists() and not (checkpoint / "commits" / "0").exists()

        # 2. leaders come up; the restarted query replays batch 0 and commits it.
        sc.nodes["node-1"] = start_node(sc.meta, "node-1", tmp_path, flush)
        wait_for_leaders(sc)
        _run_stream(spark, sc, source, checkpoint)
        assert (checkpoint / "commits" / "0").exists()
        assert sc.rows() == {k: ("a", k) for k in keys}

        # 3. a newer write to key 1, then Spark loses its last commit-log entry and replays batch 0.
        with Producer(ProducerConfig(sc.meta.connection)) as p:
            p.write(sc.table.name, [{"k": 1, "v": "b", "n": -1}])
            p.sync(60)
        before = _ends(sc)
        (checkpoint / "commits" / "0").unlink()
        shutil.rmtree(checkpoint / "commits" / ".0.crc", ignore_errors=True)
        if (checkpoint / "commits" / ".0.crc").exists():
            (checkpoint / "commits" / ".0.crc").unlink()
        _run_stream(spark, sc, source, checkpoint)
        assert (checkpoint / "commits" / "0").exists()
        assert _ends(sc) == before  # the replay produced nothing
        assert sc.rows() == {**{k: ("a", k) for k in keys}, 1: ("b", -1)}
