"""Settings of a storage node and of the partitions it leads (validated, frozen)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from shoal.errors import ConfigError
from shoal.ids import validate_server_id
from shoal.topics import TopicNames


@dataclass(frozen=True)
class FlushPolicy:
    """When the memtable becomes a minor segment: whichever threshold is passed first.

    Defaults suit both tests (a few seconds of age) and a real load (64 MiB or 1M rows per segment).
    """

    max_rows: int = 1_000_000
    max_bytes: int = 64 * 1024 * 1024
    max_age_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_rows <= 0 or self.max_bytes <= 0 or self.max_age_s <= 0:
            raise ConfigError(f"flush thresholds must be positive, got {self}")

    def due(self, rows: int, nbytes: int, age_s: float) -> bool:
        return rows > 0 and (rows >= self.max_rows or nbytes >= self.max_bytes or age_s >= self.max_age_s)


@dataclass(frozen=True)
class LeaderConfig:
    """How a partition leader consumes, validates and writes."""

    bootstrap_servers: str
    topics: TopicNames = field(default_factory=TopicNames)
    flush: FlushPolicy = field(default_factory=FlushPolicy)
    max_messages_per_transaction: int = 200
    """Ingest messages consumed into one Kafka transaction (one WAL record per valid message)."""
    poll_timeout_s: float = 0.2
    max_ingest_bytes: int = 16 * 1024 * 1024
    """An ingest message larger than this is rejected to deadletter (oversized)."""
    max_deadletter_payload_bytes: int = 900 * 1024
    """A rejected payload larger than this is not copied to deadletter (its size is in a header)."""
    wal_max_message_bytes: int = 32 * 1024 * 1024
    topic_replication_factor: int = -1
    """-1 = the broker default."""
    transaction_timeout_ms: int = 60_000
    transaction_call_timeout_s: float = 60.0
    """Bound on send_offsets_to_transaction / commit / abort, which librdkafka can fail to honour
    (its own timeout is 30 s); past it the leader role ends and a fresh producer takes the channel."""
    kafka_config: tuple[tuple[str, str], ...] = ()
    """Extra librdkafka settings for every client."""
    max_minors_before_stall: int = 64
    """Writer stall: when more minor segments than this await compaction, each loop step sleeps first."""
    minor_stall_s: float = 0.2
    """How long the leader sleeps per step while stalled (0 = never stall)."""
    gc_every_s: float = 5.0
    """How often the leader merges then deletes unreferenced segments (source 3.5)."""

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            raise ConfigError("bootstrap_servers must be a non-empty host:port list")
        if isinstance(self.max_minors_before_stall, bool) or not isinstance(self.max_minors_before_stall, int) \
                or self.max_minors_before_stall < 0:  # fmt: skip
            raise ConfigError(f"max_minors_before_stall must be an int >= 0, got {self.max_minors_before_stall!r}")
        if not 0 <= self.minor_stall_s <= 60:
            raise ConfigError(f"minor_stall_s must be in [0, 60] seconds, got {self.minor_stall_s!r}")
        if self.gc_every_s <= 0:
            raise ConfigError(f"gc_every_s must be positive, got {self.gc_every_s!r}")
        if self.transaction_call_timeout_s <= 0:
            raise ConfigError("transaction_call_timeout_s must be positive")
        if self.max_messages_per_transaction <= 0:
            raise ConfigError("max_messages_per_transaction must be positive")
        if self.max_ingest_bytes <= 0 or self.max_deadletter_payload_bytes < 0:
            raise ConfigError("byte limits must be positive")


@dataclass(frozen=True)
class NodeConfig:
    """One storage node process: its id, where its data lives, how to reach the cluster."""

    server_id: str
    data_dir: Path
    zk_hosts: str
    bootstrap_servers: str
    topic_prefix: str = "shoal"
    zk_root: str = "/shoal"
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

    def __post_init__(self) -> None:
        validate_server_id(self.server_id)
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        TopicNames(self.topic_prefix)
        if not 0 <= self.flight_port < 65536:
            raise ConfigError(f"flight_port must be in [0, 65535], got {self.flight_port}")
        if self.metrics_port is not None and not 0 <= self.metrics_port < 65536:
            raise ConfigError(f"metrics_port must be in [0, 65535], got {self.metrics_port}")
        self.leader_config()  # validates the stall settings

    def leader_config(self) -> LeaderConfig:
        return LeaderConfig(
            self.bootstrap_servers,
            TopicNames(self.topic_prefix),
            self.flush,
            max_minors_before_stall=self.max_minors_before_stall,
            minor_stall_s=self.minor_stall_s,
        )
