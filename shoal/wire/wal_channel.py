"""Reading a WAL channel: ``<prefix>.wal.<partition_id>.<placement_id>``, one Kafka partition.

The channel is written only inside Kafka transactions by the placement that owns it
(``transactional.id`` = the topic name, so a new incarnation fences a zombie), so it is read with
``isolation.level=read_committed``: aborted records never appear. Offsets are not dense:
every committed transaction leaves a control record, which consumers never see.

Writing happens in :mod:`storage_node.partition.leader`, inside the same transaction that
commits the ingest offsets.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from shoal.errors import KafkaOperationError
from shoal.wire.records import WalRecord


@dataclass(frozen=True)
class ChannelRecord:
    offset: int
    record: WalRecord


def _consumer(bootstrap_servers: str, extra: Mapping[str, Any] | None) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": "shoal-wal-reader",  # never commits; assign() only
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.message.max.bytes": 64 * 1024 * 1024,
            **dict(extra or {}),
        }
    )


def read_channel(
    bootstrap_servers: str,
    topic: str,
    start_offset: int,
    *,
    timeout_s: float = 30.0,
    extra: Mapping[str, Any] | None = None,
) -> Iterator[ChannelRecord]:
    """Every committed record of the channel from ``start_offset`` up to its current end.

    The end is the last stable offset when the read starts: callers fence the writer first
    (``init_transactions``), so nothing is in flight. A record that does not decode raises
    :class:`~shoal.errors.WireFormatError`: a WAL channel has one writer, so that is corruption.
    """
    consumer = _consumer(bootstrap_servers, extra)
    try:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s)
        except KafkaException as exc:
            raise KafkaOperationError(f"cannot read the offsets of WAL channel {topic}: {exc}") from exc
        start = max(start_offset, low)
        if start >= high:
            return
        consumer.assign([TopicPartition(topic, 0, start)])
        idle = 0.0
        while True:
            msg = consumer.poll(0.5)
            if msg is None:
                idle += 0.5
                if idle >= timeout_s:
                    raise KafkaOperationError(f"WAL channel {topic}: no progress reading to offset {high}")
                continue
            idle = 0.0
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return
                raise KafkaOperationError(f"WAL channel {topic}: {err}")
            offset = int(msg.offset() or 0)
            yield ChannelRecord(offset, WalRecord.from_bytes(msg.value()))
            if offset + 1 >= high:
                return
    finally:
        consumer.close()


def read_record_at(
    bootstrap_servers: str, topic: str, offset: int, *, timeout_s: float = 10.0, extra: Mapping[str, Any] | None = None
) -> WalRecord | None:
    """The record at exactly ``offset`` (None if it is gone, e.g. truncated, or is a control record)."""
    for item in read_channel(bootstrap_servers, topic, offset, timeout_s=timeout_s, extra=extra):
        return item.record if item.offset == offset else None
    return None
