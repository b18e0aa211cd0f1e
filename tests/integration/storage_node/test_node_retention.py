"""Bounded retention with a dead follower, on two real storage nodes (DESIGN.md sections 6 and 10).

A follower that is down is marked out of sync in ZooKeeper once the replica-lag bound passes, and
no longer holds the Tail: the leader's WAL channel stays within a bound while ten times that bound
is written. When the follower comes back it is still out of sync, catches up from the segments
channel, and rejoins the in-sync set (Kafka's ISR rules; storage_node.replication.tail). The
leader's Tail passes keep their Kafka clients from one pass to the next throughout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from node_it_support import committed, in_process_nodes, make_table, produce_rows, rows, run_node, stop_node

from metadata.client import MetadataClient, MetadataConfig
from metadata.in_sync import read_in_sync
from shoal.kafka.admin import log_start_and_end
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames
from shoal.worker import poll_until
from storage_node.config import FlushPolicy, ReplicaLagPolicy
from storage_node.node import HeldPartition, StorageNode

pytestmark = pytest.mark.integration

NODES = ("node-1", "node-2")
BOUND = 400
"""WAL offsets the leader's channel may hold (a small bound, for the test)."""
ROUND = 200
"""Messages (one WAL record each) written per round."""


def _config() -> dict[str, Any]:
    return {
        "flush": FlushPolicy(max_rows=50, max_age_s=0.5),
        "replica_lag": ReplicaLagPolicy(max_lag_s=2.0, max_lag_bytes=64 * 1024 * 1024),
        "tail_every_s": 0.5,
    }


def _leader(nodes: dict[str, StorageNode], pid: str) -> tuple[str, HeldPartition] | None:
    for n, node in nodes.items():
        h = node.partitions().get(pid)
        if h is not None and h.leader is not None and h.leader.ready.is_set() and not h.leader.stopped.is_set():
            return n, h
    return None


def test_a_dead_follower_stops_pinning_the_wal_and_rejoins_once_caught_up(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    kafka = KafkaSettings(bs)
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    table = make_table(replication_factor=2)
    topics = TopicNames(topic_prefix)
    with MetadataClient(meta) as client, in_process_nodes(meta, tmp_path, NODES, **_config()) as nodes:
        pid = client.coordinator.create_table(table, list(NODES), []).partitions[0].partition_id
        assert poll_until(lambda: _leader(nodes, pid) is not None, 90)
        lead = _leader(nodes, pid)
        assert lead is not None
        leader_id, held = lead
        follower_id = next(n for n in NODES if n != leader_id)
        follower_placement = nodes[follower_id].partitions()[pid].placement_id
        wal = topics.wal(pid, held.placement_id)
        ingest, accepted_group = topics.ingest(pid), topics.leader_group(pid)

        def wal_size() -> int:
            start, end = log_start_and_end(kafka, wal)
            return end - start

        def out_of_sync() -> frozenset[int]:
            return read_in_sync(client.zk, client.layout, pid).out_of_sync

        # both replicas in sync: the Tail follows the follower's Ack. On a loaded machine the
        # follower may lag past the bound for a moment (then it is out of sync and rejoins once
        # caught up, as below), so wait for both: in sync, and the WAL truncated under its Ack
        produce_rows(bs, topics.ingest(pid), *(rows(table, [k], [f"a{k}"]) for k in range(50)))

        follower_group = topics.replica_group(pid, follower_placement)

        def truncated_in_sync() -> bool:
            start = log_start_and_end(kafka, wal)[0]
            return out_of_sync() == frozenset() and start >= 49 and committed(bs, follower_group, wal) >= start

        assert poll_until(truncated_in_sync, 60), (out_of_sync(), log_start_and_end(kafka, wal))

        # the follower dies: out of sync once the lag bound passes, and no longer pins the WAL
        stop_node(nodes.pop(follower_id))
        assert poll_until(lambda: out_of_sync() == {follower_placement}, 30), out_of_sync()
        start_append = log_start_and_end(kafka, wal)[1]
        largest = 0
        key = 1000
        for _ in range(10 * BOUND // ROUND):
            produce_rows(bs, topics.ingest(pid), *(rows(table, [key + i], [f"b{key + i}"]) for i in range(ROUND)))
            key += ROUND
            # the leader took the whole round (its accepted index is at the ingest end): measure
            assert poll_until(lambda: committed(bs, accepted_group, ingest) == log_start_and_end(kafka, ingest)[1], 30)
            largest = max(largest, wal_size())
            assert poll_until(lambda: wal_size() <= ROUND // 2, 30), (wal_size(), log_start_and_end(kafka, wal))
        written = log_start_and_end(kafka, wal)[1] - start_append
        assert written >= 10 * BOUND, written
        assert largest <= BOUND, (largest, BOUND)
        # the ingest channel is truncated below the leader's accepted index too
        assert poll_until(lambda: log_start_and_end(kafka, ingest)[0] >= 50 + 9 * ROUND, 30)
        # the dead follower's Ack is below the Tail now
        follower_ack = committed(bs, topics.replica_group(pid, follower_placement), wal)
        assert follower_ack < log_start_and_end(kafka, wal)[0], follower_ack

        # the follower comes back below the Tail: out of sync until it caught up, then back in
        nodes[follower_id] = run_node(meta, follower_id, tmp_path, **_config())
        assert out_of_sync() == {follower_placement}
        assert poll_until(lambda: out_of_sync() == frozenset(), 60), out_of_sync()
        back = nodes[follower_id].partitions()[pid].replica
        expected = held.replica.scan().sort_by("k").to_pylist()
        assert len(expected) == 50 + 10 * BOUND
        assert poll_until(lambda: back.scan().sort_by("k").to_pylist() == expected, 30)
        # the Tail passes (every 0.5 s, through the follower's death and return) kept their clients
        leader = held.leader
        assert leader is not None and leader.publisher is not None
        stats = leader.publisher.stats
        assert stats.tail_passes >= 10 and stats.tail_clients <= 1 + stats.tail_failures, stats
