"""Replication under faults (DESIGN.md sections 6 and 7).

kill -9 the leader under writes, kill -9 a follower, SIGSTOP the leader.

Three node processes, real Kafka and ZooKeeper. A write is acknowledged once ``Producer.sync()``
returned after it; every acknowledged write must end up on every live replica, once, and all
replicas must agree (``shoal verify``).
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from fault_support import NODES, Cluster3, wait_until

from shoal.kafka.admin import log_start_and_end
from shoal.kafka.errors import ChannelTruncatedError
from shoal.kafka.readers import read_wal_channel
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames

pytestmark = pytest.mark.integration


def test_kill_leader_under_writes_loses_no_acknowledged_write(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("SHOAL_FAULT_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    print(f"fault seed {seed}")
    with Cluster3(tmp_path, cluster, zk_hosts, topic_prefix) as c:
        w = c.writer()
        assert wait_until(lambda: len(w.acked) >= 100, 90), (len(w.acked), w.error)
        for _round in range(2):  # two random kill points
            time.sleep(rng.uniform(0.2, 3.0))
            epoch0, victim, _ = c.epoch()
            assert victim is not None
            before = len(w.acked)
            c.nodes.kill(victim)
            assert wait_until(lambda v=victim, e=epoch0: c.epoch()[0] > e and c.leader() not in (None, v), 90)
            assert wait_until(lambda b=before: len(w.acked) >= b + 60, 120), "writes did not resume after failover"
            c.nodes.start(victim)
        w.stop()
        assert w.acked, "nothing was acknowledged"
        assert wait_until(lambda: c.converged(w.acked, w.sent), 180), c.summary()
        rep = c.report()
        assert all(ch["ok"] for p in rep["partitions"] for ch in p["wal_channels"])


def test_follower_restart_resumes_and_a_paused_leader_is_fenced(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    topics = TopicNames(topic_prefix)
    with Cluster3(tmp_path, cluster, zk_hosts, topic_prefix) as c:
        w = c.writer()
        assert wait_until(lambda: len(w.acked) >= 100, 90), (len(w.acked), w.error)
        w.stop()
        acked, sent = set(w.acked), set(w.sent)
        assert wait_until(lambda: c.converged(acked, sent), 120), c.summary()

        # kill -9 a follower and restart it: it resumes from its committed offsets, fetches nothing again
        follower = next(n for n in NODES if n != c.leader())
        c.nodes.kill(follower)
        c.nodes.start(follower)
        assert wait_until(lambda: (c.describe(follower) or {}).get("follower", {}).get("acks", -1) >= 0, 90)
        assert wait_until(lambda: c.converged(acked, sent), 120), c.summary()
        stats = (c.describe(follower) or {})["follower"]
        assert stats["manifests"] == 0 and stats["bytes_received"] == 0, stats
        w = c.writer(first_key=100_000)  # new segments reach it by fast-forward
        assert wait_until(lambda: len(w.acked) >= 100, 90)

        def fast_forwarded() -> bool:
            stats = (c.describe(follower) or {}).get("follower", {})
            return stats.get("fast_forwards", 0) >= 1 and stats.get("rows_decoded_to_apply", 1) == 0

        assert wait_until(fast_forwarded, 60), c.describe(follower)

        # SIGSTOP the leader past the ZooKeeper session timeout, then SIGCONT: fenced, commits nothing
        epoch0, paused, placement = c.epoch()
        assert paused is not None and placement is not None
        c.nodes.signal(paused, signal.SIGSTOP)
        try:
            assert wait_until(lambda: c.epoch()[0] > epoch0 and c.leader() != paused, 90)
            before = len(w.acked)
            assert wait_until(lambda: len(w.acked) >= before + 60, 120), "writes did not resume on the new leader"
            wal = topics.wal(c.pid, placement)
            append_before = log_start_and_end(KafkaSettings(c.bs), wal)[1]
            records_before = _offsets(c.bs, wal)
        finally:
            c.nodes.signal(paused, signal.SIGCONT)
        assert wait_until(lambda: (c.describe(paused) or {}).get("role") == "follower", 90), c.describe(paused)
        time.sleep(2)  # writes keep flowing to the new leader meanwhile
        # the zombie committed nothing: no record, not even a transaction marker, after its channel was fenced
        assert log_start_and_end(KafkaSettings(c.bs), wal)[1] == append_before
        after = _offsets(c.bs, wal)
        assert set(after) <= set(records_before) and max(records_before) == max(after)
        w.stop()
        assert wait_until(lambda: c.converged(w.acked | acked, w.sent | sent), 180), c.summary()


def _offsets(bootstrap: str, wal: str) -> list[int]:
    """The offsets of a WAL channel's records, read again when the new leader's Tail truncates it
    under the read (a CI run: "the Tail moved past offset 8 while it was read")."""
    for _ in range(5):
        try:
            return [r.offset for r in read_wal_channel(KafkaSettings(bootstrap), wal, 0)]
        except ChannelTruncatedError:
            time.sleep(0.5)
    return [r.offset for r in read_wal_channel(KafkaSettings(bootstrap), wal, 0)]
