"""Offset monitoring against real Kafka and ZooKeeper: consumer groups stand in for followers.

A stand-in follower consumes the leader's WAL channel (written in transactions, as the leader
writes it) and commits as ``replica_group`` would; the collector is polled by hand with a
6-poll window (WARN after 3 polls of growing lag).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from monitor_it_support import (
    ChannelWriter,
    StandInFollower,
    chunk,
    make_collector,
    make_env,
    manifest,
    poll_json,
    replica,
)

from monitor.kafka_offsets import KafkaOffsets
from shoal.kafka.admin import create_topic, delete_topics
from shoal.kafka.settings import TopicPolicy
from shoal.wire.records import WalOffsetRange
from shoal_app.testing.wait import wait_until

pytestmark = pytest.mark.integration


def test_stopped_follower_goes_warn_then_stop_and_back_to_ok(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    env = make_env(cluster.bootstrap_servers, zk_hosts, topic_prefix)
    writer = ChannelWriter(cluster.bootstrap_servers, env.wal)
    follower = StandInFollower(
        cluster.bootstrap_servers, env.wal, env.topics.replica_group(env.pid, env.follower.placement_id)
    )
    history = tmp_path / "history"
    col = make_collector(env, history)
    try:
        for _ in range(3):
            last = writer.write()
            acked = follower.catch_up(last)
            snap = poll_json(col)
            assert replica(snap)["status"] == "OK", replica(snap)
        row = replica(snap)
        wal = snap["tables"][0]["partitions"][0]["wal"][0]
        # the transaction marker after the last record is not lag
        assert (row["ack_index"], wal["append_index"], row["lag_records"]) == (acked, acked + 1, 0)
        assert snap["status"] == "OK" and snap["problems"] == []

        seen = []
        for _ in range(12):
            writer.write()
            snap = poll_json(col)
            seen.append(replica(snap)["status"])
            if seen[-1] in ("STOP", "STALL"):
                break
        assert seen[-1] in ("STOP", "STALL"), seen
        assert "WARN" in seen and seen.index("WARN") < len(seen) - 1, seen
        assert set(seen[: seen.index("WARN")]) <= {"OK"}, seen
        stopped = replica(snap)
        assert stopped["lag_records"] > 0 and stopped["lag_seconds"] > 0 and stopped["lag_bytes_estimate"] >= 100
        assert "no commit" in stopped["reason"]
        assert any(p["status"] == seen[-1] and "replica node-2" in p["where"] for p in snap["problems"])
        assert snap["status"] == seen[-1]

        # a restarted monitor is not blind: the window comes back from the history directory
        col.close()
        col = make_collector(env, history)
        writer.write()
        assert replica(poll_json(col))["status"] in ("STOP", "STALL")

        last = writer.write()
        follower.catch_up(last)
        snap = poll_json(col)
        assert replica(snap)["status"] == "OK", replica(snap)
        assert replica(snap)["lag_records"] == 0
    finally:
        col.close()
        follower.close()
        writer.close()
        env.close()


def test_idle_table_is_ok(cluster: Any, zk_hosts: str, topic_prefix: str) -> None:
    env = make_env(cluster.bootstrap_servers, zk_hosts, topic_prefix)
    writer = ChannelWriter(cluster.bootstrap_servers, env.wal)
    follower = StandInFollower(
        cluster.bootstrap_servers, env.wal, env.topics.replica_group(env.pid, env.follower.placement_id)
    )
    col = make_collector(env)
    try:
        follower.catch_up(writer.write(5))
        statuses = []
        for _ in range(8):  # more than a window without a single commit or record
            snap = poll_json(col)
            statuses.append(snap["status"])
        assert statuses == ["OK"] * 8, snap["problems"]
        part = snap["tables"][0]["partitions"][0]
        assert part["status"] == "OK" and part["ingest"]["status"] == "OK"
        assert part["ingest"]["lag_records"] == 0 and part["ingest"]["accepted_index"] is None
        assert part["leader"] == {"server_id": "node-1", "placement_id": env.leader.placement_id, "alive": True}
        assert part["epoch"] == 1 and part["leader_changes"] == 0
        assert replica(snap)["lag_records"] == 0 and replica(snap)["lag_seconds"] == 0
        seg = next(c for c in part["segments"] if c["is_leader_channel"])
        assert (seg["manifests"], seg["replicas"][0]["status"]) == (0, "OK")
        absent = next(c for c in part["wal"] if not c["is_leader_channel"])
        assert (absent["exists"], absent["status"]) == (False, "OK")  # node-2 never led: no channel, no alarm
    finally:
        col.close()
        follower.close()
        writer.close()
        env.close()


def test_truncation_past_an_ack_is_err_with_explanation(cluster: Any, zk_hosts: str, topic_prefix: str) -> None:
    env = make_env(cluster.bootstrap_servers, zk_hosts, topic_prefix)
    writer = ChannelWriter(cluster.bootstrap_servers, env.wal)
    follower = StandInFollower(
        cluster.bootstrap_servers, env.wal, env.topics.replica_group(env.pid, env.follower.placement_id)
    )
    col = make_collector(env)
    try:
        acked = follower.catch_up(writer.write(2))
        for _ in range(4):
            writer.write(2)
        assert replica(poll_json(col))["status"] == "OK"
        with KafkaOffsets(cluster.bootstrap_servers) as k:
            tail = k.delete_records(env.wal, acked + 4)
        assert tail == acked + 4
        snap = poll_json(col)
        row = replica(snap)
        assert row["status"] == "ERR"
        assert f"log start {tail} > committed {acked}" in row["reason"]
        assert "never acknowledged were deleted" in row["reason"]
        wal = snap["tables"][0]["partitions"][0]["wal"][0]
        assert wal["tail_index"] == tail and wal["status"] == "ERR"
        assert snap["status"] == "ERR"
        assert any(p["status"] == "ERR" and "truncated past" in p["reason"] for p in snap["problems"])
    finally:
        col.close()
        follower.close()
        writer.close()
        env.close()


def test_recreated_topic_is_err(cluster: Any, zk_hosts: str, topic_prefix: str, kafka_admin: Any) -> None:
    env = make_env(cluster.bootstrap_servers, zk_hosts, topic_prefix)
    writer = ChannelWriter(cluster.bootstrap_servers, env.wal)
    follower = StandInFollower(
        cluster.bootstrap_servers, env.wal, env.topics.replica_group(env.pid, env.follower.placement_id)
    )
    col = make_collector(env)
    try:
        follower.catch_up(writer.write(3))
        first = poll_json(col)
        old_id = first["tables"][0]["partitions"][0]["wal"][0]["topic_id"]
        assert old_id and replica(first)["status"] == "OK"
        follower.close()
        writer.close()
        delete_topics(kafka_admin, [env.wal])
        assert wait_until(lambda: env.wal not in kafka_admin.list_topics(timeout=10).topics, 60, 0.2)
        create_topic(kafka_admin, env.wal, policy=TopicPolicy())
        writer = ChannelWriter(cluster.bootstrap_servers, env.wal)
        writer.write(1)
        snap = poll_json(col)
        wal = snap["tables"][0]["partitions"][0]["wal"][0]
        row = replica(snap)
        assert wal["topic_id"] != old_id
        assert row["status"] == "ERR", row
        assert f"was recreated (topic id {old_id} -> {wal['topic_id']})" in row["reason"]
        assert snap["status"] == "ERR"
    finally:
        col.close()
        writer.close()
        env.close()


def test_old_leaders_channel_is_settled_once_segments_cover_it(
    cluster: Any, zk_hosts: str, topic_prefix: str, kafka_admin: Any
) -> None:
    """node-2 led before (its WAL channel has records node-1 never acked): STALL (node-1 campaigns: its
    process is up, its Ack stuck) until a segment of the current leader covers those records, then OK
    with the explanation."""
    env = make_env(cluster.bootstrap_servers, zk_hosts, topic_prefix)
    old_wal = env.topics.wal(env.pid, env.follower.placement_id)
    create_topic(kafka_admin, old_wal, policy=TopicPolicy())
    old = ChannelWriter(cluster.bootstrap_servers, old_wal)
    seg = ChannelWriter(cluster.bootstrap_servers, env.segments)
    col = make_collector(env)

    def orphan_row(snap: dict[str, Any]) -> dict[str, Any]:
        part = snap["tables"][0]["partitions"][0]
        (ch,) = [c for c in part["wal"] if not c["is_leader_channel"]]
        (row,) = ch["replicas"]
        return {**row, "covered_index": ch["covered_index"]}

    try:
        last = old.write(3)
        statuses = [orphan_row(poll_json(col))["status"] for _ in range(7)]
        assert statuses[-1] == "STALL", statuses
        sid = uuid.uuid4().hex
        seg.write_raw(
            [
                manifest(
                    env.pid,
                    env.table,
                    env.leader.placement_id,
                    sid,
                    major=True,
                    base=None,
                    covered=(WalOffsetRange(old_wal, 0, last + 1),),
                ),
                chunk(sid),
            ]
        )
        row = orphan_row(poll_json(col))
        assert row["covered_index"] == last + 1
        assert row["status"] == "OK" and "covered by segments" in row["reason"], row
        assert row["lag_records"] == 0 and row["lag_seconds"] == 0, row  # shown as caught up, like the status
        # node-1 had acked the first record while node-2 led; Tail then truncates the settled channel
        # past that Ack: what it deleted is covered by segments, so it stays OK (not ERR)
        acker = StandInFollower(
            cluster.bootstrap_servers, old_wal, env.topics.replica_group(env.pid, env.leader.placement_id)
        )
        try:
            acker.commit(1)
        finally:
            acker.close()
        with KafkaOffsets(cluster.bootstrap_servers) as k:
            assert k.delete_records(old_wal, last + 1) == last + 1
        row = orphan_row(poll_json(col))
        assert row["status"] == "OK" and "covered by segments" in row["reason"], row
    finally:
        col.close()
        old.close()
        seg.close()
        env.close()


def test_a_partition_whose_leader_accepts_nothing_is_a_stuck_partition_problem(
    cluster: Any, zk_hosts: str, topic_prefix: str
) -> None:
    """Writes keep arriving on the ingest topic, the accepted index never moves: after ``warn_samples``
    polls the partition is STOP with a "leaderless or stuck partition" problem (red on the page)."""
    from confluent_kafka import Producer

    env = make_env(cluster.bootstrap_servers, zk_hosts, topic_prefix)
    col = make_collector(env)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    ingest = env.topics.ingest(env.pid)
    try:
        snaps = []
        for i in range(4):
            for j in range(i + 1):
                producer.produce(ingest, f"w{i}-{j}".encode(), partition=0)
            assert producer.flush(30) == 0
            snaps.append(poll_json(col))
        part = snaps[-1]["tables"][0]["partitions"][0]
        stuck = [pr for pr in snaps[-1]["problems"] if "leaderless or stuck partition" in pr["reason"]]
        assert stuck and stuck[0]["status"] == "STOP" and part["status"] == "STOP", snaps[-1]["problems"]
        assert not any("leaderless" in pr["reason"] for pr in snaps[0]["problems"])  # one poll says nothing
    finally:
        col.close()
        env.close()
