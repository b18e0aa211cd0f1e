"""Old home of the WAL channel reader (now :mod:`shoal.kafka.readers`: I/O lives in the Kafka
layer, ``wire/`` keeps pure codecs), kept while the storage node is ported."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from shoal.kafka import readers
from shoal.kafka.readers import ChannelRecord
from shoal.kafka.settings import KafkaSettings
from shoal.wire.records import WalRecord

__all__ = ["ChannelRecord", "read_channel", "read_record_at"]


def read_channel(
    bootstrap_servers: str,
    topic: str,
    start_offset: int,
    *,
    timeout_s: float = 30.0,
    extra: Mapping[str, Any] | None = None,
) -> Iterator[ChannelRecord]:
    return readers.read_wal_channel(
        KafkaSettings(bootstrap_servers), topic, start_offset, timeout_s=timeout_s, **dict(extra or {})
    )


def read_record_at(
    bootstrap_servers: str, topic: str, offset: int, *, timeout_s: float = 10.0, extra: Mapping[str, Any] | None = None
) -> WalRecord | None:
    return readers.read_wal_record_at(
        KafkaSettings(bootstrap_servers), topic, offset, timeout_s=timeout_s, **dict(extra or {})
    )
