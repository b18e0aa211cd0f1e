"""A storage node's Prometheus exporter: ``shoal node --metrics-port`` on real nodes.

Two node processes replicate one partition; each serves ``/metrics``. The scrape holds the names
documented in :mod:`storage_node.metrics`, per partition, with values that follow what happened:
the leader's rows and WAL records, the follower's fast-forwards.
"""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from node_it_support import NodeProcesses, make_table, produce_rows, rows

from metadata.client import MetadataClient, MetadataConfig
from shoal.topics import TopicNames
from shoal_app.runtime.ports import free_ports
from shoal_app.testing.wait import wait_until
from storage_node.metrics import COUNTER_HELP, GAUGE_HELP

pytestmark = pytest.mark.integration

NODES = ("node-1", "node-2")


def _scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            return str(resp.read().decode())
    except OSError:
        return ""


def _value(text: str, name: str, server: str, partition: str) -> float | None:
    pattern = rf'^{name}{{partition="{partition}",server="{server}"}} (\S+)$'
    m = re.search(pattern, text, re.MULTILINE)
    return None if m is None else float(m.group(1))


def test_a_node_exports_its_documented_metrics(cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path) -> None:
    bs = cluster.bootstrap_servers
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    ports = dict(zip(NODES, free_ports(len(NODES)), strict=True))
    table = make_table(replication_factor=2)
    with MetadataClient(meta) as client, NodeProcesses(tmp_path, zk_hosts, bs, topic_prefix) as nodes:
        pid = client.coordinator.create_table(table, list(NODES), []).partitions[0].partition_id
        for n in NODES:
            nodes.start(n, "--metrics-port", str(ports[n]))
        keys = list(range(50))
        produce_rows(bs, TopicNames(topic_prefix).ingest(pid), rows(table, keys, [f"v{k}" for k in keys]))

        def roles() -> dict[str, float | None]:
            return {n: _value(_scrape(ports[n]), "shoal_node_is_leader", n, pid) for n in NODES}

        assert wait_until(lambda: sorted(v or 0.0 for v in roles().values()) == [0.0, 1.0], 90), roles()
        leader = next(n for n, v in roles().items() if v == 1.0)
        follower = next(n for n in NODES if n != leader)
        assert wait_until(lambda: _value(_scrape(ports[leader]), "shoal_node_rows_total", leader, pid) == 50, 60)
        assert wait_until(
            lambda: (_value(_scrape(ports[follower]), "shoal_node_fast_forwards_total", follower, pid) or 0) >= 1, 60
        ), _scrape(ports[follower])

        text = _scrape(ports[leader])
        for name in COUNTER_HELP:
            assert _value(text, f"shoal_node_{name}_total", leader, pid) is not None, (name, text)
        for name in GAUGE_HELP:
            assert _value(text, f"shoal_node_{name}", leader, pid) is not None, (name, text)
        assert (_value(text, "shoal_node_wal_records_total", leader, pid) or 0) >= 1
        assert (_value(text, "shoal_node_segments_written_total", leader, pid) or 0) >= 1
        assert _value(text, "shoal_node_leader_changes_total", leader, pid) == 1
        assert (_value(text, "shoal_node_epoch", leader, pid) or 0) >= 1
        assert _value(text, "shoal_node_deadlettered_total", leader, pid) == 0
        assert "# TYPE shoal_node_is_leader gauge" in text and "# TYPE shoal_node_rows_total counter" in text
        assert _value(_scrape(ports[follower]), "shoal_node_rows_total", follower, pid) == 0
