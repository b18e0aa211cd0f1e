"""The options of ``format("shoal")``: which table, where the cluster is, how a write waits.

Connection settings are options (``zk``, ``bootstrapServers``, ``topicPrefix``, ``zkRoot``,
``zkUser``, ``zkPassword``); what they leave open comes from the SHOAL_* environment, then from
the cluster file of ``shoal up`` (SHOAL_CLUSTER_FILE, else ``$SHOAL_DATA_DIR/cluster.json``).
:func:`resolve_connection` runs on the driver only (inside ``DataSource.writer``/``reader``, the
Spark entry point): executors receive the resolved, frozen :class:`MetadataConfig`.
Spark hands options over with lower-cased keys; lookups here are case-insensitive.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metadata.client import MetadataConfig
from shoal.errors import ConfigError, ShoalError
from shoal.ids import validate_server_id, validate_table_name
from shoal.kafka.settings import CONNECTION_KEYS, SECRET_KEYS, ConnectionSettings
from spark_jobs.errors import SinkOptionError

CONNECTION_OPTIONS = {
    "zk": "zk_hosts",
    **{key.replace("_", ""): key for key in sorted(CONNECTION_KEYS - SECRET_KEYS) if key != "zk_hosts"},
    "zkpassword": "zk_password",
}
"""Spark option (lower-cased) -> :meth:`ConnectionSettings.resolve` option key: every connection
setting, the security ones too (``securityProtocol``, ``saslUsername``, ``sslCaLocation``,
``scanTlsCaLocation``, ``secretsFile``, ...); passwords other than ``zkPassword`` only through
``secretsFile`` (an option is visible in Spark's plans and UI)."""


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _cluster_file(env: Mapping[str, str]) -> Path:
    if env.get("SHOAL_CLUSTER_FILE"):
        return Path(env["SHOAL_CLUSTER_FILE"]).expanduser()
    data = Path(env.get("SHOAL_DATA_DIR") or Path.home() / ".shoal" / "local").expanduser()
    return data / "cluster.json"


def resolve_connection(options: Mapping[str, Any], env: Mapping[str, str] | None = None) -> MetadataConfig:
    """Options > environment > cluster file > built-in defaults (:meth:`ConnectionSettings.resolve`),
    as a validated MetadataConfig."""
    env = os.environ if env is None else env
    opts = _lower(options)
    try:
        connection = ConnectionSettings.resolve(
            {key: opts.get(option) for option, key in CONNECTION_OPTIONS.items()}, env, _cluster_file(env)
        )
        return MetadataConfig(connection=connection)
    except ConfigError as exc:
        raise SinkOptionError(f"format('shoal'): bad connection setting: {exc}") from exc


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise SinkOptionError(f"option {name!r} must be true or false, got {raw!r:.40}")


def _int(opts: Mapping[str, str], name: str, default: int) -> int:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError as exc:
        raise SinkOptionError(f"option {name!r} must be a whole number, got {raw!r:.40}") from exc
    if value < 1:
        raise SinkOptionError(f"option {name!r} must be >= 1, got {value}")
    return value


def _float(opts: Mapping[str, str], name: str, default: float) -> float:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise SinkOptionError(f"option {name!r} must be a number, got {raw!r:.40}") from exc
    if value <= 0:
        raise SinkOptionError(f"option {name!r} must be > 0, got {value}")
    return value


DEFAULT_WRITE_ROWS = 100_000
"""Rows per ``Producer.write`` of a sink task (the producer's own ``max_rows_per_message``)."""


@dataclass(frozen=True)
class SinkSettings:
    """What the sink needs on every executor: the table, the cluster, and how long to wait.

    ``sync``: the driver's commit waits until the partition leaders accepted every task's rows
    and refused none (``Producer.await_accepted``), before it records the batch, so a committed
    batch is readable; ``sync_timeout_s`` bounds that wait. Off, a commit records what Kafka has.
    ``write_rows``: a task gathers Spark's Arrow batches (``spark.sql.execution.arrow.maxRecordsPerBatch``,
    10,000 rows by default) into writes of about this many rows, so each partition's ingest
    messages, and its leader's WAL records, are fewer and larger; a task holds at most that many
    rows plus one Spark batch.
    ``transaction_timeout_s``: how long a streaming write task's transaction may stay open (Kafka
    aborts it then, and the task fails). Records behind an open transaction wait for it on their
    ingest topic, so a transaction left open by a task whose partition is never run again holds
    other writers' rows back that long; at most Kafka's ``transaction.max.timeout.ms`` (15 min).
    ``commit_timeout_s``: how long a streaming commit tries again after a fence or a wait that
    failed for a reason that may pass (:attr:`spark_jobs.errors.SinkCommitError.retriable`) before
    it fails the query: Spark retries a failed task, never a failed commit. Above
    ``transaction_timeout_s`` by default, so a commit outlasts a transaction left open by a task
    of an earlier run.
    """

    table: str
    connection: MetadataConfig
    sync: bool = True
    sync_timeout_s: float = 120.0
    write_rows: int = DEFAULT_WRITE_ROWS
    transaction_timeout_s: float = 300.0
    commit_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        validate_table_name(self.table)
        if not self.sync_timeout_s > 0:
            raise ConfigError(f"sync_timeout_s must be > 0, got {self.sync_timeout_s}")
        if self.write_rows < 1:
            raise ConfigError(f"write_rows must be >= 1, got {self.write_rows}")
        if not 1 <= self.transaction_timeout_s <= 900:
            raise ConfigError(f"transaction_timeout_s must be in [1, 900] seconds, got {self.transaction_timeout_s}")
        if not self.commit_timeout_s >= self.sync_timeout_s:
            raise ConfigError(
                f"commit_timeout_s ({self.commit_timeout_s}) must be at least sync_timeout_s ({self.sync_timeout_s})"
            )

    @classmethod
    def from_options(cls, options: Mapping[str, Any], env: Mapping[str, str] | None = None) -> SinkSettings:
        opts = _lower(options)
        table = opts.get("table")
        if not table:
            raise SinkOptionError("format('shoal') needs .option('table', NAME)")
        try:
            sync_timeout_s = _float(opts, "syncTimeout", 120.0)
            return cls(
                table=table,
                connection=resolve_connection(opts, env),
                sync=_bool(opts, "sync", True),
                sync_timeout_s=sync_timeout_s,
                write_rows=_int(opts, "writeRows", DEFAULT_WRITE_ROWS),
                transaction_timeout_s=_float(opts, "transactionTimeout", 300.0),
                commit_timeout_s=_float(opts, "commitTimeout", max(600.0, sync_timeout_s)),
            )
        except ShoalError as exc:
            if isinstance(exc, SinkOptionError):
                raise
            raise SinkOptionError(f"format('shoal'): {exc}") from exc


@dataclass(frozen=True)
class ReaderSettings:
    """``table``; ``node``: read every partition from this node's replica instead of the leader's."""

    table: str
    connection: MetadataConfig
    node: str | None = None
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        validate_table_name(self.table)
        if self.node is not None:
            validate_server_id(self.node)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], env: Mapping[str, str] | None = None) -> ReaderSettings:
        opts = _lower(options)
        table = opts.get("table")
        if not table:
            raise SinkOptionError("spark.read.format('shoal') needs .option('table', NAME)")
        try:
            return cls(
                table=table,
                connection=resolve_connection(opts, env),
                node=opts.get("node") or None,
                timeout_s=_float(opts, "timeout", 120.0),
            )
        except ShoalError as exc:
            if isinstance(exc, SinkOptionError):
                raise
            raise SinkOptionError(f"format('shoal'): {exc}") from exc
