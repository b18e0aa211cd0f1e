"""The partition lifecycle on real servers (table partitioning seed sections 3, 4.2, 4.3; segment
replication seed 3.7): a join while writing, a leave, and a drain of the node leading most partitions.

Storage nodes run in this process (:func:`node_it_support.in_process_nodes`) with a short UNLOAD_FINAL
grace period; the lifecycle commands run through the CLI (``-o json``, checked against their schemas).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition
from node_it_support import in_process_nodes, make_table, produce_rows, rows

from metadata.client import MetadataClient, MetadataConfig
from metadata.election import read_epoch
from shoal.kafka import clients
from shoal.kafka.indexes import close_offset_readers, committed_offsets
from shoal.kafka.settings import KafkaSettings
from shoal.scan import ScanRequest, scan_remote
from shoal.topics import TopicNames
from shoal_app.cli.node import node_command
from shoal_app.cli.table import table_group
from shoal_app.cli.verify import verify_table
from shoal_app.schemas import validate
from shoal_app.testing.wait import wait_until
from storage_node.node import StorageNode
from storage_node.replica.replica import replica_dir
from storage_node.roles.lifecycle import LifecycleConfig

pytestmark = pytest.mark.integration


class Writer:
    """Writes batches of 20 rows to every partition until stopped; ``acked`` = keys whose produce returned."""

    def __init__(self, bs: str, topics: TopicNames, table: Any, pids: list[str], keys_per_partition: int) -> None:
        self.bs, self.topics, self.table, self.pids = bs, topics, table, pids
        self.step = keys_per_partition
        self.acked: dict[str, int] = dict.fromkeys(pids, 0)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            for i, pid in enumerate(self.pids):
                keys = [i * self.step + n + k for k in range(20)]
                produce_rows(self.bs, self.topics.ingest(pid), rows(self.table, keys, [f"v{k}" for k in keys]))
                self.acked[pid] += 20
            n += 20
            self.stop.wait(0.3)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


def _cli(command: Any, args: list[str], env: dict[str, str], schema: str) -> Any:
    res = CliRunner().invoke(command, [*args, "--output", "json"], env=env)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    validate(schema, data)
    return data


def _row_counts(nodes: dict[str, StorageNode], pid: str) -> dict[str, tuple[str, int]]:
    out = {}
    for name, node in nodes.items():
        for info in node.describe("events"):
            if info["partition_id"] == pid:
                out[name] = (str(info["lifecycle_state"]), int(info["row_count"]))
    return out


def _all_have(nodes: dict[str, StorageNode], client: MetadataClient, acked: dict[str, int], step: int) -> bool:
    """Every LIVE replica of every partition holds exactly the acknowledged rows, with their values, and
    shoal verify agrees. Partition ``i``'s keys are ``i * step`` onwards (:class:`Writer`)."""
    file = client.coordinator.current("events")
    pids = list(acked)
    for e in file.partitions:
        counts = _row_counts(nodes, e.partition_id)
        live = {p.server_id for p in e.servers}
        if {n for n, (s, _) in counts.items() if s == "LIVE"} != live:
            return False
        first = pids.index(e.partition_id) * step
        expected = [(k, f"v{k}") for k in range(first, first + acked[e.partition_id])]
        for n in live:
            assert nodes[n].location is not None
            table = scan_remote(nodes[n].location, ScanRequest("events", e.partition_id))
            held = sorted(zip(table.column("k").to_pylist(), table.column("v").to_pylist(), strict=True))
            if held != expected:
                return False
    try:
        return bool(verify_table(client, "events")["ok"])
    except Exception:
        return False


def _setup(zk_hosts: str, bs: str, prefix: str) -> tuple[MetadataConfig, dict[str, str], Any, TopicNames]:
    """Metadata config, CLI environment, the test table (replication factor 2) and topic names."""
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=prefix)
    env = {"SHOAL_ZK_CONNECT": zk_hosts, "SHOAL_BOOTSTRAP_SERVERS": bs, "SHOAL_TOPIC_PREFIX": prefix}
    return meta, env, make_table(replication_factor=2), TopicNames(prefix)


def _acked(bootstrap_servers: str, group: str, topic: str) -> int | None:
    """The group's committed offset on ``topic`` (None when the group has none, or is gone)."""
    admin = clients.admin(KafkaSettings(bootstrap_servers))
    try:
        return committed_offsets(admin, {group: [(topic, 0)]}, stable=False)[group][(topic, 0)]
    finally:
        close_offset_readers(admin)


def _short_grace(nodes: dict[str, StorageNode]) -> None:
    for node in nodes.values():
        node.lifecycle = LifecycleConfig(grace_s=2.0, poll_s=0.5)


def test_join_while_writing_then_leave_of_the_leader(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    meta, env, table, topics = _setup(zk_hosts, bs, topic_prefix)
    with MetadataClient(meta) as client, in_process_nodes(meta, tmp_path, ("node-1", "node-2", "node-3")) as nodes:
        _short_grace(nodes)
        file = client.coordinator.create_table(table, ["node-1", "node-2"])
        pid = file.partitions[0].partition_id
        assert wait_until(lambda: read_epoch(client.zk, client.layout, pid).server_id is not None, 60)
        with Writer(bs, topics, table, [pid], 1_000_000) as writer:
            assert wait_until(lambda: writer.acked[pid] >= 100, 30)
            # join while writing: LOAD, catch up from Kafka, JOIN_FINALIZE by the leader -> LIVE
            joined = _cli(
                table_group,
                ["add-replica", "events", pid[:10], "--server", "node-3", "--wait", "--timeout", "90"],
                env,
                "cli-table-replica-change",
            )
            assert joined["state"] == "LIVE" and joined["partition_id"] == pid
            described = _cli(table_group, ["describe", "events"], env, "cli-table-describe")
            replicas = {r["server_id"]: r for r in described["partitions"][0]["replicas"]}
            assert replicas["node-3"]["state"] == "LIVE" and replicas["node-3"]["segments_ack"] is not None
            assert sum(r["leader"] for r in replicas.values()) == 1
            assert wait_until(lambda: writer.acked[pid] >= 300, 30)
        acked = dict(writer.acked)
        assert wait_until(lambda: _all_have(nodes, client, acked, 1_000_000), 60), _row_counts(nodes, pid)
        history = [f.change.value for f in client.coordinator.history("events")]
        assert history[-2:] == ["JOIN_SERVER", "FINALIZE_JOIN"], history

        # leave of the current leader: it resigns, the others adopt its channel, it unloads and is removed
        leader = read_epoch(client.zk, client.layout, pid)
        assert leader.server_id is not None and leader.placement_id is not None
        # a leader from the start has acked no one's channel: give its Ack group an offset (on the
        # ingest topic, which no Tail reads) so that UNLOAD_FINAL has a group to delete
        ack_group = topics.replica_group(pid, leader.placement_id)
        acker = Consumer({"bootstrap.servers": bs, "group.id": ack_group, "enable.auto.commit": False})
        acker.commit(offsets=[TopicPartition(topics.ingest(pid), 0, 1)], asynchronous=False)
        acker.close()
        assert _acked(bs, ack_group, topics.ingest(pid)) == 1
        left = _cli(
            table_group,
            ["remove-replica", "events", pid, "--server", leader.server_id, "--wait", "--timeout", "90"],
            env,
            "cli-table-replica-change",
        )
        assert left["state"] == "REMOVED"
        gone = replica_dir(tmp_path / leader.server_id, pid, leader.placement_id)
        assert wait_until(lambda: not gone.exists(), 30), f"{gone} still there"
        wal = topics.wal(pid, leader.placement_id)
        admin = clients.admin(KafkaSettings(bs))
        assert wait_until(lambda: wal not in admin.list_topics(timeout=10).topics, 30)
        # its groups were deleted before its channels (from a child process: shoal.kafka.groups)
        assert _acked(bs, ack_group, topics.ingest(pid)) is None
        # the node lets go of the partition right after removing its directory
        assert wait_until(lambda: pid not in nodes[leader.server_id].partitions(), 30)
        new_leader = read_epoch(client.zk, client.layout, pid)
        assert new_leader.server_id not in (None, leader.server_id)
        assert wait_until(lambda: _all_have(nodes, client, acked, 1_000_000), 60), _row_counts(nodes, pid)


def test_drain_of_the_node_leading_most_partitions(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    meta, env, table, topics = _setup(zk_hosts, bs, topic_prefix)
    names = ("node-1", "node-2", "node-3", "node-4")
    with MetadataClient(meta) as client, in_process_nodes(meta, tmp_path, names) as nodes:
        _short_grace(nodes)
        points = [(k * 1_000_000).to_bytes(8, "big") for k in (1, 2)]
        file = client.coordinator.create_table(table, ["node-1", "node-2", "node-3"], points)
        pids = [p.partition_id for p in file.partitions]

        def leaders() -> dict[str, str | None]:
            return {p: read_epoch(client.zk, client.layout, p).server_id for p in pids}

        assert wait_until(lambda: all(leaders().values()), 60)
        with Writer(bs, topics, table, pids, 1_000_000) as writer:
            assert wait_until(lambda: min(writer.acked.values()) >= 100, 30)
            counts: dict[str, int] = {}
            for s in leaders().values():
                assert s is not None
                counts[s] = counts.get(s, 0) + 1
            busiest = max(counts, key=lambda s: counts[s])
            drained = _cli(node_command, ["drain", "--id", busiest, "--wait", "--timeout", "90"], env, "cli-node-drain")
        acked = dict(writer.acked)
        assert drained["complete"] and drained["moves"]
        assert [m["was_leader"] for m in drained["moves"]] == sorted(m["was_leader"] for m in drained["moves"])
        file = client.coordinator.current("events")
        assert all(p.server_id != busiest for e in file.partitions for p in e.all_placements())
        assert all(len(e.servers) == 2 for e in file.partitions)
        assert busiest not in leaders().values()
        assert wait_until(lambda: _all_have(nodes, client, acked, 1_000_000), 60)
        assert wait_until(lambda: not nodes[busiest].partitions(), 30)
