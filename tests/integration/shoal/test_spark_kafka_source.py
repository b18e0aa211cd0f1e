"""Spark Structured Streaming reads a Kafka topic exactly once across a restart from its checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer

from shoal.kafka.admin import create_topic
from shoal.kafka.settings import TopicPolicy
from shoal_app.testing.cluster import TestCluster

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _run_once(spark, bootstrap: str, topic: str, checkpoint: Path, out: Path) -> None:
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .load()
        .selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None


def test_every_record_exactly_once_across_restart(
    spark, cluster: TestCluster, kafka_admin, topic_prefix: str, tmp_path: Path
) -> None:
    topic = f"{topic_prefix}.events"
    create_topic(kafka_admin, topic, partitions=2, policy=TopicPolicy())
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})

    def produce(start: int, end: int) -> None:
        for i in range(start, end):
            producer.produce(topic, key=str(i).encode(), value=f"event-{i}".encode())
        assert producer.flush(30) == 0

    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    produce(0, 100)
    _run_once(spark, cluster.bootstrap_servers, topic, checkpoint, out)
    assert spark.read.parquet(str(out)).count() == 100

    produce(100, 250)
    _run_once(spark, cluster.bootstrap_servers, topic, checkpoint, out)  # a new query from the same checkpoint

    rows = spark.read.parquet(str(out)).select("value").collect()
    values = sorted(r["value"] for r in rows)
    assert len(values) == 250
    assert values == sorted(f"event-{i}" for i in range(250))
