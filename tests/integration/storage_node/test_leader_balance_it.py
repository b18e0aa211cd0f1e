"""Balanced leaders with three real node processes (DESIGN.md section 7, Kafka's preferred replica).

Leaders spread over the nodes (each partition on its preferred leader); a killed node's partitions
move to the others; once it is back and caught up, after the nodes' rebalance delay, leadership
returns to it; ``shoal table rebalance --output json`` reports leaders before and after.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from node_it_support import NodeProcesses, make_table, produce_rows, rows

from metadata.client import MetadataClient, MetadataConfig
from metadata.rebalance import preferred_leaders
from shoal.topics import TopicNames
from shoal_app.cli.table import table_group
from shoal_app.cli.verify import verify_table
from shoal_app.schemas import validate
from shoal_app.testing.wait import wait_until

pytestmark = pytest.mark.integration

NODES = ("node-1", "node-2", "node-3")
DELAY = ("--leader-rebalance-delay", "3")


def _leaders(client: MetadataClient, pids: list[str]) -> dict[str, str | None]:
    out = {}
    for pid in pids:
        st = client.coordinator.partition_status(pid)
        out[pid] = st.leader_server_id if st.leader_alive else None
    return out


def _rebalance(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(table_group, ["rebalance", "events", "--output", "json", *args], env=env)
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.stdout)
    validate("cli-table-rebalance", doc)
    return result.exit_code, doc


def _agree(client: MetadataClient, expected: int) -> bool:
    try:
        report = verify_table(client, "events")
    except Exception:  # a node still taking over
        return False
    leaders = [r for p in report["partitions"] for r in p["replicas"] if r.get("role") == "leader"]
    return bool(report["ok"]) and sum(r["row_count"] for r in leaders) == expected


def test_leaders_spread_move_on_a_kill_and_return_after_catch_up(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    topics = TopicNames(topic_prefix)
    table = make_table(replication_factor=3)
    env = {"SHOAL_ZK_CONNECT": zk_hosts, "SHOAL_BOOTSTRAP_SERVERS": bs, "SHOAL_TOPIC_PREFIX": topic_prefix}
    with MetadataClient(meta) as client, NodeProcesses(tmp_path, zk_hosts, bs, topic_prefix) as nodes:
        points = [(k * 1000).to_bytes(8, "big") for k in (1, 2, 3)]
        file = client.coordinator.create_table(table, list(NODES), points)
        pids = [p.partition_id for p in file.partitions]
        want = preferred_leaders(file)
        assert Counter(want.values()) == {"node-1": 2, "node-2": 1, "node-3": 1}
        for n in NODES:
            nodes.start(n, *DELAY)
        assert wait_until(lambda: _leaders(client, pids) == want, 90), _leaders(client, pids)

        def write(first: int) -> None:
            for i, pid in enumerate(pids):
                keys = [i * 1000 + first + k for k in range(30)]
                produce_rows(bs, topics.ingest(pid), rows(table, keys, [f"v{k}" for k in keys]))

        write(0)
        # the kill: node-1's partitions move to the other nodes
        victim = "node-1"
        nodes.kill(victim)
        assert wait_until(lambda: all(lead not in (None, victim) for lead in _leaders(client, pids).values()), 60), (
            _leaders(client, pids)
        )
        write(100)  # written while the preferred leader is away: it must catch up before it leads again
        # a preferred-leader election cannot move a partition to a node that is down: exit 1, leaders listed
        code, doc = _rebalance(env, "--wait", "--timeout", "2")
        assert code == 1 and not doc["balanced"]
        away = {p["partition_id"] for p in doc["partitions"] if not p["on_preferred"]}
        assert away == {pid for pid, n in want.items() if n == victim}
        assert doc["after"]["leaders_per_node"][victim] == 0

        # back: after catch-up and the delay, leadership returns; nothing written is lost
        nodes.start(victim, *DELAY)
        assert wait_until(lambda: _leaders(client, pids) == want, 60), _leaders(client, pids)
        assert wait_until(lambda: _agree(client, 4 * 60), 60)
        code, doc = _rebalance(env, "--wait", "--timeout", "10")
        assert code == 0 and doc["balanced"]
        assert doc["after"]["leaders_per_node"] == {"node-1": 2, "node-2": 1, "node-3": 1}
        assert all(p["leader_before"] == p["leader_after"] == p["preferred_leader"] for p in doc["partitions"])
