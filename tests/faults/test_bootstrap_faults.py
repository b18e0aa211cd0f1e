"""A replica whose disk is wiped re-bootstraps from Kafka and never leads with missing data.

DESIGN.md sections 6 and 7, :mod:`storage_node.replication.bootstrap`. Three node processes, real
Kafka and ZooKeeper, one partition with three replicas.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from fault_support import NODES, Cluster3, wait_until
from node_it_support import make_table

from metadata.election import candidates
from shoal_app.testing.segments import commit_local_major
from storage_node.replica import PartitionReplica
from storage_node.replication.collect import collect_on_follower

pytestmark = pytest.mark.integration


def _catch_up(c: Cluster3, server: str) -> dict[str, Any]:
    return dict((c.describe(server) or {}).get("catch_up") or {})


def _placement(c: Cluster3, server: str) -> int:
    d = c.describe(server)
    assert d is not None
    return int(d["placement_id"])


def _written(c: Cluster3, n: int = 300) -> tuple[set[int], set[int]]:
    """Write at least ``n`` acknowledged rows and wait until every replica holds them."""
    w = c.writer()
    assert wait_until(lambda: len(w.acked) >= n, 90), (len(w.acked), w.error)
    w.stop()
    acked, sent = set(w.acked), set(w.sent)
    assert wait_until(lambda: c.converged(acked, sent), 120), c.summary()
    return acked, sent


def _holds(c: Cluster3, servers: list[str], acked: set[int]) -> bool:
    for s in servers:
        try:
            keys = c.keys_on(s)
        except Exception:
            return False
        if len(keys) != len(set(keys)) or not acked <= set(keys):
            return False
    return True


def test_wiped_follower_rebootstraps_from_segments_and_leads_only_when_caught_up(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    with Cluster3(tmp_path, cluster, zk_hosts, topic_prefix) as c:
        acked, sent = _written(c)
        leader = c.leader()
        wiped = next(n for n in NODES if n != leader)
        placement = _placement(c, wiped)

        # wipe a follower's data dir and restart it: it bootstraps from the leader's segments channel
        c.nodes.stop(wiped)
        shutil.rmtree(c.nodes.data_dir(wiped))
        c.nodes.start(wiped)
        seen_bootstrapping = False

        def served_again() -> bool:
            nonlocal seen_bootstrapping
            line = {x.placement_id for x in candidates(c.client.zk, c.client.layout, c.pid)}
            state = _catch_up(c, wiped)
            if state.get("state") == "BOOTSTRAPPING":
                seen_bootstrapping = True
                assert placement not in line, "a bootstrapping replica campaigns"
            return state.get("state") == "SERVING" and state.get("reason") is not None

        assert wait_until(served_again, 120), (_catch_up(c, wiped), c.describe(wiped))
        d = c.describe(wiped)
        assert d is not None
        stats, state = d["follower"], d["catch_up"]
        assert state["segments_fetched"] >= 1 and state["bytes_fetched"] > 0, state
        applied = stats["fast_forwards"] + stats["fast_forward_adds"]
        assert applied >= state["segments_fetched"] >= 1 and stats["rows_decoded_to_apply"] == 0, stats
        assert wait_until(
            lambda: placement in {x.placement_id for x in candidates(c.client.zk, c.client.layout, c.pid)}, 60
        )
        assert wait_until(lambda: _holds(c, [wiped], acked), 60), c.summary()
        print("bootstrap", state, "seen BOOTSTRAPPING:", seen_bootstrapping)

        # kill the leader: whoever leads next holds every acknowledged row
        epoch0 = c.epoch()[0]
        assert leader is not None
        c.nodes.kill(leader)
        assert wait_until(lambda: c.epoch()[0] > epoch0 and c.leader() not in (None, leader), 90)
        live = [n for n in NODES if n != leader]
        assert wait_until(lambda: _holds(c, live, acked), 120), c.summary()
        c.nodes.start(leader)
        assert wait_until(lambda: c.converged(acked, sent), 180), c.summary()


def test_empty_replica_never_leads_with_missing_data(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    """The only live replica was wiped: it must catch up from the dead leader's channels before it
    leads (it used to lead at once, adopt what was left of the WAL channel and publish a first
    major without the older rows, which the other replicas then fast-forwarded)."""
    with Cluster3(tmp_path, cluster, zk_hosts, topic_prefix) as c:
        acked, sent = _written(c)
        leader = c.leader()
        assert leader is not None
        wiped, other = (n for n in NODES if n != leader)
        c.nodes.stop(other)
        c.nodes.stop(wiped)
        shutil.rmtree(c.nodes.data_dir(wiped))
        epoch0 = c.epoch()[0]
        c.nodes.kill(leader)
        c.nodes.start(wiped)
        assert wait_until(lambda: c.epoch()[0] > epoch0 and c.leader() == wiped, 120), c.epoch()
        assert wait_until(lambda: _holds(c, [wiped], acked), 60), c.summary()
        c.nodes.start(other)
        c.nodes.start(leader)
        assert wait_until(lambda: c.converged(acked, sent), 180), c.summary()


def _commit_unpublished_major(replica: PartitionReplica, epoch: int) -> str:
    """Commit a major of the chain since its latest major, as the compaction intake does, and
    delete what it folds, as the follower role does when it starts; nothing is published."""
    sid, folded = commit_local_major(replica, epoch=epoch)
    assert collect_on_follower(replica) == folded
    return sid


def test_an_old_leaders_unpublished_major_is_dropped_and_every_replica_converges(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    """An old leader committed a compaction and lost the leadership before publishing it (seen in
    CI: the compaction intake committed while a rebalance handed the partition over). The new
    leader never has that major; the old leader, now a follower, must give it up and converge on
    the leader's chain instead of differing for ever. The state is made exactly: the leader is
    stopped, a new one elected, and the major committed in the old leader's data dir offline."""
    with Cluster3(tmp_path, cluster, zk_hosts, topic_prefix) as c:
        acked, sent = _written(c)
        leader = c.leader()
        assert leader is not None
        placement = _placement(c, leader)
        epoch0 = c.epoch()[0]
        c.nodes.stop(leader)
        assert wait_until(lambda: c.epoch()[0] > epoch0 and c.leader() not in (None, leader), 90), c.epoch()
        replica = PartitionReplica(make_table(replication_factor=3), c.pid, placement, c.nodes.data_dir(leader))
        try:
            major = _commit_unpublished_major(replica, epoch0)
        finally:
            replica.close()
        c.nodes.start(leader)
        assert wait_until(lambda: c.converged(acked, sent), 180), c.summary()

        def one_chain() -> bool:  # the same rows are not enough: the leader's next segment must apply here
            chains = [(c.describe(n) or {}).get("chain") for n in NODES]
            return chains[0] is not None and all(ch == chains[0] for ch in chains) and major not in chains[0]

        assert wait_until(one_chain, 120), [c.describe(n) for n in NODES]
        d = c.describe(leader)
        assert d is not None and d["follower"]["rewinds"] >= 1, d["follower"]
        w = c.writer(first_key=10_000)  # and replication goes on through the old leader
        assert wait_until(lambda: len(w.acked) >= 100, 90), (len(w.acked), w.error)
        w.stop()
        acked |= set(w.acked)
        sent |= set(w.sent)
        assert wait_until(lambda: c.converged(acked, sent) and one_chain(), 180), c.summary()
