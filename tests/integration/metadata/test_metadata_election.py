"""Leader election with epochs on a real ZooKeeper: session expiry, suspension, eligibility, fencing."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from kazoo.protocol.states import KazooState
from metadata_it_support import close_client, expire_session, make_store, make_table, new_client

from metadata.coordinator import MetadataCoordinator
from metadata.discovery import ReplicaState
from metadata.election import RECHECK_S, STUCK_STEP_S, LeaderState, PartitionElection, read_epoch
from metadata.errors import LeadershipLostError, NotEligibleError
from metadata.metadata_file import PartitionEntry
from metadata.zk_layout import ZkLayout
from shoal.errors import StaleEpochError
from shoal.ids import new_partition_id
from shoal_app.testing.wait import wait_until


def _no_rows_acked(entry: PartitionEntry) -> dict[int, tuple[int, int] | None]:
    """SPLIT_FINALIZE evidence for a parent that accepted no row: every child placement, nothing to ack."""
    return {p.placement_id: None for p in entry.split_servers_low + entry.split_servers_high}


pytestmark = pytest.mark.integration


def test_expired_leader_is_replaced_with_higher_epoch(zk: Any, zk_hosts: str) -> None:
    pid = new_partition_id()
    a_client, b_client = new_client(zk_hosts), new_client(zk_hosts)
    a_events: list[LeaderState] = []
    try:
        a = PartitionElection(
            a_client, pid, "node-a", 1, replica_state=ReplicaState.LIVE, on_change=lambda s, _l: a_events.append(s)
        )
        b = PartitionElection(b_client, pid, "node-b", 2, replica_state=ReplicaState.LIVE)
        a.start()
        assert a.wait_for(LeaderState.LEADER, timeout=30)
        b.start()
        assert b.wait_for(LeaderState.CANDIDATE, timeout=30)
        lead_a = a.check_writable()
        assert lead_a.epoch == 1 and not b.is_leader
        with pytest.raises(LeadershipLostError):
            b.check_writable()

        expire_session(a_client, zk_hosts)

        assert b.wait_for(LeaderState.LEADER, timeout=60)
        lead_b = b.check_writable()
        assert lead_b.epoch == 2 > lead_a.epoch
        assert a.wait_for(LeaderState.LOST, timeout=60), a.state  # the old leader learns it lost
        with pytest.raises(LeadershipLostError):
            a.check_writable()
        assert LeaderState.LOST in a_events
        rec = read_epoch(zk, ZkLayout(), pid)
        assert (rec.epoch, rec.server_id, rec.placement_id) == (2, "node-b", 2)

        # the old leader campaigns again: it gets a new, higher epoch only after b is gone
        assert wait_until(lambda: a_client.state == KazooState.CONNECTED, 30)
        a.start()
        assert a.wait_for(LeaderState.CANDIDATE, timeout=30)
        b.resign()
        assert a.wait_for(LeaderState.LEADER, timeout=30)
        assert a.check_writable().epoch == 3
        a.close()
        b.close()
    finally:
        close_client(a_client)
        close_client(b_client)


def test_suspended_leader_stops_writes_and_resumes(zk: Any, zk_hosts: str) -> None:
    pid = new_partition_id()
    client = new_client(zk_hosts)
    try:
        e = PartitionElection(client, pid, "node-a", 7, replica_state=ReplicaState.LIVE)
        e.start()
        assert e.wait_for(LeaderState.LEADER, timeout=30)
        # kazoo calls listeners with these states; a SUSPENDED leader must not accept writes
        e._on_connection_state(KazooState.SUSPENDED)
        assert e.state is LeaderState.SUSPENDED
        with pytest.raises(LeadershipLostError):
            e.check_writable()
        # it verifies its candidacy and epoch, then resumes as a new leader role with a fresh epoch
        e._on_connection_state(KazooState.CONNECTED)
        assert e.wait_for(LeaderState.LEADER, timeout=30)
        assert e.check_writable().epoch == 2
        assert read_epoch(client, ZkLayout(), pid).epoch == 2
        e._on_connection_state(KazooState.LOST)
        assert e.state is LeaderState.LOST
        e.close()
    finally:
        close_client(client)


def test_many_elections_never_share_an_epoch(zk: Any, zk_hosts: str) -> None:
    pid = new_partition_id()
    clients = [new_client(zk_hosts) for _ in range(4)]
    epochs: list[int] = []
    try:
        elections = [
            PartitionElection(c, pid, f"node-{i}", i + 1, replica_state=ReplicaState.LIVE)
            for i, c in enumerate(clients)
        ]
        for e in elections:
            e.start()
        for _ in range(len(elections)):
            assert wait_until(lambda: sum(e.is_leader for e in elections) == 1, 30)
            leaders = [e for e in elections if e.is_leader]
            assert len(leaders) == 1
            epochs.append(leaders[0].check_writable().epoch)
            leaders[0].resign()
        assert epochs == [1, 2, 3, 4]
    finally:
        for c in clients:
            close_client(c)


def test_joining_replica_is_not_eligible_and_fenced_commits(cluster: Any, zk: Any, topic_prefix: str) -> None:
    with make_store(cluster, topic_prefix) as store:
        coord = MetadataCoordinator(zk, store)
        f = coord.create_table(make_table("elect", rf=1), ["node-1"])
        pid = f.partitions[0].partition_id
        f = coord.join("elect", pid, "node-2")
        joining = f.partitions[0].servers_joining[0]
        with pytest.raises(NotEligibleError):
            PartitionElection.for_file(zk, f, pid, "node-2", joining.placement_id).start()
        live = f.partitions[0].servers[0]
        leader = PartitionElection.for_file(zk, f, pid, "node-1", live.placement_id)
        leader.start()
        assert leader.wait_for(LeaderState.LEADER, timeout=30)
        fence = leader.check_writable().fence()
        f = coord.finalize_join("elect", pid, joining.placement_id, fence=fence)
        assert joining in f.partitions[0].servers
        # a new election supersedes the epoch: the old fence commits nothing more
        leader.resign()
        again = PartitionElection.for_file(zk, f, pid, "node-2", joining.placement_id)
        again.start()
        assert again.wait_for(LeaderState.LEADER, timeout=30)
        before = coord.head("elect")
        with pytest.raises(StaleEpochError):
            coord.finalize_split("elect", pid, acked=_no_rows_acked(coord.current("elect").partition(pid)), fence=fence)
        assert coord.head("elect").metadata_txnid == before.metadata_txnid
        again.close()
        desc = coord.partition_status(pid)
        assert desc.epoch == 2


def test_a_candidate_whose_watch_event_was_lost_leads_at_its_next_recheck(
    zk: Any, zk_hosts: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The liveness backstop (DESIGN.md section 7): a candidate waits for a one-shot watch on its
    predecessor; when that event never comes, the node's supervision tick (``recheck``) re-reads the
    line. Re-setting the watch never piles up callbacks, and a step that hangs is logged with its stack."""
    pid = new_partition_id()
    a_client, b_client = new_client(zk_hosts), new_client(zk_hosts)
    release, entered = threading.Event(), threading.Event()
    try:
        a = PartitionElection(a_client, pid, "node-a", 1, replica_state=ReplicaState.LIVE)
        a.start()
        assert a.wait_for(LeaderState.LEADER, timeout=30)
        b = PartitionElection(b_client, pid, "node-b", 2, replica_state=ReplicaState.LIVE)
        b.start()
        assert b.wait_for(LeaderState.CANDIDATE, timeout=30)
        pred = f"{b_client.chroot}{ZkLayout().election(pid)}/{a._node}"  # kazoo keys its watchers by full path
        assert wait_until(lambda: len(b_client._data_watchers[pred]) == 1, 30)
        for i in range(3):  # each recheck sets the watch again: still one callback
            b.recheck(now=time.monotonic() + 100 * (i + 1))
            time.sleep(0.5)
        assert len(b_client._data_watchers[pred]) == 1 and b.state is LeaderState.CANDIDATE

        b_client._data_watchers[pred].clear()  # the event is lost (as with a watch dropped by a fault)
        a.resign()
        time.sleep(2)
        assert b.state is LeaderState.CANDIDATE, "without the event nothing wakes the candidate"
        b.recheck()  # its last check is recent: not due yet
        time.sleep(1)
        assert b.state is LeaderState.CANDIDATE
        b.recheck(now=time.monotonic() + RECHECK_S)
        assert b.wait_for(LeaderState.LEADER, timeout=30)
        assert read_epoch(zk, ZkLayout(), pid).epoch == 2

        # a step that never returns (here a preference hook blocked on an event) is reported
        c = PartitionElection(
            b_client,
            new_partition_id(),
            "node-c",
            3,
            replica_state=ReplicaState.LIVE,
            prefer=lambda _line: 3 if entered.set() is None and release.wait(120) else None,
        )
        caplog.set_level(logging.WARNING, logger="metadata.election")
        c.start()
        assert entered.wait(30) and c._step is not None
        c.recheck(now=time.monotonic() + STUCK_STEP_S + 1)
        assert any("has run for" in r.getMessage() and "_should_yield" in r.getMessage() for r in caplog.records)
        release.set()
        assert c.wait_for(LeaderState.LEADER, timeout=30)
        c.close()
        b.close()
        a.close()
    finally:
        release.set()
        close_client(a_client)
        close_client(b_client)


def test_concurrent_starts_enter_the_line_once_and_an_own_stray_candidate_is_removed(
    zk: Any, zk_hosts: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A LOST election restarted by two threads at once (the node's handover and its supervision tick)
    enters the line once: a second candidate znode in the same live session, forgotten by the
    election, would stay first in line for ever and no replica would lead (seen in the random fault
    schedule: every node CANDIDATE for 6 minutes). A stray of its own session ahead of it is removed;
    one of another session (an older incarnation) is left to end with that session."""
    layout = ZkLayout()
    a_client, b_client = new_client(zk_hosts), new_client(zk_hosts)
    try:
        pid = new_partition_id()
        a = PartitionElection(a_client, pid, "node-a", 1, replica_state=ReplicaState.LIVE)
        go = threading.Event()
        starters = [threading.Thread(target=lambda: (go.wait(), a.start())) for _ in range(8)]
        for t in starters:
            t.start()
        go.set()
        for t in starters:
            t.join(30)
        assert a.wait_for(LeaderState.LEADER, timeout=30)
        assert len(a_client.get_children(layout.election(pid))) == 1
        a.close()

        # A stray of this session ahead of the candidate: removed, and the candidate leads.
        pid = new_partition_id()
        base = layout.election(pid)
        a_client.ensure_path(base)
        data = b'{"server_id": "node-a", "placement_id": 1}'
        stray = a_client.create(f"{base}/n_", data, ephemeral=True, sequence=True)
        caplog.set_level(logging.WARNING, logger="metadata.election")
        a = PartitionElection(a_client, pid, "node-a", 1, replica_state=ReplicaState.LIVE)
        a.start()
        assert a.wait_for(LeaderState.LEADER, timeout=30)
        assert a_client.exists(stray) is None
        assert any("stray candidate" in r.getMessage() for r in caplog.records)
        a.close()

        # The same identity's candidate in another session: not ours to remove; it leads first.
        pid = new_partition_id()
        base = layout.election(pid)
        b_client.ensure_path(base)
        other = b_client.create(f"{base}/n_", data, ephemeral=True, sequence=True)
        a = PartitionElection(a_client, pid, "node-a", 1, replica_state=ReplicaState.LIVE)
        a.start()
        time.sleep(2)
        assert a.state is LeaderState.CANDIDATE and b_client.exists(other) is not None
        b_client.delete(other)
        assert a.wait_for(LeaderState.LEADER, timeout=30)
        a.close()
    finally:
        close_client(a_client)
        close_client(b_client)
