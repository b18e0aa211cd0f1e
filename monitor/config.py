"""Settings of offset monitoring: a frozen dataclass validated when built (ConfigError names the field)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shoal.errors import ConfigError
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames


@dataclass(frozen=True)
class MonitorConfig:
    kafka: KafkaSettings
    """The Kafka of the cluster (a bare ``host:port`` list is accepted and becomes plaintext settings)."""
    topic_prefix: str = "shoal"
    interval_s: float = 10.0
    """Seconds between two polls; one poll adds one sample to every window."""
    window_samples: int = 30
    """Samples in the sliding window (Burrow's ``intervals``): interval 10 s x 30 = a 5-minute window."""
    warn_samples: int | None = None
    """Polls of non-decreasing lag before WARN (None: half the window, at least 2)."""
    open_transaction_warn_s: float = 240.0
    """How long a transaction may hold a channel's last stable offset at one offset below its log end
    before its readers are WARN (four leader transaction timeouts: a killed leader's open transaction
    is aborted by Kafka after one; a Spark sink task's stays open while the task writes, up to its
    ``transactionTimeout``, 300 s by default); a window shorter than this (``interval_s`` x
    ``window_samples``) does not judge it."""
    history_dir: Path | None = None
    """Where the window is persisted (``monitor-history.json``); None keeps it in memory only."""
    recent_segments: int = 5
    """How many of the newest manifests per segments channel to list with their acks."""
    request_timeout_s: float = 10.0
    fetch_timeout_s: float = 3.0
    """How long to wait for the one record read at a committed offset (lag in seconds)."""

    def __post_init__(self) -> None:
        if isinstance(self.kafka, str):
            try:
                object.__setattr__(self, "kafka", KafkaSettings(self.kafka))
            except ConfigError as exc:
                raise ConfigError(f"monitor {exc}") from exc
        TopicNames(self.topic_prefix)
        if not 0 < self.open_transaction_warn_s <= 86_400:
            raise ConfigError(
                f"monitor open_transaction_warn_s must be in (0, 86400], got {self.open_transaction_warn_s!r}"
            )
        if not 0 < self.interval_s <= 3600:
            raise ConfigError(f"monitor interval_s must be in (0, 3600], got {self.interval_s!r}")
        if (
            isinstance(self.window_samples, bool)
            or not isinstance(self.window_samples, int)
            or not (2 <= self.window_samples <= 10_000)
        ):
            raise ConfigError(f"monitor window_samples must be an int in [2, 10000], got {self.window_samples!r}")
        if self.warn_samples is not None and (
            isinstance(self.warn_samples, bool)
            or not isinstance(self.warn_samples, int)
            or not 1 <= self.warn_samples <= self.window_samples
        ):
            raise ConfigError(
                f"monitor warn_samples must be an int in [1, window_samples={self.window_samples}], "
                f"got {self.warn_samples!r}"
            )
        if not isinstance(self.recent_segments, int) or not 0 <= self.recent_segments <= 1000:
            raise ConfigError(f"monitor recent_segments must be an int in [0, 1000], got {self.recent_segments!r}")
        for name in ("request_timeout_s", "fetch_timeout_s"):
            value = getattr(self, name)
            if not 0 < value <= 600:
                raise ConfigError(f"monitor {name} must be in (0, 600], got {value!r}")
        if self.history_dir is not None:
            object.__setattr__(self, "history_dir", Path(self.history_dir))

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka.bootstrap_servers

    @property
    def topics(self) -> TopicNames:
        return TopicNames(self.topic_prefix)

    @property
    def warn_after(self) -> int:
        return max(2, self.window_samples // 2) if self.warn_samples is None else self.warn_samples

    @property
    def window_s(self) -> float:
        return self.interval_s * self.window_samples
