"""A wiped replica whose bootstrap check cannot run at start neither follows nor campaigns until it
ran, then bootstraps (DESIGN.md sections 6 and 7), on two real storage nodes.

The check (an empty replica whose Acks are still committed in Kafka must bootstrap, which first
lowers those Acks to what it holds) reads Kafka; when it fails (a broker hiccup at start), a node
that followed anyway resumed from the old Acks, took the next segment, stopped being empty, and
passed the check later without bootstrapping, its Ack claiming what it no longer held.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from node_it_support import committed, in_process_nodes, make_table, produce_rows, rows, run_node, stop_node

from metadata.client import MetadataClient, MetadataConfig
from shoal.errors import KafkaOperationError
from shoal.topics import TopicNames
from shoal.worker import poll_until
from storage_node.config import FlushPolicy
from storage_node.replica.replica import replica_dir
from storage_node.replication import bootstrap

pytestmark = pytest.mark.integration

NODES = ("node-1", "node-2")


def _config() -> dict[str, Any]:
    return {"flush": FlushPolicy(max_rows=20, max_age_s=0.5)}


def test_a_wiped_follower_whose_check_fails_at_start_waits_for_it_then_bootstraps(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bs = cluster.bootstrap_servers
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    table = make_table(replication_factor=2)
    topics = TopicNames(topic_prefix)
    with MetadataClient(meta) as client, in_process_nodes(meta, tmp_path, NODES, **_config()) as nodes:
        pid = client.coordinator.create_table(table, list(NODES), []).partitions[0].partition_id

        def leader_id() -> str | None:
            for n, node in nodes.items():
                h = node.partitions().get(pid)
                if h is not None and h.leader is not None and h.leader.ready.is_set():
                    return n
            return None

        assert poll_until(lambda: leader_id() is not None, 90)
        lead = leader_id()
        assert lead is not None
        follower = next(n for n in NODES if n != lead)
        placement = nodes[follower].partitions()[pid].placement_id
        leader_placement = nodes[lead].partitions()[pid].placement_id
        produce_rows(bs, topics.ingest(pid), rows(table, list(range(100)), [f"v{k}" for k in range(100)]))
        segments, group = topics.segments(pid, leader_placement), topics.replica_group(pid, placement)
        assert poll_until(lambda: (committed(bs, group, segments) or 0) > 0, 60)
        assert poll_until(lambda: nodes[follower].partitions()[pid].replica.scan().num_rows == 100, 60)

        stop_node(nodes[follower])
        shutil.rmtree(replica_dir(tmp_path / follower, pid, placement))  # the disk is wiped; its Acks stay

        release, calls = threading.Event(), []
        check_on_open = bootstrap.check_on_open

        def hiccup(*args: Any, **kwargs: Any) -> str | None:
            calls.append(1)
            if not release.is_set():
                raise KafkaOperationError("test: Kafka cannot be reached")
            return check_on_open(*args, **kwargs)

        monkeypatch.setattr(bootstrap, "check_on_open", hiccup)
        nodes[follower] = run_node(meta, follower, tmp_path, **_config())
        assert poll_until(lambda: pid in nodes[follower].partitions() and calls, 60)
        # new segments on the leader's channel while the check cannot run
        produce_rows(bs, topics.ingest(pid), rows(table, list(range(100, 200)), [f"v{k}" for k in range(100, 200)]))
        assert poll_until(lambda: len(calls) >= 3, 60), calls  # the supervision tick asks again
        held = nodes[follower].partitions()[pid]
        assert held.follower is None, "a replica whose bootstrap check has not run must not follow"
        assert held.replica.empty and held.election is None

        release.set()
        assert poll_until(lambda: held.replica.catch_up.snapshot().reason is not None, 60)
        assert (held.replica.catch_up.snapshot().reason or "").startswith(bootstrap.REASON_EMPTY_WITH_HISTORY)
        assert poll_until(lambda: held.replica.catch_up.eligible and held.replica.scan().num_rows == 200, 90)
