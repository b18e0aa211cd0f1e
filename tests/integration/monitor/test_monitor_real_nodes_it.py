"""Offset monitoring against three real storage node processes (real followers, DESIGN.md sections 3 and 6).

The followers are real: their Ack on the leader's WAL channel moves only when a segment is flushed
and replicated, their Ack on the segments channel when a segment is durable on them. With a small
window (6 polls, WARN after 3): after writes settle every replica is OK; a follower killed under
continuous writes leaves OK on the leader's WAL and segments channels (WARN, then STOP or STALL);
restarted, it catches up and every replica is OK again.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "storage_node"))

from node_it_support import NodeProcesses, make_table, produce_rows, rows

from metadata.client import MetadataClient, MetadataConfig
from metadata.election import read_epoch
from monitor.collector import Collector
from monitor.config import MonitorConfig
from monitor.topology import read_topology
from shoal.topics import TopicNames
from shoal_app.schemas import validate
from shoal_app.testing.wait import wait_until

pytestmark = pytest.mark.integration

NODES = ("node-1", "node-2", "node-3")


class _Writer(threading.Thread):
    """Writes 10 new keys to the partition's ingest topic every ``pause_s`` until stopped."""

    def __init__(self, bootstrap: str, topic: str, first: int, pause_s: float = 0.3) -> None:
        super().__init__(daemon=True, name="monitor-it-writer")
        self.bootstrap, self.topic, self.next, self.pause_s = bootstrap, topic, first, pause_s
        self.halt = threading.Event()
        self.table = make_table(replication_factor=3)

    def run(self) -> None:
        while not self.halt.is_set():
            keys = list(range(self.next, self.next + 10))
            produce_rows(self.bootstrap, self.topic, rows(self.table, keys, [f"v{k}" for k in keys]))
            self.next += 10
            self.halt.wait(self.pause_s)

    def stop(self) -> None:
        self.halt.set()
        self.join(30)


def _rows_of(snap: dict[str, Any], server_id: str) -> dict[str, dict[str, Any]]:
    """The replica rows of ``server_id`` on the leader's WAL and segments channels."""
    part = snap["tables"][0]["partitions"][0]
    out = {}
    for kind in ("wal", "segments"):
        for channel in part[kind]:
            if channel["is_leader_channel"]:
                for row in channel["replicas"]:
                    if row["server_id"] == server_id:
                        out[kind] = row
    return out


def _poll(col: Collector) -> dict[str, Any]:
    """One poll, ``interval_s`` after the previous one (a sample per interval, as ``shoal monitor`` takes)."""
    time.sleep(col.config.interval_s)
    snap = col.poll().to_json()
    validate("monitor-snapshot", snap)
    return snap


def _all_ok(col: Collector, polls: int = 2) -> bool:
    """The partition (every channel, every replica) is OK in ``polls`` consecutive polls."""
    return all(_poll(col)["tables"][0]["partitions"][0]["status"] == "OK" for _ in range(polls))


def test_a_killed_real_follower_leaves_ok_and_comes_back(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    topics = TopicNames(topic_prefix)
    table = make_table(replication_factor=3)
    config = MonitorConfig(bs, topic_prefix, interval_s=0.5, window_samples=6, warn_samples=3, fetch_timeout_s=2.0)
    with MetadataClient(meta) as client, NodeProcesses(tmp_path, zk_hosts, bs, topic_prefix) as nodes:
        pid = client.coordinator.create_table(table, list(NODES), []).partitions[0].partition_id
        for n in NODES:
            nodes.start(n)
        assert wait_until(lambda: read_epoch(client.zk, client.layout, pid).server_id is not None, 90)
        col = Collector(config, lambda: read_topology(topics, client.coordinator, "events"))
        keys = list(range(60))
        produce_rows(bs, topics.ingest(pid), rows(table, keys, [f"v{k}" for k in keys]))
        assert wait_until(lambda: _all_ok(col), 90, interval=0.5), _poll(col)["problems"]
        leader = read_epoch(client.zk, client.layout, pid).server_id
        victim = next(n for n in NODES if n != leader)
        # OK again before the kill: a segment flushed a moment ago can still be unacked for a few
        # polls (WARN counts polls, and back-to-back polls are fast)
        assert wait_until(
            lambda: all(r["status"] == "OK" for r in _rows_of(_poll(col), victim).values()), 30, interval=0.5
        ), _rows_of(_poll(col), victim)
        assert set(_rows_of(_poll(col), victim)) == {"wal", "segments"}

        writer = _Writer(bs, topics.ingest(pid), first=1000)
        writer.start()
        try:
            nodes.kill(victim)
            seen: dict[str, list[str]] = {"wal": [], "segments": []}
            for _ in range(30):
                got = _rows_of(_poll(col), victim)
                for kind, row in got.items():
                    seen[kind].append(row["status"])
                if all(s and s[-1] in ("STOP", "STALL") for s in seen.values()):
                    break
            for kind, statuses in seen.items():
                assert statuses[-1] in ("STOP", "STALL"), (kind, seen)
                assert "WARN" in statuses, (kind, seen)
                first_bad = next(i for i, s in enumerate(statuses) if s != "OK")
                assert statuses[first_bad] == "WARN", (kind, seen)  # WARN comes first, then STOP/STALL
            # the live follower stays OK meanwhile
            other = next(n for n in NODES if n not in (leader, victim))
            assert _rows_of(_poll(col), other)["segments"]["status"] == "OK"

            nodes.start(victim)
            assert wait_until(
                lambda: all(r["status"] == "OK" for r in _rows_of(_poll(col), victim).values()), 90, interval=0.5
            ), _rows_of(_poll(col), victim)
        finally:
            writer.stop()
        assert wait_until(lambda: _all_ok(col), 90, interval=0.5), _poll(col)["problems"]
