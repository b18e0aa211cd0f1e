"""Commands that talk to the cluster take addresses from options, then env, then the cluster file."""

from __future__ import annotations

from pathlib import Path

import click

from shoal import cluster_file
from shoal.cluster_file import ClusterInfo
from shoal_app.cli.connection import with_cluster_defaults
from shoal_app.cli.context import CliContext


def _ctx(tmp_path: Path, with_file: bool) -> click.Context:
    path = tmp_path / "cluster.json"
    if with_file:
        cluster_file.write(
            path,
            ClusterInfo(
                data_dir=str(tmp_path),
                bootstrap_servers="127.0.0.1:1111",
                zk_connect="127.0.0.1:2222",
                kafka_cluster_id="x",
                brokers=1,
            ),
        )
    return click.Context(click.Command("t"), obj=CliContext(tmp_path, tmp_path, path))


def test_cluster_file_fills_missing_addresses(tmp_path: Path) -> None:
    with _ctx(tmp_path, with_file=True):
        got = with_cluster_defaults({"zk_hosts": None, "bootstrap_servers": None, "topic_prefix": None})
        assert got == {"zk_hosts": "127.0.0.1:2222", "bootstrap_servers": "127.0.0.1:1111", "topic_prefix": "shoal"}
        got = with_cluster_defaults({"zk_hosts": "zk:1/chroot", "bootstrap_servers": None, "topic_prefix": "p"})
        assert got == {"zk_hosts": "zk:1/chroot", "bootstrap_servers": "127.0.0.1:1111", "topic_prefix": "p"}
        assert with_cluster_defaults({"zk_hosts": "zk:1", "bootstrap_servers": "k:2"}) == {
            "zk_hosts": "zk:1",
            "bootstrap_servers": "k:2",
        }


def test_no_cluster_file_leaves_addresses_unset(tmp_path: Path) -> None:
    with _ctx(tmp_path, with_file=False):
        assert with_cluster_defaults({"zk_hosts": None}) == {"zk_hosts": None}
