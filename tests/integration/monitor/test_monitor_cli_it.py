"""``shoal offsets`` against real servers: the documented JSON shape, segments acks, Spark lag, text output."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from monitor_it_support import ChannelWriter, StandInFollower, chunk, make_env, manifest

from shoal.kafka.admin import create_topic
from shoal.kafka.settings import TopicPolicy
from shoal_app.cli.main import cli
from shoal_app.schemas import validate

pytestmark = pytest.mark.integration

# The shape of monitor/models.py (docs/schemas/monitor-snapshot.json): every object has exactly these keys.
TOP = {
    "version",
    "generated_at",
    "cluster_id",
    "status",
    "window",
    "tables",
    "spark_queries",
    "compaction_intake",
    "problems",
}
WINDOW = {"samples", "interval_s", "warn_samples"}
TABLE = {"table", "status", "partitions", "leaders_per_node", "on_preferred_leader"}
PARTITION = {
    "partition_id",
    "status",
    "leader",
    "epoch",
    "leader_changes",
    "ingest",
    "wal",
    "segments",
    "preferred_leader",
}
LEADER = {"server_id", "placement_id", "alive"}
LAG = {"lag_records", "lag_seconds", "lag_bytes_estimate", "status", "reason", "series"}
INGEST = {"topic", "exists", "log_start", "log_end", "group", "accepted_index"} | LAG
CHANNEL = {"topic", "exists", "topic_id", "owner", "is_leader_channel", "status", "reason", "replicas"}
OWNER = {"server_id", "placement_id", "role"}
WAL = CHANNEL | {"append_index", "tail_index", "covered_index"}
WAL_REPLICA = {
    "server_id",
    "placement_id",
    "role",
    "ack_group",
    "ack_index",
    "consume_group",
    "consume_index",
    "consume_lag_records",
} | LAG
SEGMENTS = CHANNEL | {
    "log_start",
    "log_end",
    "manifests",
    "majors",
    "minors_awaiting_compaction",
    "invalid_manifests",
    "recent",
}
SEGMENT = {"offset", "segment_id", "is_major", "created_at_ms", "size_bytes", "row_count", "acked_by"}
SEG_REPLICA = {"server_id", "placement_id", "role", "ack_group", "ack_index", "unacked_segments"} | LAG
SPARK = {"query", "group", "status", "lag_records", "partitions"}
GROUP = {"group", "status", "lag_records", "partitions"}
SPARK_PART = {"topic", "partition", "committed", "log_start", "log_end"} | LAG
PROBLEM = {"where", "status", "reason"}
STATUSES = {"OK", "WARN", "STALL", "STOP", "REWIND", "ERR"}


def check_shape(snap: dict[str, Any]) -> None:
    validate("monitor-snapshot", snap)
    assert set(snap) == TOP and snap["version"] == 1 and snap["status"] in STATUSES
    assert set(snap["window"]) == WINDOW
    for t in snap["tables"]:
        assert set(t) == TABLE
        for p in t["partitions"]:
            assert set(p) == PARTITION and p["status"] in STATUSES
            assert p["leader"] is None or set(p["leader"]) == LEADER
            assert set(p["ingest"]) == INGEST
            for c in p["wal"]:
                assert set(c) == (WAL if c["exists"] else CHANNEL)
                assert set(c["owner"]) == OWNER
                for r in c["replicas"]:
                    assert set(r) == WAL_REPLICA and r["status"] in STATUSES
            for c in p["segments"]:
                assert set(c) == (SEGMENTS if c["exists"] else CHANNEL | {"recent"})
                for s in c["recent"]:
                    assert set(s) == SEGMENT
                for r in c["replicas"]:
                    assert set(r) == SEG_REPLICA
    for q in snap["spark_queries"]:
        assert set(q) == SPARK
        for pp in q["partitions"]:
            assert set(pp) == SPARK_PART
    for g in snap["compaction_intake"]:
        assert set(g) == GROUP
        for pp in g["partitions"]:
            assert set(pp) == SPARK_PART
    for pr in snap["problems"]:
        assert set(pr) == PROBLEM


def _refused(name: str) -> Any:
    def call(*_: Any, **__: Any) -> Any:
        raise AssertionError(f"AdminClient.{name} was called")

    return call


def test_offsets_json_shape_segments_and_spark_lag(
    cluster: Any, zk_hosts: str, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no AdminClient request routed to a group coordinator: librdkafka 2.16 aborts the process when
    # one meets a coordinator change (the monitor died so after broker kills)
    for name in ("list_consumer_group_offsets", "describe_consumer_groups", "delete_consumer_groups"):
        monkeypatch.setattr(AdminClient, name, _refused(name))
    bs = cluster.bootstrap_servers
    env = make_env(bs, zk_hosts, topic_prefix)
    wal = ChannelWriter(bs, env.wal)
    seg = ChannelWriter(bs, env.segments)
    wal_follower = StandInFollower(bs, env.wal, env.topics.replica_group(env.pid, env.follower.placement_id))
    seg_follower = StandInFollower(bs, env.segments, env.topics.replica_group(env.pid, env.follower.placement_id))
    ids = [uuid.uuid4().hex for _ in range(3)]
    leader_pl = env.leader.placement_id
    try:
        wal_follower.catch_up(wal.write(4))
        wal.write(2)  # two records the follower has not acked
        seg.write_raw([manifest(env.pid, env.table, leader_pl, ids[0], major=True, base=None), chunk(ids[0])])
        m1_chunk = seg.write_raw(
            [manifest(env.pid, env.table, leader_pl, ids[1], major=False, base=ids[0]), chunk(ids[1])]
        )
        seg.write_raw([manifest(env.pid, env.table, leader_pl, ids[2], major=False, base=ids[1]), chunk(ids[2])])
        seg_follower.catch_up(m1_chunk)  # acks the first two segments, not the third

        # a Spark ingest query mirroring its source offsets into <prefix>.spark.<query>
        src = f"{topic_prefix}.source"
        from shoal.kafka import clients
        from shoal.kafka.settings import KafkaSettings

        create_topic(clients.admin(KafkaSettings(bs)), src, policy=TopicPolicy())
        p = Producer({"bootstrap.servers": bs})
        for i in range(5):
            p.produce(src, f"r{i}".encode())
        p.flush(30)
        spark_group = env.topics.spark_group("q1")
        c = Consumer({"bootstrap.servers": bs, "group.id": spark_group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(src, 0, 2)], asynchronous=False)
        c.close()
        # the leader's compaction intake group on the partition's compaction topic, caught up
        compaction = env.topics.compaction(env.pid)
        create_topic(clients.admin(KafkaSettings(bs)), compaction, policy=TopicPolicy())
        for i in range(2):
            p.produce(compaction, f"m{i}".encode())
        p.flush(30)
        intake_group = f"{topic_prefix}.compaction-intake.{env.pid}.{leader_pl}"
        c = Consumer({"bootstrap.servers": bs, "group.id": intake_group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(compaction, 0, 2)], asynchronous=False)
        c.close()

        conn = ["--zk", zk_hosts, "--bootstrap-servers", bs, "--topic-prefix", topic_prefix]
        runner = CliRunner()
        res = runner.invoke(cli, ["offsets", env.table, "--output", "json", *conn], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        snap = json.loads(res.stdout)
        check_shape(snap)
        part = snap["tables"][0]["partitions"][0]
        assert part["partition_id"] == env.pid and part["leader"]["server_id"] == "node-1"
        w = next(c for c in part["wal"] if c["is_leader_channel"])
        (r,) = w["replicas"]
        assert r["ack_group"] == env.topics.replica_group(env.pid, env.follower.placement_id)
        assert r["consume_group"] == env.topics.consume_group(env.pid, env.follower.placement_id)
        assert r["consume_index"] is None and r["lag_records"] == w["append_index"] - r["ack_index"] - 1 > 0
        s = next(c for c in part["segments"] if c["is_leader_channel"])
        assert (s["manifests"], s["majors"], s["minors_awaiting_compaction"]) == (3, 1, 2)
        assert [x["segment_id"] for x in s["recent"]] == ids
        assert [x["acked_by"] for x in s["recent"]] == [[env.follower.placement_id]] * 2 + [[]]
        assert s["replicas"][0]["unacked_segments"] == 1
        (q,) = snap["spark_queries"]
        assert (q["query"], q["group"], q["lag_records"]) == ("q1", spark_group, 3)
        assert q["partitions"][0]["committed"] == 2 and q["partitions"][0]["lag_seconds"] >= 0
        (g,) = snap["compaction_intake"]
        assert (g["group"], g["lag_records"], g["status"]) == (intake_group, 0, "OK")
        assert g["partitions"][0]["topic"] == compaction and g["partitions"][0]["committed"] == 2

        # --watch --count: one JSON document per line, per poll
        res = runner.invoke(
            cli, ["offsets", env.table, "--watch", "--count", "2", "--interval", "0.1", "-o", "json", *conn]
        )
        assert res.exit_code == 0, res.output
        lines = [json.loads(line) for line in res.stdout.splitlines()]
        assert len(lines) == 2 and lines[1]["generated_at"] > lines[0]["generated_at"]

        res = runner.invoke(cli, ["offsets", env.table, *conn])
        assert res.exit_code == 0, res.output
        assert f"partition {env.pid}  leader node-1#{leader_pl} epoch 1" in res.stdout
        assert f"@0 {ids[0]} major  acked by #{env.follower.placement_id}" in res.stdout
        assert "spark query q1  lag 3" in res.stdout
        assert f"compaction intake {intake_group}  lag 0  OK" in res.stdout

        res = runner.invoke(cli, ["offsets", "nosuchtable", *conn])
        assert res.exit_code != 0 and "nosuchtable" in res.output
    finally:
        wal_follower.close()
        seg_follower.close()
        wal.close()
        seg.close()
        env.close()
