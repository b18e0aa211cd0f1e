"""Helpers for the producer integration tests: tables in real metadata, and reading ingest topics back."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from metadata.coordinator import MetadataCoordinator
from metadata.store import KafkaFileStore, KafkaStoreConfig
from metadata.table import Column, ColumnType, TableDefinition
from shoal.wire.arrow_ipc import decode_batch
from shoal.wire.ingest import TABLE_HEADER


def make_store(cluster: Any, prefix: str) -> KafkaFileStore:
    return KafkaFileStore(KafkaStoreConfig(cluster.bootstrap_servers, topic_prefix=prefix))


def events_table(name: str = "events") -> TableDefinition:
    return TableDefinition(
        name,
        (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING), Column("n", ColumnType.INT64)),
        ("k",),
        "k",
        1,
    )


def create(coord: MetadataCoordinator, table: TableDefinition, split_points: list[bytes]) -> Any:
    return coord.create_table(table, ["node-1"], split_points)


def read_topic(bootstrap: str, topic: str, group: str, timeout: float = 30.0) -> list[tuple[pa.Table, Any]]:
    """Every message of ``topic`` (partition 0) decoded, with its headers; [] if the topic is empty or missing."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        md = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            return []
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        if high == 0:
            return []
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((decode_batch(msg.value()), dict(msg.headers() or []).get(TABLE_HEADER)))
            if (msg.offset() or 0) >= high - 1:
                return out
        raise AssertionError(f"could not read {topic} up to offset {high}")
    finally:
        consumer.close()


def topic_exists(admin: Any, topic: str) -> bool:
    md = admin.list_topics(topic, timeout=10).topics.get(topic)
    return md is not None and md.error is None


def commit_as_leader(bootstrap: str, group: str, topic: str) -> None:
    """Consume ``topic`` to its end in ``group`` and commit, as a partition leader would."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.commit(offsets=[TopicPartition(topic, 0, high)], asynchronous=False)
    finally:
        consumer.close()
