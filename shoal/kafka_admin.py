"""Old home of :mod:`shoal.kafka.admin`, kept while the storage node is ported (same names,
``bootstrap_servers`` strings instead of :class:`~shoal.kafka.settings.KafkaSettings`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka.admin import AdminClient

from shoal.kafka import admin as _admin
from shoal.kafka import clients
from shoal.kafka.admin import create_topic, delete_topics, wait_for_topic
from shoal.kafka.settings import KafkaSettings

__all__ = ["admin_client", "create_topic", "delete_topics", "log_start_and_end", "wait_for_topic"]


def admin_client(bootstrap_servers: str, extra: Mapping[str, Any] | None = None) -> AdminClient:
    return clients.admin(KafkaSettings(bootstrap_servers), **dict(extra or {}))


def log_start_and_end(
    bootstrap_servers: str, topic: str, partition: int = 0, timeout_s: float = 10.0
) -> tuple[int, int]:
    return _admin.log_start_and_end(KafkaSettings(bootstrap_servers), topic, partition, timeout_s)
