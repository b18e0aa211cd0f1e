"""The foundation round trip that `make demo` shows: ZooKeeper CAS, a Kafka transaction, and a
Spark Structured Streaming read of a Kafka topic, each against the real local servers.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError

from shoal.kafka import clients
from shoal.kafka.admin import create_topic, delete_topics
from shoal.kafka.settings import KafkaSettings
from shoal.worker import Deadline

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class StepResult:
    name: str
    ok: bool
    seconds: float
    details: dict[str, Any] = field(default_factory=dict)


def zookeeper_cas(zk_connect: str, run_id: str) -> StepResult:
    """Create a counter znode, CAS it forward, and show that a stale version is refused."""
    t0 = time.monotonic()
    zk = KazooClient(hosts=zk_connect, timeout=10)
    zk.start(timeout=15)
    try:
        path = f"/shoal-demo/{run_id}/counter"
        zk.create(path, b"0", makepath=True)
        value, stat = zk.get(path)
        new = zk.set(path, str(int(value) + 1).encode(), version=stat.version)
        try:
            zk.set(path, b"999", version=stat.version)
            stale_refused = False
        except BadVersionError:
            stale_refused = True
        final, _ = zk.get(path)
        zk.delete(f"/shoal-demo/{run_id}", recursive=True)
    finally:
        zk.stop()
        zk.close()
    ok = stale_refused and final == b"1"
    return StepResult(
        "zookeeper compare-and-swap",
        ok,
        time.monotonic() - t0,
        {"version_after_cas": new.version, "stale_version_refused": stale_refused, "final_value": final.decode()},
    )


def kafka_transaction(bootstrap: str, topic: str, run_id: str) -> StepResult:
    """Commit one transaction and abort another; a read_committed consumer sees only the first."""
    t0 = time.monotonic()
    kafka = KafkaSettings(bootstrap)
    admin = clients.admin(kafka)
    create_topic(admin, topic, policy=kafka.topics, partitions=1)
    producer = clients.producer(kafka, transactional_id=f"shoal-demo-{run_id}")
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=str(i).encode(), value=json.dumps({"n": i, "txn": "committed"}).encode())
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(3, 5):
        producer.produce(topic, key=str(i).encode(), value=json.dumps({"n": i, "txn": "aborted"}).encode())
    producer.abort_transaction(30)
    from_start: dict[str, Any] = {"auto.offset.reset": "earliest"}
    consumer = clients.consumer(kafka, group_id=f"shoal-demo-{run_id}", **from_start)
    consumer.subscribe([topic])
    seen: list[dict[str, Any]] = []
    deadline = Deadline(20)
    while not deadline.expired() and len(seen) < 3:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.append(json.loads(msg.value() or b"null"))
    # Give an aborted record a last chance to (wrongly) show up.
    extra = consumer.consume(10, timeout=1.0)
    seen += [json.loads(m.value() or b"null") for m in extra if m.error() is None]
    consumer.close()
    ok = [r["n"] for r in seen] == [0, 1, 2]
    return StepResult(
        "kafka transaction (commit + abort, read_committed)",
        ok,
        time.monotonic() - t0,
        {"committed_seen": [r["n"] for r in seen], "aborted_seen": any(r["txn"] == "aborted" for r in seen)},
    )


def spark_streaming_read(spark: SparkSession, bootstrap: str, topic: str) -> StepResult:
    """Structured Streaming reads the topic with Spark's Kafka source (read_committed)."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="shoal-demo-ckpt-") as ckpt:
        stream = (
            spark.readStream.format("kafka")
            .options(**clients.spark_kafka_options(KafkaSettings(bootstrap)))
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .load()
            .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "offset")
        )
        name = f"shoal_demo_{uuid.uuid4().hex[:8]}"
        query = (
            stream.writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        rows = spark.sql(f"SELECT key, value, offset FROM {name} ORDER BY offset").collect()
    keys = [r["key"] for r in rows]
    return StepResult(
        "spark structured streaming read (kafka source)",
        keys == ["0", "1", "2"],
        time.monotonic() - t0,
        {"rows": [r.asDict() for r in rows]},
    )


def cleanup_topic(bootstrap: str, topic: str) -> None:
    delete_topics(clients.admin(KafkaSettings(bootstrap)), [topic])
