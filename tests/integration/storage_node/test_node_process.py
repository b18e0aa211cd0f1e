"""A storage node from metadata discovery to leading and serving scans; `shoal scan`; SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from node_it_support import make_table, produce_rows, rows

from metadata.client import MetadataClient, MetadataConfig
from metadata.election import read_epoch
from metadata.node_registry import lookup_node
from shoal.kafka.settings import ConnectionSettings
from shoal.scan import ScanRequest, scan_remote
from shoal.topics import TopicNames
from shoal_app.cli.node import scan_command
from shoal_app.testing.wait import wait_until
from storage_node.config import FlushPolicy, NodeConfig
from storage_node.node import StorageNode

pytestmark = pytest.mark.integration


def test_node_leads_its_partitions_and_serves_scans(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    table = make_table()
    with MetadataClient(meta) as client:
        file = client.coordinator.create_table(table, ["node-1"], [(1000).to_bytes(8, "big")])
        pids = [p.partition_id for p in file.partitions]
        flush = FlushPolicy(max_rows=3)
        connection = ConnectionSettings.plain(bs, zk_hosts, topic_prefix=topic_prefix)
        config = NodeConfig("node-1", tmp_path / "n1", connection, flush=flush, table_poll_s=0.2)
        node = StorageNode(config, metadata=meta)
        th = threading.Thread(target=node.run, daemon=True)
        th.start()
        try:
            assert node.ready.wait(30)
            assert wait_until(lambda: all(read_epoch(client.zk, client.layout, p).server_id == "node-1" for p in pids))
            assert wait_until(lambda: _leading(node) == 2, 60)
            topics = TopicNames(topic_prefix)
            produce_rows(bs, topics.ingest(pids[0]), rows(table, [1, 2, 3, 4], ["a", "b", "c", "d"]))
            produce_rows(bs, topics.ingest(pids[1]), rows(table, [1000, 2000], ["x", "y"]))
            produce_rows(bs, topics.ingest(pids[0]), rows(table, [2], [None], deleted=True))
            location = lookup_node(client.zk, client.layout, "node-1")

            def keys() -> list[int]:
                return sorted(scan_remote(location, ScanRequest("events")).column("k").to_pylist())

            assert wait_until(lambda: keys() == [1, 3, 4, 1000, 2000], 30), keys()
            got = scan_remote(location, ScanRequest("events", pids[1], low=1500)).to_pylist()
            assert got == [{"k": 2000, "v": "y"}]

            env = {"SHOAL_ZK_CONNECT": zk_hosts, "SHOAL_BOOTSTRAP_SERVERS": bs, "SHOAL_TOPIC_PREFIX": topic_prefix}
            res = CliRunner().invoke(scan_command, ["events", "--output", "json"], env=env)
            assert res.exit_code == 0, res.output
            assert [line for line in res.output.splitlines() if line.startswith("{")] == [
                '{"k": 1, "v": "a"}',
                '{"k": 3, "v": "c"}',
                '{"k": 4, "v": "d"}',
                '{"k": 1000, "v": "x"}',
                '{"k": 2000, "v": "y"}',
            ]
            res = CliRunner().invoke(scan_command, ["events", "--node", "node-1", "--key", "3"], env=env)
            assert res.exit_code == 0 and "c" in res.output, res.output
        finally:
            node.stop()
            th.join(30)
        assert not th.is_alive()


def test_node_process_stops_on_sigterm(cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path) -> None:
    code = "from shoal_app.cli.node import node_command; node_command()"
    env = {
        **os.environ,
        "SHOAL_ZK_CONNECT": zk_hosts,
        "SHOAL_BOOTSTRAP_SERVERS": cluster.bootstrap_servers,
        "SHOAL_TOPIC_PREFIX": topic_prefix,
        "PYTHONPATH": os.getcwd(),
    }
    proc = subprocess.Popen([sys.executable, "-c", code, "--id", "node-7", "--data-dir", str(tmp_path / "n7")], env=env)
    try:
        meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=cluster.bootstrap_servers, topic_prefix=topic_prefix)
        with MetadataClient(meta) as client:
            assert wait_until(lambda: _registered(client), 30)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
            assert wait_until(lambda: not _registered(client), 10)
    finally:
        if proc.poll() is None:
            proc.kill()


def _leading(node: StorageNode) -> int:
    return sum(1 for h in node.partitions().values() if h.leader is not None and h.leader.ready.is_set())


def _registered(client: MetadataClient) -> bool:
    try:
        lookup_node(client.zk, client.layout, "node-7")
        return True
    except Exception:
        return False
