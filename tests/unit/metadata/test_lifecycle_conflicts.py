"""Joins, leaves and force-joins refuse to run while the partition splits (LifecycleConflictError, nothing changes)."""

from __future__ import annotations

import pytest
from helpers_metadata import Ids, new_file

from metadata.operations import (
    FinalizeSplit,
    ForceJoin,
    JoinServer,
    LeaveServer,
    LifecycleConflictError,
    SplitPartition,
)


def test_join_and_leave_wait_for_a_split() -> None:
    ids = Ids()
    f = new_file(rf=2, ids=ids)
    pid = f.partitions[0].partition_id
    point = (100).to_bytes(8, "big")
    with pytest.raises(LifecycleConflictError, match="already in servers"):
        ForceJoin(pid, ids.place("node-2")[0]).apply(f)
    f = SplitPartition(pid, point, ids.place("node-1", "node-2"), ids.place("node-1", "node-2")).apply(f)
    with pytest.raises(LifecycleConflictError, match=f"cannot add server node-3: partition {pid} is splitting") as info:
        JoinServer(pid, ids.place("node-3")[0]).apply(f)
    assert (info.value.partition_id, info.value.server_id, info.value.conflict) == (pid, "node-3", "splitting")
    with pytest.raises(LifecycleConflictError, match="cannot remove server node-1"):
        LeaveServer(pid, "node-1").apply(f)
    # a force-join would be dropped by the finalize, which keeps the placements the split chose
    with pytest.raises(LifecycleConflictError, match="cannot force-join server node-3"):
        ForceJoin(pid, ids.place("node-3")[0]).apply(f)
    entry = f.partition(pid)
    children = [p.placement_id for p in (*entry.split_servers_low, *entry.split_servers_high)]
    assert FinalizeSplit(pid, (1, 9), dict.fromkeys(children, (1, 9))).apply(f).sequence == f.sequence + 1
