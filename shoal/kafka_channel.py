"""Reading a channel (a topic with one Kafka partition, DESIGN.md section 3) up to its current end.

A channel is written inside Kafka transactions by one authority, so it is read with
``isolation.level=read_committed`` and offsets are not dense (each commit leaves a control record
that consumers never see). :func:`read_to_end` yields the committed messages from a start offset up
to the end the channel had when the read began: the WAL channel reader (``shoal.wire.wal_channel``)
and the segments-channel manifest reader (``shoal.segments.channel_reader``) decode what it yields.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from shoal.errors import KafkaOperationError

_POLL_S = 0.5


def read_to_end(
    bootstrap_servers: str,
    topic: str,
    start_offset: int,
    *,
    what: str,
    group_id: str,
    timeout_s: float = 30.0,
    extra: Mapping[str, Any] | None = None,
) -> Iterator[Message]:
    """Every committed message of ``topic`` partition 0 from ``start_offset`` (or the log start, if
    later) up to the high watermark read at the start.

    ``what`` names the channel in errors ("WAL channel", "segments channel"); ``group_id`` is only a
    label (``assign()``, never commits). KafkaOperationError when the offsets cannot be read, on a
    consumer error, or when no message arrives for ``timeout_s``.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": group_id,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            **dict(extra or {}),
        }
    )
    try:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s)
        except KafkaException as exc:
            raise KafkaOperationError(f"cannot read the offsets of {what} {topic}: {exc}") from exc
        start = max(start_offset, low)
        if start >= high:
            return
        consumer.assign([TopicPartition(topic, 0, start)])
        idle = 0.0
        while True:
            msg = consumer.poll(_POLL_S)
            if msg is None:
                idle += _POLL_S
                if idle >= timeout_s:
                    raise KafkaOperationError(f"{what} {topic}: no progress reading to offset {high}")
                continue
            idle = 0.0
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return
                raise KafkaOperationError(f"{what} {topic}: {err}")
            yield msg
            if int(msg.offset() or 0) + 1 >= high:
                return
    finally:
        consumer.close()
