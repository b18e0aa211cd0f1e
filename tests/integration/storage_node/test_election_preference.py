"""The election prefers the most advanced replica (TokuMX failover), and always ends."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from kazoo.client import KazooClient

from metadata.discovery import ReplicaState
from metadata.election import Candidate, LeaderState, PartitionElection
from shoal.ids import new_partition_id

pytestmark = pytest.mark.integration


def _client(zk_hosts: str) -> KazooClient:
    c = KazooClient(hosts=zk_hosts, timeout=10)
    c.start(30)
    return c


def test_first_in_line_yields_to_the_preferred_candidate(zk_hosts: str) -> None:
    pid = new_partition_id()
    clients = [_client(zk_hosts) for _ in range(3)]
    try:
        # a holds the line while b and c queue; then a resigns: b is next in line but c is preferred
        a = PartitionElection(clients[0], pid, "node-a", 1, replica_state=ReplicaState.LIVE)
        a.start()
        assert a.wait_for(LeaderState.LEADER, timeout=30)

        def prefer(line: Sequence[Candidate]) -> int | None:
            return 3

        b = PartitionElection(clients[1], pid, "node-b", 2, replica_state=ReplicaState.LIVE, prefer=prefer)
        c = PartitionElection(clients[2], pid, "node-c", 3, replica_state=ReplicaState.LIVE, prefer=prefer)
        b.start()
        assert b.wait_for(LeaderState.CANDIDATE, timeout=30)
        c.start()
        assert c.wait_for(LeaderState.CANDIDATE, timeout=30)
        a.resign()
        assert c.wait_for(LeaderState.LEADER, timeout=30)
        assert b.state is LeaderState.CANDIDATE and c.check_writable().epoch == 2

        # a preference that never settles cannot stall the election: yields are bounded
        flip: list[int] = []

        def stubborn(line: Sequence[Candidate]) -> int | None:
            flip.append(1)
            return next(x.placement_id for x in line if x.placement_id != line[0].placement_id)

        d = PartitionElection(
            clients[0], new_partition_id(), "node-a", 4, replica_state=ReplicaState.LIVE, prefer=stubborn, max_yields=2
        )
        e = PartitionElection(
            clients[1], d.partition_id, "node-b", 5, replica_state=ReplicaState.LIVE, prefer=stubborn, max_yields=2
        )
        d.start()
        e.start()
        assert d.wait_for(LeaderState.LEADER, timeout=30) or e.wait_for(LeaderState.LEADER, timeout=30)
        assert flip
        for x in (b, c, d, e):
            x.close()
    finally:
        for cl in clients:
            cl.stop()
            cl.close()
