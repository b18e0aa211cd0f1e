"""Settings of a storage node and of the partitions it leads (validated, frozen).

The connection settings are the core's typed ones (:class:`shoal.kafka.settings.ConnectionSettings`,
resolved once at the edge by ``shoal node``); every Kafka client of the node is built from them by
:mod:`shoal.kafka.clients`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.errors import ConfigError
from shoal.ids import validate_server_id
from shoal.kafka.settings import ConnectionFields, ConnectionSettings, KafkaSettings
from shoal.topics import TopicNames
from storage_node.allocator import DEFAULT_ARROW_MEMORY_POOL, validate_pool_name


@dataclass(frozen=True)
class FlushPolicy:
    """When the memtable becomes a minor segment: whichever threshold is passed first.

    Defaults suit both tests (a few seconds of age) and a real load (64 MiB or 1M rows per segment).
    """

    max_rows: int = 1_000_000
    max_bytes: int = 64 * 1024 * 1024
    max_age_s: float = 10.0

    def __post_init__(self) -> None:
        if not (self.max_rows > 0 and self.max_bytes > 0 and 0 < self.max_age_s < math.inf):  # NaN too
            raise ConfigError(f"flush thresholds must be positive, got {self}")

    def due(self, rows: int, nbytes: int, age_s: float) -> bool:
        return rows > 0 and (rows >= self.max_rows or nbytes >= self.max_bytes or age_s >= self.max_age_s)


@dataclass(frozen=True)
class ReplicaLagPolicy:
    """When a follower is out of sync (DESIGN.md section 6; Kafka's ``replica.lag.time.max.ms``).

    A follower that has not been caught up with the leader's durable segments for ``max_lag_s``
    (which includes a dead one), or that still lacks more than ``max_lag_bytes`` of them, is marked
    out of sync in ZooKeeper and no longer holds the Tail (:mod:`storage_node.replication.tail`).
    The byte bound sits above one flush (:class:`FlushPolicy` ``max_bytes``) so a healthy follower
    receiving the newest segment is never dropped.
    """

    max_lag_s: float = 30.0
    max_lag_bytes: int = 128 * 1024 * 1024

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_lag_s, bool)
            or not isinstance(self.max_lag_s, (int, float))
            or not 0 < self.max_lag_s < math.inf
        ):
            raise ConfigError(f"replica max_lag_s must be a positive number of seconds, got {self.max_lag_s!r:.40}")
        if isinstance(self.max_lag_bytes, bool) or not isinstance(self.max_lag_bytes, int) or self.max_lag_bytes <= 0:
            raise ConfigError(f"replica max_lag_bytes must be a positive int, got {self.max_lag_bytes!r:.40}")


@dataclass(frozen=True)
class LeaderConfig:
    """How a partition leader consumes, validates and writes."""

    kafka: KafkaSettings
    topics: TopicNames = field(default_factory=TopicNames)
    flush: FlushPolicy = field(default_factory=FlushPolicy)
    max_messages_per_transaction: int = 200
    """Ingest messages consumed into one Kafka transaction (one WAL record per valid message)."""
    max_transaction_decoded_bytes: int = 256 * 1024 * 1024
    """A transaction ends after the message whose decoded rows take its total to this or past it (the rest
    of the batch goes to the next one): the rows are held until the commit, and a compressed
    message may decode to up to 1 GiB (Arrow IPC with zstd), so 200 of them must not be held at once."""
    poll_timeout_s: float = 0.2
    max_ingest_bytes: int = 16 * 1024 * 1024
    """An ingest message larger than this is rejected to deadletter (oversized)."""
    max_deadletter_payload_bytes: int = 900 * 1024
    """A rejected payload larger than this is not copied to deadletter (its size is in a header)."""
    wal_max_message_bytes: int = 32 * 1024 * 1024
    transaction_timeout_ms: int = 60_000
    transaction_call_timeout_s: float = 30.0
    """librdkafka's own timeout of init_transactions / send_offsets_to_transaction / commit / abort.
    Each call is also bounded a little longer (:data:`shoal.kafka.transaction.GUARD_GRACE_S`), since
    librdkafka can fail to honour it; past that the leader role ends and a fresh producer takes the
    channel."""
    max_minors_before_stall: int = 64
    """Writer stall: when more minor segments than this await compaction, each loop step sleeps first."""
    minor_stall_s: float = 0.2
    """How long the leader sleeps per step while stalled (0 = never stall)."""
    gc_every_s: float = 5.0
    """How often the leader merges then deletes unreferenced segments (source 3.5)."""
    tail_every_s: float = 5.0
    """How often the leader updates the in-sync set and moves the Tail of its channels (replication.tail)."""
    startup_retry_s: float = 30.0
    """How long start-up (topics, fencing, replay, adoption) retries transient Kafka errors (e.g.
    NOT_LEADER_FOR_PARTITION on a topic created a moment before) with backoff before the role fails."""

    def __post_init__(self) -> None:
        if not isinstance(self.kafka, KafkaSettings):
            raise ConfigError(f"kafka must be KafkaSettings, got {type(self.kafka).__name__}")
        if (
            isinstance(self.max_minors_before_stall, bool)
            or not isinstance(self.max_minors_before_stall, int)
            or self.max_minors_before_stall < 0
        ):
            raise ConfigError(f"max_minors_before_stall must be an int >= 0, got {self.max_minors_before_stall!r}")
        if not 0 <= self.minor_stall_s <= 60:
            raise ConfigError(f"minor_stall_s must be in [0, 60] seconds, got {self.minor_stall_s!r}")
        if self.gc_every_s <= 0:
            raise ConfigError(f"gc_every_s must be positive, got {self.gc_every_s!r}")
        if self.tail_every_s <= 0:
            raise ConfigError(f"tail_every_s must be positive, got {self.tail_every_s!r}")
        if self.startup_retry_s < 0:
            raise ConfigError(f"startup_retry_s must be >= 0, got {self.startup_retry_s!r}")
        if self.transaction_call_timeout_s <= 0:
            raise ConfigError("transaction_call_timeout_s must be positive")
        if self.max_messages_per_transaction <= 0 or self.max_transaction_decoded_bytes <= 0:
            raise ConfigError("max_messages_per_transaction and max_transaction_decoded_bytes must be positive")
        if self.max_ingest_bytes <= 0 or self.max_deadletter_payload_bytes < 0:
            raise ConfigError("byte limits must be positive")


@dataclass(frozen=True)
class NodeConfig(ConnectionFields):
    """One storage node process: its id, where its data lives, how to reach the cluster."""

    server_id: str
    data_dir: Path
    connection: ConnectionSettings
    """Kafka, ZooKeeper and the topic prefix (built once by the caller: ``ConnectionSettings.resolve``)."""
    flight_host: str = "127.0.0.1"
    flight_port: int = 0
    """0 = any free port (the chosen address is registered in ZooKeeper)."""
    flush: FlushPolicy = field(default_factory=FlushPolicy)
    table_poll_s: float = 2.0
    """How often the node looks for new tables."""
    metrics_port: int | None = None
    """Serve Prometheus /metrics on this port (0 = any free port); None = no exporter."""
    metrics_host: str = "127.0.0.1"
    max_minors_before_stall: int = 64
    minor_stall_s: float = 0.2
    max_transaction_decoded_bytes: int = 256 * 1024 * 1024
    """LeaderConfig.max_transaction_decoded_bytes of the partitions this node leads."""
    leader_rebalance_delay_s: float = 30.0
    """How long a partition's preferred leader must have been caught up before this node, leading it
    instead, hands leadership back (Kafka's ``leader.imbalance.check.interval.seconds``)."""
    replica_lag: ReplicaLagPolicy = field(default_factory=ReplicaLagPolicy)
    """When the partitions this node leads mark a follower out of sync."""
    tail_every_s: float = 5.0
    """How often the partitions this node leads move their Tail (LeaderConfig.tail_every_s)."""
    arrow_memory_pool: str = DEFAULT_ARROW_MEMORY_POOL
    """The process's Arrow allocator while the node runs (:mod:`storage_node.allocator`)."""

    def __post_init__(self) -> None:
        validate_server_id(self.server_id)
        validate_pool_name(self.arrow_memory_pool)
        if not 0 <= self.leader_rebalance_delay_s <= 86_400:
            raise ConfigError(f"leader_rebalance_delay_s must be in [0, 86400], got {self.leader_rebalance_delay_s!r}")
        if not isinstance(self.replica_lag, ReplicaLagPolicy):
            raise ConfigError(f"replica_lag must be ReplicaLagPolicy, got {type(self.replica_lag).__name__}")
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        if not isinstance(self.connection, ConnectionSettings):
            raise ConfigError(f"connection must be ConnectionSettings, got {type(self.connection).__name__}")
        TopicNames(self.topic_prefix)
        if not 0 <= self.flight_port < 65536:
            raise ConfigError(f"flight_port must be in [0, 65535], got {self.flight_port}")
        if self.metrics_port is not None and not 0 <= self.metrics_port < 65536:
            raise ConfigError(f"metrics_port must be in [0, 65535], got {self.metrics_port}")
        self.leader_config()  # validates the stall settings

    @property
    def topics(self) -> TopicNames:
        return TopicNames(self.connection.topic_prefix)

    def leader_config(self) -> LeaderConfig:
        return LeaderConfig(
            self.connection.kafka,
            self.topics,
            self.flush,
            max_minors_before_stall=self.max_minors_before_stall,
            minor_stall_s=self.minor_stall_s,
            tail_every_s=self.tail_every_s,
            max_transaction_decoded_bytes=self.max_transaction_decoded_bytes,
        )


def consumer_overrides(fetch_max_bytes: int | None = None) -> dict[str, Any]:
    """librdkafka settings of the node's consumers (for :func:`shoal.kafka.clients.consumer`): a
    group without a committed offset starts at the earliest one; ``fetch_max_bytes`` raises
    ``fetch.message.max.bytes`` for channels with large records."""
    out: dict[str, Any] = {"auto.offset.reset": "earliest"}
    if fetch_max_bytes is not None:
        out["fetch.message.max.bytes"] = fetch_max_bytes
    return out
