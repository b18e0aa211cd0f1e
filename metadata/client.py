"""One object that holds the connections the metadata package needs (for the CLI, nodes, tools).

``MetadataConfig`` is a frozen, validated description; ``MetadataClient`` creates the ZooKeeper
client, the metadata store and the coordinator lazily and releases them in ``close()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.retry import KazooRetry

from metadata.coordinator import MetadataCoordinator
from metadata.notify import OnChange, TableWatcher
from metadata.security import ZkSecurity
from metadata.store import KafkaFileStore, KafkaStoreConfig
from metadata.zk_client import make_client
from metadata.zk_layout import ZkLayout
from shoal.errors import ConfigError
from shoal.topics import TopicNames


@dataclass(frozen=True)
class MetadataConfig:
    zk_hosts: str
    bootstrap_servers: str
    topic_prefix: str = "shoal"
    zk_root: str = "/shoal"
    zk_timeout_s: float = 10.0
    security: ZkSecurity = field(default_factory=ZkSecurity)
    metadata_topic_replication_factor: int = 1
    kafka_config: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.zk_hosts, str) or not self.zk_hosts.strip():
            raise ConfigError("zk_hosts must be 'host:port[,host:port][/chroot]'")
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            raise ConfigError("bootstrap_servers must be a non-empty host:port list")
        TopicNames(self.topic_prefix)
        ZkLayout(self.zk_root)
        if self.zk_timeout_s <= 0:
            raise ConfigError(f"zk_timeout_s must be > 0, got {self.zk_timeout_s}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> MetadataConfig:
        """From SHOAL_ZK_CONNECT, SHOAL_BOOTSTRAP_SERVERS, SHOAL_TOPIC_PREFIX, SHOAL_ZK_ROOT,
        SHOAL_ZK_USER / SHOAL_ZK_PASSWORD; ``overrides`` that are not None win."""
        return cls(**connection_from_env(env, overrides))


def connection_from_env(env: Mapping[str, str] | None, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The connection settings every shoal client reads from the environment; overrides that are not None win."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {
        "zk_hosts": env.get("SHOAL_ZK_CONNECT", "127.0.0.1:2181"),
        "bootstrap_servers": env.get("SHOAL_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        "topic_prefix": env.get("SHOAL_TOPIC_PREFIX", "shoal"),
        "zk_root": env.get("SHOAL_ZK_ROOT", "/shoal"),
        "security": ZkSecurity(env.get("SHOAL_ZK_USER"), env.get("SHOAL_ZK_PASSWORD")),
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    return values


class MetadataClient:
    def __init__(self, config: MetadataConfig, *, zk: Any = None, retry: KazooRetry | None = None) -> None:
        self.config = config
        self.layout = ZkLayout(config.zk_root)
        self._zk = zk
        self._own_zk = zk is None
        self._store: KafkaFileStore | None = None
        self._coordinator: MetadataCoordinator | None = None
        self._retry = retry

    @property
    def zk(self) -> Any:
        if self._zk is None:
            self._zk = make_client(self.config.zk_hosts, self.config.security, timeout=self.config.zk_timeout_s)
        return self._zk

    @property
    def store(self) -> KafkaFileStore:
        if self._store is None:
            self._store = KafkaFileStore(
                KafkaStoreConfig(
                    bootstrap_servers=self.config.bootstrap_servers,
                    topic_prefix=self.config.topic_prefix,
                    replication_factor=self.config.metadata_topic_replication_factor,
                    client_config=self.config.kafka_config,
                )
            )
        return self._store

    @property
    def coordinator(self) -> MetadataCoordinator:
        if self._coordinator is None:
            self._coordinator = MetadataCoordinator(
                self.zk, self.store, layout=self.layout, security=self.config.security, retry=self._retry
            )
        return self._coordinator

    def watch(self, table: str, on_change: OnChange, *, since_sequence: int | None = None) -> TableWatcher:
        return TableWatcher(
            self.zk, self.store, table, on_change, layout=self.layout, since_sequence=since_sequence
        ).start()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
        if self._zk is not None and self._own_zk:
            self._zk.stop()
            self._zk.close()
        self._zk = None
        self._coordinator = None

    def __enter__(self) -> MetadataClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
