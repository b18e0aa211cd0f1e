"""Reading a WAL channel: ``<prefix>.wal.<partition_id>.<placement_id>``, one Kafka partition.

The channel is written only inside Kafka transactions by the placement that owns it
(``transactional.id`` = the topic name, so a new incarnation fences a zombie), so it is read with
``isolation.level=read_committed``: aborted records never appear. Offsets are not dense:
every committed transaction leaves a control record, which consumers never see.

Writing happens on the storage node (the leader role), inside the same transaction that commits
the ingest offsets; reading to the end is :func:`shoal.kafka_channel.read_to_end`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from shoal.kafka_channel import read_to_end
from shoal.wire.records import WalRecord


@dataclass(frozen=True)
class ChannelRecord:
    offset: int
    record: WalRecord


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
    settings = {"fetch.message.max.bytes": 64 * 1024 * 1024, **dict(extra or {})}
    for msg in read_to_end(bootstrap_servers, topic, start_offset, what="WAL channel", group_id="shoal-wal-reader",
                           timeout_s=timeout_s, extra=settings):  # fmt: skip
        yield ChannelRecord(int(msg.offset() or 0), WalRecord.from_bytes(msg.value()))


def read_record_at(
    bootstrap_servers: str, topic: str, offset: int, *, timeout_s: float = 10.0, extra: Mapping[str, Any] | None = None
) -> WalRecord | None:
    """The record at exactly ``offset`` (None if it is gone, e.g. truncated, or is a control record)."""
    for item in read_channel(bootstrap_servers, topic, offset, timeout_s=timeout_s, extra=extra):
        return item.record if item.offset == offset else None
    return None
