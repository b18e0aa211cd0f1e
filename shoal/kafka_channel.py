"""Old home of :func:`shoal.kafka.readers.read_to_end`, kept while the storage node is ported
(``bootstrap_servers`` string and ``extra`` librdkafka settings, as before)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import Message

from shoal.kafka import readers
from shoal.kafka.settings import KafkaSettings


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
    return readers.read_to_end(
        KafkaSettings(bootstrap_servers),
        topic,
        start_offset,
        what=what,
        group_id=group_id,
        timeout_s=timeout_s,
        **dict(extra or {}),
    )
