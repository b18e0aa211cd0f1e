"""A leadership granted while the ZooKeeper connection is SUSPENDED is not writable (DESIGN.md
section 7; kazoo: nothing is trusted while SUSPENDED): it starts SUSPENDED, and the next CONNECTED
verifies it and renews its epoch.

kazoo's listener can report SUSPENDED between an election step's last ZooKeeper answer (the epoch
bump, or a resumed leader's renewal) and the step setting LEADER; the listener flipped only a LEADER
state, so the step then handed out a writable leadership on a dropped connection, never verified at
the reconnect (an audit's proof). :class:`~metadata.election.PartitionElection` on an in-memory
ZooKeeper."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.protocol.states import KazooState
from test_election_in_sync import FakeZk

from metadata.discovery import ReplicaState
from metadata.election import LeaderState, PartitionElection, read_epoch
from metadata.errors import LeadershipLostError
from metadata.zk_layout import ZkLayout
from shoal.ids import new_partition_id
from shoal.worker import poll_until

LAYOUT = ZkLayout()


class _DroppingZk(FakeZk):
    """Its connection drops (SUSPENDED to the listeners) right after the next transaction is answered."""

    def __init__(self) -> None:
        super().__init__()
        self.listeners: list[Any] = []
        self.drop_after_next_txn = False

    def add_listener(self, fn: Any) -> None:
        self.listeners.append(fn)

    def remove_listener(self, fn: Any) -> None:
        if fn in self.listeners:
            self.listeners.remove(fn)

    def connection(self, state: str) -> None:
        for fn in list(self.listeners):
            fn(state)

    def _commit(self, ops: list[Any]) -> list[Any]:
        out = super()._commit(ops)
        if self.drop_after_next_txn:
            self.drop_after_next_txn = False
            self.connection(KazooState.SUSPENDED)  # before the election thread acts on the answer
        return out


def _writable(election: PartitionElection) -> bool:
    try:
        election.check_writable()
    except LeadershipLostError:
        return False
    return True


@pytest.fixture
def zk_pid() -> tuple[_DroppingZk, str]:
    zk, pid = _DroppingZk(), new_partition_id()
    zk.ensure_path(LAYOUT.election(pid))
    return zk, pid


def test_a_leadership_won_as_the_connection_drops_is_not_writable_until_verified(
    zk_pid: tuple[_DroppingZk, str],
) -> None:
    zk, pid = zk_pid
    election = PartitionElection(zk, pid, "node-1", 1, replica_state=ReplicaState.LIVE, layout=LAYOUT)
    try:
        zk.drop_after_next_txn = True  # the epoch bump is answered, then the link drops
        election.start()
        assert election.wait_for(LeaderState.LEADER, LeaderState.SUSPENDED, timeout=5)
        assert election.state is LeaderState.SUSPENDED and not _writable(election)
        won = read_epoch(zk, LAYOUT, pid).epoch
        zk.connection(KazooState.CONNECTED)
        assert election.wait_for(LeaderState.LEADER, timeout=5)
        assert _writable(election) and election.check_writable().epoch == won + 1  # renewed, not trusted
    finally:
        election.close()


def test_a_leadership_renewed_as_the_connection_drops_again_is_not_writable(zk_pid: tuple[_DroppingZk, str]) -> None:
    zk, pid = zk_pid
    election = PartitionElection(zk, pid, "node-1", 1, replica_state=ReplicaState.LIVE, layout=LAYOUT)
    try:
        election.start()
        assert election.wait_for(LeaderState.LEADER, timeout=5)
        first = election.check_writable().epoch
        zk.connection(KazooState.SUSPENDED)
        assert election.state is LeaderState.SUSPENDED
        zk.drop_after_next_txn = True  # the renewal at the reconnect is answered, then the link drops again
        zk.connection(KazooState.CONNECTED)  # _verify runs on its own thread: wait for its renewal
        assert poll_until(lambda: read_epoch(zk, LAYOUT, pid).epoch == first + 1, 5)
        with election._work:  # the step that renewed it has ended
            pass
        renewed = read_epoch(zk, LAYOUT, pid).epoch
        assert renewed == first + 1 and election.state is LeaderState.SUSPENDED and not _writable(election)
        zk.connection(KazooState.CONNECTED)
        assert election.wait_for(LeaderState.LEADER, timeout=5)
        assert election.check_writable().epoch == renewed + 1
    finally:
        election.close()
