"""Commands that talk to the cluster take addresses from options, then env, then the cluster file."""

from __future__ import annotations

from pathlib import Path

import click

from shoal import cluster_file
from shoal.cluster_file import ClusterInfo
from shoal_app.cli.connection import connection_settings, metadata_config
from shoal_app.cli.context import CliContext


def _ctx(tmp_path: Path, with_file: bool) -> click.Context:
    path = tmp_path / "cluster.json"
    if with_file:
        info = ClusterInfo(
            data_dir=str(tmp_path),
            bootstrap_servers="127.0.0.1:1111",
            zk_connect="127.0.0.1:2222",
            kafka_cluster_id="x",
            brokers=1,
        )
        cluster_file.write(path, info)
    return click.Context(click.Command("t"), obj=CliContext(tmp_path, tmp_path, path))


def test_cluster_file_fills_missing_addresses(tmp_path: Path) -> None:
    with _ctx(tmp_path, with_file=True):
        got = connection_settings({"zk_hosts": None, "bootstrap_servers": None, "topic_prefix": None}, {})
        assert (got.zk_hosts, got.bootstrap_servers, got.topic_prefix) == ("127.0.0.1:2222", "127.0.0.1:1111", "shoal")
        got = connection_settings({"zk_hosts": "zk:1/chroot", "bootstrap_servers": None, "topic_prefix": "p"}, {})
        assert (got.zk_hosts, got.bootstrap_servers, got.topic_prefix) == ("zk:1/chroot", "127.0.0.1:1111", "p")
        got = connection_settings({"zk_hosts": "zk:1", "bootstrap_servers": "k:2"}, {})
        assert (got.zk_hosts, got.bootstrap_servers) == ("zk:1", "k:2")
        env = {"SHOAL_BOOTSTRAP_SERVERS": "env:3"}
        assert connection_settings({"zk_hosts": None}, env).bootstrap_servers == "env:3"


def test_no_cluster_file_falls_back_to_local_defaults(tmp_path: Path) -> None:
    with _ctx(tmp_path, with_file=False):
        got = connection_settings({"zk_hosts": None}, {})
        assert (got.zk_hosts, got.bootstrap_servers) == ("127.0.0.1:2181", "127.0.0.1:9092")
        assert metadata_config({"zk_hosts": "zk:9"}).zk_hosts == "zk:9"
