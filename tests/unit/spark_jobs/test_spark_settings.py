"""format("shoal") options: table required, connection precedence options > env > cluster file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_jobs.errors import SinkOptionError
from spark_jobs.settings import ReaderSettings, SinkSettings, resolve_connection


def _cluster_file(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "data_dir": str(tmp_path),
                "bootstrap_servers": "file-kafka:9092",
                "zk_connect": "file-zk:2181",
                "kafka_cluster_id": "x",
                "brokers": 1,
                "topic_prefix": "fromfile",
            }
        )
    )
    return path


def test_options_win_over_env_and_env_over_the_cluster_file(tmp_path: Path) -> None:
    env = {"SHOAL_CLUSTER_FILE": str(_cluster_file(tmp_path)), "SHOAL_ZK_CONNECT": "env-zk:2181"}
    c = resolve_connection({"bootstrapservers": "opt-kafka:9092"}, env)
    assert (c.zk_hosts, c.bootstrap_servers, c.topic_prefix) == ("env-zk:2181", "opt-kafka:9092", "shoal")
    c = resolve_connection({"zk": "opt-zk:1/chroot", "topicPrefix": "p1"}, env)
    assert (c.zk_hosts, c.bootstrap_servers, c.topic_prefix) == ("opt-zk:1/chroot", "file-kafka:9092", "p1")


def test_defaults_without_options_env_or_cluster_file(tmp_path: Path) -> None:
    c = resolve_connection({}, {"SHOAL_DATA_DIR": str(tmp_path / "none")})
    assert (c.zk_hosts, c.bootstrap_servers, c.topic_prefix, c.zk_root) == (
        "127.0.0.1:2181",
        "127.0.0.1:9092",
        "shoal",
        "/shoal",
    )


def test_sink_settings_need_a_valid_table_and_options(tmp_path: Path) -> None:
    env = {"SHOAL_DATA_DIR": str(tmp_path)}
    with pytest.raises(SinkOptionError, match=r"needs .option\('table', NAME\)"):
        SinkSettings.from_options({}, env)
    with pytest.raises(SinkOptionError, match="table"):
        SinkSettings.from_options({"table": "bad name!"}, env)
    with pytest.raises(SinkOptionError, match="'sync' must be true or false"):
        SinkSettings.from_options({"table": "t", "sync": "maybe"}, env)
    with pytest.raises(SinkOptionError, match="'syncTimeout' must be > 0"):
        SinkSettings.from_options({"table": "t", "synctimeout": "0"}, env)
    with pytest.raises(SinkOptionError, match="topic prefix"):
        SinkSettings.from_options({"table": "t", "topicprefix": "a..b"}, env)
    s = SinkSettings.from_options({"table": "t", "SYNC": "false", "syncTimeout": "5"}, env)
    assert (s.table, s.sync, s.sync_timeout_s) == ("t", False, 5.0)


def test_reader_settings_validate_the_node(tmp_path: Path) -> None:
    env = {"SHOAL_DATA_DIR": str(tmp_path)}
    assert ReaderSettings.from_options({"table": "t", "node": "node-2"}, env).node == "node-2"
    with pytest.raises(SinkOptionError):
        ReaderSettings.from_options({"table": "t", "node": "../etc"}, env)
