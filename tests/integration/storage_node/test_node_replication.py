"""Segment replication between three node processes (DESIGN.md section 6).

Steady state, verify, repair of a corrupt file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from node_it_support import NodeProcesses, make_table, produce_rows, rows

from metadata.client import MetadataClient, MetadataConfig
from metadata.election import read_epoch
from shoal.kafka.indexes import channel_indexes
from shoal.kafka.settings import KafkaSettings
from shoal.segments.parquet_io import segment_path
from shoal.topics import TopicNames
from shoal_app.cli.verify import verify_command, verify_table
from shoal_app.schemas import validate
from shoal_app.testing.wait import wait_until

pytestmark = pytest.mark.integration

NODES = ("node-1", "node-2", "node-3")


def _report(client: MetadataClient) -> dict[str, Any]:
    try:
        return verify_table(client, "events")
    except Exception as exc:  # a node still starting
        return {"ok": False, "error": str(exc), "partitions": []}


def _summary(client: MetadataClient) -> list[Any]:
    rep = _report(client)
    return [rep.get("error")] + [
        (
            p["agree"],
            p["chains_equal"],
            [
                (r.get("role"), r.get("row_count"), r.get("root"), r.get("error"), r.get("follower"))
                for r in p["replicas"]
            ],
        )
        for p in rep["partitions"]
    ]


def _settled(client: MetadataClient, expected: dict[str, int]) -> bool:
    report = _report(client)
    if not report["ok"]:
        return False
    for p in report["partitions"]:
        leader = [r for r in p["replicas"] if r.get("role") == "leader"]
        if not p["chains_equal"] or p["covered"] is not True or len(leader) != 1:
            return False
        if p["replicas"][0]["row_count"] != expected[p["partition_id"]]:
            return False
    return True


def test_three_nodes_replicate_by_fast_forward_and_repair_a_corrupt_file(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    table = make_table(replication_factor=3)
    topics = TopicNames(topic_prefix)
    with MetadataClient(meta) as client, NodeProcesses(tmp_path, zk_hosts, bs, topic_prefix) as nodes:
        file = client.coordinator.create_table(table, list(NODES), [(1000).to_bytes(8, "big")])
        pids = [p.partition_id for p in file.partitions]
        for n in NODES:
            nodes.start(n)
        assert wait_until(lambda: all(read_epoch(client.zk, client.layout, p).server_id for p in pids), 90)
        expected: dict[str, int] = {pids[0]: 0, pids[1]: 0}
        for batch in range(6):  # several segments per partition (flush every 20 rows)
            low = list(range(batch * 25, batch * 25 + 25))
            produce_rows(bs, topics.ingest(pids[0]), rows(table, low, [f"a{k}" for k in low]))
            high = [1000 + k for k in low]
            produce_rows(bs, topics.ingest(pids[1]), rows(table, high, [f"b{k}" for k in high]))
        expected = {pids[0]: 150, pids[1]: 150}
        assert wait_until(lambda: _settled(client, expected), 120), _summary(client)

        report = verify_table(client, "events")
        for p in report["partitions"]:
            assert p["wal_chains_ok"] and all(c["ok"] for c in p["wal_channels"])
            chain = p["replicas"][0]["chain"]
            assert len(chain) >= 3
            followers = [r for r in p["replicas"] if r["role"] == "follower"]
            assert len(followers) == 2
            for f in followers:
                stats = f["follower"]
                # every segment of the chain arrived by fast-forward; no rows were decoded to apply one
                assert stats["fast_forwards"] + stats["fast_forward_adds"] >= len(chain), stats
                assert stats["rows_decoded_to_apply"] == 0 and stats["invalid"] == 0, stats
                assert stats["acks"] >= len(chain)
                assert stats["wal_records_tailed"] > 0  # the overlay followed the leader's WAL channel

        # WAL Tail: moves up to the minimum Ack (what every follower's durable segments cover), no further
        def tails() -> list[tuple[int, list[int | None], int]]:
            out = []
            for p in verify_table(client, "events")["partitions"]:
                leader = next(r for r in p["replicas"] if r["role"] == "leader")
                groups = tuple(
                    topics.replica_group(p["partition_id"], r["placement_id"])
                    for r in p["replicas"]
                    if r["role"] == "follower"
                )
                idx = channel_indexes(KafkaSettings(bs), topics.wal(p["partition_id"], leader["placement_id"]), groups)
                assert not idx.check(), idx
                out.append((idx.tail, [a for _, a in idx.acks], idx.append))
            return out

        assert wait_until(lambda: all(t > 0 for t, _, _ in tails()), 60), tails()
        for tail, acks, _append in tails():
            assert all(a is not None and tail <= a for a in acks)

        env = {"SHOAL_ZK_CONNECT": zk_hosts, "SHOAL_BOOTSTRAP_SERVERS": bs, "SHOAL_TOPIC_PREFIX": topic_prefix}
        res = CliRunner().invoke(verify_command, ["events", "--output", "json"], env=env)
        assert res.exit_code == 0, res.output
        assert '"ok": true' in res.output
        validate("cli-verify", json.loads(res.output))

        # corrupt the root segment file of one follower while it is down: detected and fetched again
        part = report["partitions"][0]
        victim = next(r for r in part["replicas"] if r["role"] == "follower")
        directory = (
            nodes.data_dir(victim["server_id"]) / "partitions" / f"{part['partition_id']}-{victim['placement_id']}"
        )
        nodes.stop(victim["server_id"])
        path = segment_path(directory, victim["root"])
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        nodes.start(victim["server_id"])

        def repaired() -> bool:
            rep = _report(client)
            for p in rep["partitions"]:
                for r in p["replicas"]:
                    if r.get("server_id") == victim["server_id"] and p["partition_id"] == part["partition_id"]:
                        return rep["ok"] and r.get("follower", {}).get("repaired", 0) >= 1
            return False

        assert wait_until(repaired, 90), _summary(client)
        assert path.read_bytes() != bytes(data)
