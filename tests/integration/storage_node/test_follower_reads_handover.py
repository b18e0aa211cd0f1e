"""Fresh reads across a leader handover (DESIGN.md section 6, fresh reads; section 7, adoption).

A follower tails its leader's WAL channel into an overlay, so it reads rows the leader accepted
before any segment holds them. When leadership moves (here the leader rebalancer hands the
partition to its preferred leader), the new leader adopts the old leader's WAL records into a
segment; until a replica has that segment, the old leader's records it tailed (a follower) or held
in its memtable (the old leader, now a follower) are the only copy it can read. A replica that
dropped them at the switch answered reads without acknowledged rows it had already returned, for
about a second (a read that went back in time).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from node_it_support import in_process_nodes, make_table, produce_rows, rows, run_node

from metadata.client import MetadataClient, MetadataConfig
from metadata.rebalance import preferred_leaders
from shoal.topics import TopicNames
from shoal_app.testing.wait import wait_until
from storage_node.config import FlushPolicy
from storage_node.node import StorageNode

pytestmark = pytest.mark.integration

NODES = ("node-1", "node-2", "node-3")
ROWS = 60


def _leader(client: MetadataClient, pid: str) -> str | None:
    st = client.coordinator.partition_status(pid)
    return st.leader_server_id if st.leader_alive else None


def _count(node: StorageNode, pid: str) -> int | None:
    held = node.partitions().get(pid)
    if held is None:
        return None
    try:
        return held.replica.scan().num_rows
    except Exception:  # a replica being swapped by its node
        return None


def test_a_follower_keeps_reading_the_old_leaders_rows_until_the_new_leaders_segment_holds_them(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=cluster.bootstrap_servers, topic_prefix=topic_prefix)
    table = make_table(replication_factor=3)
    # nothing is flushed by size or age: the rows stay in the leader's memtable and WAL channel, and a
    # follower reads them only from its overlay until the new leader's adoption segment arrives
    config = {"flush": FlushPolicy(max_rows=1_000_000, max_age_s=3600), "leader_rebalance_delay_s": 1.0}
    with MetadataClient(meta) as client:
        file = client.coordinator.create_table(table, list(NODES), [])
        pid = file.partitions[0].partition_id
        preferred = preferred_leaders(file)[pid]
        others = [n for n in NODES if n != preferred]
        with in_process_nodes(meta, tmp_path, others, **config) as nodes:
            assert wait_until(lambda: _leader(client, pid) in others, 60)
            first = _leader(client, pid)
            assert first is not None
            follower = next(n for n in others if n != first)
            keys = list(range(ROWS))
            produce_rows(
                cluster.bootstrap_servers, TopicNames(topic_prefix).ingest(pid), rows(table, keys, ["v"] * ROWS)
            )
            assert wait_until(lambda: _count(nodes[follower], pid) == ROWS, 60), _count(nodes[follower], pid)

            # the third node follows both leaders; the first leader becomes a follower itself
            watched = {"follower": follower, "old leader": first}
            seen: dict[str, list[int | None]] = {who: [] for who in watched}
            stop = threading.Event()

            def watch() -> None:
                while not stop.is_set():
                    for who, server in watched.items():
                        seen[who].append(_count(nodes[server], pid))
                    stop.wait(0.01)

            def settled(server: str) -> bool:
                overlay = nodes[server].partitions()[pid].replica.overlay
                return _count(nodes[server], pid) == ROWS and (overlay is None or overlay.rows == 0)

            watcher = threading.Thread(target=watch, name="watch-follower-reads", daemon=True)
            watcher.start()
            try:
                nodes[preferred] = run_node(meta, preferred, tmp_path, **config)
                assert wait_until(lambda: _leader(client, pid) == preferred, 90), _leader(client, pid)
                # the new leader adopted the old leader's records: both followers hold them in a segment
                for server in watched.values():
                    assert wait_until(lambda server=server: settled(server), 60), (server, _count(nodes[server], pid))
            finally:
                stop.set()
                watcher.join(10)
            for who, values in seen.items():
                counts = [c for c in values if c is not None]
                assert len(counts) > 50  # the reads ran through the handover
                assert min(counts) == ROWS, f"the {who}'s reads lost rows during the handover: {sorted(set(counts))}"
