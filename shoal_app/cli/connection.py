"""How CLI commands find the cluster: options, then environment, then the cluster file of `shoal up`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from metadata.client import MetadataConfig
from shoal.errors import ClusterFileError
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


def with_cluster_defaults(conn: dict[str, Any]) -> dict[str, Any]:
    """``conn`` with addresses and topic prefix that options and env left open taken from the cluster file."""
    if conn.get("zk_hosts") and conn.get("bootstrap_servers"):
        return conn
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_object(CliContext) if ctx is not None else None
    if obj is None:
        return conn
    try:
        info = obj.cluster()
    except ClusterFileError:
        return conn
    return {
        **conn,
        "zk_hosts": conn.get("zk_hosts") or info.zk_connect,
        "bootstrap_servers": conn.get("bootstrap_servers") or info.bootstrap_servers,
        "topic_prefix": conn.get("topic_prefix") or info.topic_prefix,
    }


def metadata_config(conn: dict[str, Any]) -> MetadataConfig:
    return MetadataConfig.from_env(**with_cluster_defaults(conn))
