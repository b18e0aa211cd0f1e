"""Producer configuration: where the cluster is, message size bounds, and the ``sync()`` polling policy."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from metadata.client import MetadataConfig, resolve_connection
from shoal.errors import ConfigError
from shoal.kafka import clients
from shoal.kafka.settings import ConnectionFields, ConnectionSettings
from shoal.topics import TopicNames

DEFAULT_MAX_MESSAGE_BYTES = 1_000_000
"""One Arrow IPC stream per Kafka message stays below this (Kafka's default max is ~1 MiB)."""


@dataclass(frozen=True)
class SyncPolicy:
    """How ``sync()`` polls the leaders' committed offsets: exponential backoff between intervals.

    A leader accepts a batch in one Kafka transaction, tens of milliseconds after the write on an
    idle cluster, so the first rounds come quickly and the interval stays short (at most 50 ms
    late); a round reads only the partitions still lagging, one request per leader group.
    ``clock`` and ``sleep`` are injectable so the policy can be tested without waiting.
    """

    initial_interval_s: float = 0.005
    max_interval_s: float = 0.05
    backoff: float = 1.5
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def __post_init__(self) -> None:
        if self.initial_interval_s <= 0 or self.max_interval_s < self.initial_interval_s or self.backoff < 1:
            raise ConfigError(
                "SyncPolicy needs 0 < initial_interval_s <= max_interval_s and backoff >= 1, got "
                f"{self.initial_interval_s}, {self.max_interval_s}, {self.backoff}"
            )

    def intervals(self) -> Any:
        """An endless iterator of sleep intervals."""
        interval = self.initial_interval_s
        while True:
            yield interval
            interval = min(self.max_interval_s, interval * self.backoff)


@dataclass(frozen=True)
class ProducerConfig(ConnectionFields):
    """Everything a :class:`producer.Producer` needs.

    ``max_message_bytes`` bounds one encoded Kafka message (an Arrow IPC stream); bigger batches are
    split. ``max_value_bytes`` bounds one string/binary value and ``max_row_bytes`` the variable-size
    part of one row, so that every valid row fits in a message. ``kafka_config`` (librdkafka names)
    is passed to the confluent-kafka producer last, except for the settings the design fixes
    (idempotence, acks). ``connection`` is resolved once at the edge: :meth:`from_env` or
    :meth:`ConnectionSettings.resolve <shoal.kafka.settings.ConnectionSettings.resolve>`.
    """

    connection: ConnectionSettings
    zk_timeout_s: float = 10.0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_rows_per_message: int = 100_000
    max_value_bytes: int = 256 * 1024
    max_row_bytes: int = 512 * 1024
    linger_ms: int = 5
    create_topics: bool = True
    topic_timeout_s: float = 30.0
    watch_metadata: bool = True
    sync_policy: SyncPolicy = field(default_factory=SyncPolicy)
    split_drain_timeout_s: float = 90.0
    """How long a write waits for this producer's earlier writes to a partition that split to be
    accepted (forwarded to the children) before it goes to a child (:meth:`Producer.write`)."""
    check_refusals: bool = True
    """Whether ``sync()`` also reads the deadletter topic and raises :class:`~producer.MessagesRefusedError`
    for this producer's messages a leader refused (:mod:`producer.refusals`). Off, a refused message
    counts as accepted."""
    kafka_config: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.connection, ConnectionSettings):
            raise ConfigError(f"connection must be a ConnectionSettings, got {type(self.connection).__name__}")
        TopicNames(self.topic_prefix)
        for name in ("max_message_bytes", "max_rows_per_message", "max_value_bytes", "max_row_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive int, got {value!r:.40}")
        if self.max_message_bytes < 4096:
            raise ConfigError(f"max_message_bytes must be at least 4096, got {self.max_message_bytes}")
        if self.max_row_bytes >= self.max_message_bytes:
            raise ConfigError(
                f"max_row_bytes ({self.max_row_bytes}) must be below max_message_bytes ({self.max_message_bytes}) "
                "so that every valid row fits in one message"
            )
        if self.max_value_bytes > self.max_row_bytes:
            raise ConfigError(f"max_value_bytes ({self.max_value_bytes}) must not exceed max_row_bytes")
        if isinstance(self.split_drain_timeout_s, bool) or not self.split_drain_timeout_s > 0:
            raise ConfigError(f"split_drain_timeout_s must be > 0, got {self.split_drain_timeout_s!r:.40}")
        if self.linger_ms < 0:
            raise ConfigError(f"linger_ms must be >= 0, got {self.linger_ms}")
        for fixed in ("enable.idempotence", "acks"):
            if fixed in self.kafka_config:
                raise ConfigError(
                    f"kafka_config may not set {fixed!r}: the producer is always idempotent with acks=all"
                )

    @property
    def topics(self) -> TopicNames:
        return TopicNames(self.topic_prefix)

    def metadata_config(self) -> MetadataConfig:
        return MetadataConfig(connection=self.connection, zk_timeout_s=self.zk_timeout_s)

    def kafka_producer_overrides(self) -> dict[str, Any]:
        """The librdkafka settings of the row producer on top of :func:`shoal.kafka.clients.producer`'s."""
        return {
            "linger.ms": self.linger_ms,
            # Arrow IPC bodies are already compressed (zstd/lz4): Kafka compression would gain little.
            "compression.type": "none",
            "message.max.bytes": max(self.max_message_bytes + 64 * 1024, 1_000_000),
            **dict(self.kafka_config),
        }

    def kafka_producer_config(self) -> dict[str, Any]:
        """The full librdkafka configuration of the row producer (idempotent, ``acks=all``)."""
        return clients.producer_config(self.kafka, **self.kafka_producer_overrides())

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ProducerConfig:
        """The connection from SHOAL_ZK_CONNECT, SHOAL_BOOTSTRAP_SERVERS, SHOAL_TOPIC_PREFIX, SHOAL_ZK_ROOT,
        SHOAL_ZK_USER, SHOAL_ZK_PASSWORD and SHOAL_KAFKA_* (:meth:`ConnectionSettings.resolve`); connection
        ``overrides`` that are not None win, the others are ProducerConfig fields."""
        connection, rest = resolve_connection(env, overrides)
        return cls(connection, **rest)
