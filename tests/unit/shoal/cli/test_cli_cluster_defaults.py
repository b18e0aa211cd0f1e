"""Commands that talk to the cluster take addresses from options, then env, then the cluster file."""

from __future__ import annotations

from pathlib import Path

import click

from shoal.cli.context import CliContext
from shoal.cli.table import _cluster_file_defaults
from shoal.runtime import cluster_file
from shoal.runtime.cluster_file import ClusterInfo


def _ctx(tmp_path: Path, with_file: bool) -> click.Context:
    path = tmp_path / "cluster.json"
    if with_file:
        cluster_file.write(path, ClusterInfo(data_dir=str(tmp_path), bootstrap_servers="127.0.0.1:1111",
                                             zk_connect="127.0.0.1:2222", kafka_cluster_id="x", brokers=1))  # fmt: skip
    return click.Context(click.Command("t"), obj=CliContext(tmp_path, tmp_path, path))


def test_cluster_file_fills_missing_addresses(tmp_path: Path) -> None:
    with _ctx(tmp_path, with_file=True):
        assert _cluster_file_defaults(None, None) == ("127.0.0.1:2222", "127.0.0.1:1111")
        assert _cluster_file_defaults("zk:1/chroot", None) == ("zk:1/chroot", "127.0.0.1:1111")
        assert _cluster_file_defaults("zk:1", "k:2") == ("zk:1", "k:2")


def test_no_cluster_file_leaves_addresses_unset(tmp_path: Path) -> None:
    with _ctx(tmp_path, with_file=False):
        assert _cluster_file_defaults(None, None) == (None, None)
