"""The split forwarder's Kafka producer takes every message the parent's ingest topic took."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer

import storage_node.roles.forward as forward
from metadata.keyspace import UNBOUNDED, KeyRange
from metadata.metadata_file import PartitionEntry, RetiredPartition
from metadata.table import Column, ColumnType, TableDefinition
from shoal.ids import new_partition_id
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames

TABLE = TableDefinition("t", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1)


class _Opened(Exception):
    pass


def test_a_straggler_up_to_max_ingest_bytes_fits_the_forwarders_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka refuses a message above its ``message.max.bytes`` (1,000,000 by default) before
    sending it; a leader accepts up to ``max_ingest_bytes`` (16 MiB). The forwarder retried such a
    straggler for ever, and every one behind it waited (an audit's proof)."""
    seen: dict[str, Any] = {}

    def channel(_settings: Any, _txn_id: str, **overrides: Any) -> Any:
        seen.update(overrides)
        raise _Opened

    monkeypatch.setattr(forward, "TransactionalChannel", channel)
    parent = RetiredPartition(PartitionEntry(b"", new_partition_id()), KeyRange(UNBOUNDED, UNBOUNDED))
    max_ingest = 4 * 1024 * 1024
    fw = forward.StragglerForwarder(
        kafka=KafkaSettings("127.0.0.1:1"),
        topics=TopicNames("p"),
        table=TABLE,
        parent=parent,
        max_ingest_bytes=max_ingest,
    )
    with pytest.raises(_Opened):
        fw._forward()
    overrides = {k: v for k, v in seen.items() if k != "call_timeout_s"}
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0, **overrides})
    producer.produce("p.ingest.x", b"x" * max_ingest)  # raised MSG_SIZE_TOO_LARGE without the override
    producer.purge()
