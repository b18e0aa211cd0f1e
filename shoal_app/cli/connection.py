"""How CLI commands find the cluster: options, then environment, then the cluster file of `shoal up`."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from metadata.client import MetadataConfig
from shoal.errors import ConfigError
from shoal.kafka import clients
from shoal.kafka.settings import ConnectionSettings
from shoal_app.cli.context import CliContext

T = TypeVar("T")


def connection_options(fn: Callable[..., T]) -> Callable[..., T]:
    """--zk, --bootstrap-servers, --topic-prefix, --zk-root (each with its SHOAL_* env fallback)."""
    opts = [
        click.option("--zk", "zk_hosts", envvar="SHOAL_ZK_CONNECT", help="ZooKeeper connect string (with chroot)."),
        click.option("--bootstrap-servers", envvar="SHOAL_BOOTSTRAP_SERVERS", help="Kafka bootstrap servers."),
        click.option("--topic-prefix", envvar="SHOAL_TOPIC_PREFIX", help="Topic name prefix (default shoal)."),
        click.option("--zk-root", envvar="SHOAL_ZK_ROOT", help="Root znode under the chroot (default /shoal)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def connection_settings(
    conn: Mapping[str, Any], environ: Mapping[str, str] | None = None, *, check_access: bool = True
) -> ConnectionSettings:
    """The cluster named by the connection options ``conn`` (None = not given), then the SHOAL_*
    environment (default: the process's), then the cluster file of ``shoal up``
    (:meth:`ConnectionSettings.resolve`).

    On a secured Kafka, ``check_access`` first connects once (:func:`shoal.kafka.clients.check_access`):
    a wrong password, an unknown user or an untrusted certificate is then a
    :class:`~shoal.kafka.clients.KafkaAccessError` naming the door within seconds, instead of
    librdkafka retrying in silence until some request times out."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_object(CliContext) if ctx is not None else None
    path = obj.cluster_file_path if obj is not None else None
    if obj is not None and obj.cluster_file_named and not obj.cluster_file_path.exists():
        raise ConfigError(f"the cluster file {path} (from --cluster-file or SHOAL_CLUSTER_FILE) does not exist")
    settings = ConnectionSettings.resolve(conn, os.environ if environ is None else environ, path)
    if check_access and settings.kafka.secured:
        clients.check_access(settings.kafka)
    return settings


def metadata_config(conn: Mapping[str, Any], *, check_access: bool = True) -> MetadataConfig:
    """:func:`connection_settings` as the metadata client's configuration."""
    return MetadataConfig(connection=connection_settings(conn, check_access=check_access))
