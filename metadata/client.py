"""One object that holds the connections the metadata package needs (for the CLI, nodes, tools).

``MetadataConfig`` is a frozen, validated description; ``MetadataClient`` creates the ZooKeeper
client, the metadata store and the coordinator lazily and releases them in ``close()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.retry import KazooRetry

from metadata.coordinator import MetadataCoordinator
from metadata.notify import OnChange, TableWatcher
from metadata.security import ZkSecurity
from metadata.store import KafkaFileStore, KafkaStoreConfig
from metadata.zk_client import make_client
from metadata.zk_layout import ZkLayout
from shoal.errors import ConfigError
from shoal.kafka.settings import CONNECTION_KEYS, ConnectionFields, ConnectionSettings, KafkaSettings, Secret
from shoal.topics import TopicNames


@dataclass(frozen=True, init=False)
class MetadataConfig(ConnectionFields):
    """Where the metadata lives (``connection``) and how to talk to it.

    Build it with ``MetadataConfig(connection=ConnectionSettings.resolve(...))``. The flat keyword
    form (``zk_hosts=``, ``bootstrap_servers=``, ``topic_prefix=``, ``zk_root=``, ``security=``,
    ``kafka_config=``) builds the same ``connection`` for callers that still pass addresses.
    """

    connection: ConnectionSettings
    zk_timeout_s: float = 10.0
    zk_world_readable: bool = False

    def __init__(
        self,
        zk_hosts: str | None = None,
        bootstrap_servers: str | None = None,
        topic_prefix: str = "shoal",
        zk_root: str = "/shoal",
        zk_timeout_s: float = 10.0,
        security: ZkSecurity | None = None,
        kafka_config: Mapping[str, Any] | None = None,
        *,
        connection: ConnectionSettings | None = None,
        zk_world_readable: bool = False,
    ) -> None:
        if connection is None:
            if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
                raise ConfigError("bootstrap_servers must be a non-empty host:port list")
            sec = security or ZkSecurity()
            connection = ConnectionSettings(
                KafkaSettings(bootstrap_servers, passthrough=dict(kafka_config or {})),
                zk_hosts if isinstance(zk_hosts, str) else "",
                zk_root=zk_root,
                topic_prefix=topic_prefix,
                zk_user=sec.username,
                zk_password=None if sec.password is None else Secret(sec.password),
            )
            zk_world_readable = zk_world_readable or sec.world_readable
        elif zk_hosts is not None or bootstrap_servers is not None or security is not None or kafka_config:
            raise ConfigError("MetadataConfig takes either connection= or the flat connection fields, not both")
        object.__setattr__(self, "connection", connection)
        object.__setattr__(self, "zk_timeout_s", zk_timeout_s)
        object.__setattr__(self, "zk_world_readable", zk_world_readable)
        TopicNames(connection.topic_prefix)
        ZkLayout(connection.zk_root)
        self.security  # noqa: B018 - validates the ZooKeeper credentials
        if self.zk_timeout_s <= 0:
            raise ConfigError(f"zk_timeout_s must be > 0, got {self.zk_timeout_s}")

    @property
    def security(self) -> ZkSecurity:
        """ZooKeeper digest credentials of ``connection`` (and whether znodes are world-readable)."""
        password = self.connection.zk_password
        return ZkSecurity(
            self.connection.zk_user, None if password is None else password.reveal(), self.zk_world_readable
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> MetadataConfig:
        """From the SHOAL_* environment (:meth:`ConnectionSettings.resolve`); connection ``overrides``
        that are not None win, the others (``zk_timeout_s``, ...) are passed on."""
        connection, rest = resolve_connection(env, overrides)
        return cls(connection=connection, **rest)


def resolve_connection(
    env: Mapping[str, str] | None, overrides: Mapping[str, Any], cluster_file_path: Path | None = None
) -> tuple[ConnectionSettings, dict[str, Any]]:
    """(ConnectionSettings resolved from the connection ``overrides``, ``env`` (default: the process
    environment) and the cluster file; the other overrides). A ``security`` override (ZkSecurity)
    gives the ZooKeeper credentials."""
    options = {k: v for k, v in overrides.items() if k in CONNECTION_KEYS}
    rest = {k: v for k, v in overrides.items() if k not in CONNECTION_KEYS and k not in ("security", "kafka_config")}
    security = overrides.get("security")
    if isinstance(security, ZkSecurity) and security.enabled:
        options.setdefault("zk_user", security.username)
        options.setdefault("zk_password", security.password)
    if overrides.get("kafka_config"):
        options["kafka_passthrough"] = overrides["kafka_config"]
    environ = os.environ if env is None else env
    return ConnectionSettings.resolve(options, environ, cluster_file_path), rest


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
            self._store = KafkaFileStore(KafkaStoreConfig(self.config.kafka, topic_prefix=self.config.topic_prefix))
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
