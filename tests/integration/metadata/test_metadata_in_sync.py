"""The in-sync set in a real ZooKeeper: written only with the current leader epoch (metadata.in_sync)."""

from __future__ import annotations

from typing import Any

import pytest
from metadata_it_support import close_client, new_client

from metadata.discovery import ReplicaState
from metadata.election import LeaderState, PartitionElection
from metadata.in_sync import PartitionInSync, in_sync, read_in_sync, write_out_of_sync
from metadata.zk_layout import ZkLayout
from shoal.errors import StaleEpochError
from shoal.ids import new_partition_id

pytestmark = pytest.mark.integration


def test_only_the_current_leader_changes_the_in_sync_set(zk: Any, zk_hosts: str) -> None:
    pid, layout = new_partition_id(), ZkLayout()
    other = new_client(zk_hosts)
    try:
        a = PartitionElection(zk, pid, "node-a", 1, replica_state=ReplicaState.LIVE)
        b = PartitionElection(other, pid, "node-b", 2, replica_state=ReplicaState.LIVE)
        a.start()
        assert a.wait_for(LeaderState.LEADER, timeout=30)
        b.start()
        assert b.wait_for(LeaderState.CANDIDATE, timeout=30)
        old = a.check_writable().fence()
        assert in_sync(zk, layout, pid, [1, 2, 3]) == (1, 2, 3)  # no record: every replica in sync

        store = PartitionInSync(zk, layout, pid, 1, lambda: a.check_writable().fence())
        assert store.alive() == {1, 2}
        assert store.mark([3]) == {3}
        rec = read_in_sync(zk, layout, pid)
        assert (rec.out_of_sync, rec.epoch, rec.placement_id) == ({3}, old.epoch, 1)
        assert in_sync(zk, layout, pid, [1, 2, 3]) == (1, 2)

        # a new leader takes over: the old one's fence is stale and changes nothing
        a.resign()
        assert b.wait_for(LeaderState.LEADER, timeout=30)
        with pytest.raises(StaleEpochError):
            write_out_of_sync(zk, layout, old, 1, [2])
        assert read_in_sync(zk, layout, pid).out_of_sync == {3}
        new = write_out_of_sync(other, layout, b.check_writable().fence(), 2, [1])
        assert (new.out_of_sync, new.placement_id) == ({1}, 2)
        assert store.out_of_sync() == {1}
        a.close()
        b.close()
    finally:
        close_client(other)
