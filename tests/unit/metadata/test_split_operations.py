"""SPLIT_PARTITION refusals and the SPLIT_FINALIZE evidence check (seed 000 section 3.8)."""

from __future__ import annotations

import pytest
from helpers_metadata import Ids, new_file

from metadata.errors import InvalidOperationError
from metadata.keyspace import Keyspace
from metadata.operations import FinalizeSplit, JoinServer, SplitConflictError, SplitNotAckedError, SplitPartition

U = Keyspace.UINT64.encode


def test_split_refusals_name_the_input_and_change_nothing() -> None:
    ids = Ids()
    f = new_file(split_points=(U(10), U(20)), ids=ids)
    mid = f.partitions[1].partition_id
    with pytest.raises(InvalidOperationError, match="equals a boundary"):
        SplitPartition(mid, U(10), ids.place("node-1", "node-2"), ids.place("node-1", "node-2")).apply(f)
    with pytest.raises(InvalidOperationError, match="25 is outside partition"):
        SplitPartition(mid, U(25), ids.place("node-1", "node-2"), ids.place("node-1", "node-2")).apply(f)
    split = SplitPartition(mid, U(15), ids.place("node-1", "node-2"), ids.place("node-1", "node-2")).apply(f)
    with pytest.raises(SplitConflictError, match="already splitting at 15") as info:
        SplitPartition(mid, U(17), ids.place("node-1", "node-2"), ids.place("node-1", "node-2")).apply(split)
    assert info.value.partition_id == mid and info.value.operation == "split"
    joining = JoinServer(mid, ids.place("node-3")[0]).apply(f)
    with pytest.raises(SplitConflictError, match="join or leave in progress") as info:
        SplitPartition(mid, U(15), ids.place("node-1", "node-2"), ids.place("node-1", "node-2")).apply(joining)
    assert info.value.operation == "join/leave"


def test_finalize_needs_every_child_placement_acked_through_the_parent_gtid() -> None:
    ids = Ids()
    f0 = new_file(ids=ids)
    pid = f0.partitions[0].partition_id
    s = SplitPartition(pid, U(100), ids.place("node-1", "node-2"), ids.place("node-2", "node-1"))
    f1 = s.apply(f0)
    children = [p.placement_id for p in s.split_servers_low + s.split_servers_high]
    with pytest.raises(SplitNotAckedError) as info:
        FinalizeSplit(pid).apply(f1)
    assert info.value.partition_id == pid and set(info.value.missing) == set(children)
    behind = {**dict.fromkeys(children, (3, 50)), children[2]: (3, 49)}
    with pytest.raises(SplitNotAckedError, match=r"acked \(3, 49\)") as info:
        FinalizeSplit(pid, (3, 50), behind).apply(f1)
    assert info.value.through == (3, 50) and info.value.missing == {children[2]: (3, 49)}
    with pytest.raises(SplitNotAckedError):
        FinalizeSplit(pid, (3, 50), {**dict.fromkeys(children, (3, 50)), children[0]: None}).apply(f1)
    ok = FinalizeSplit(pid, (3, 50), {**dict.fromkeys(children, (3, 50)), children[0]: (4, 0)}).apply(f1)
    assert [e.partition_id for e in ok.partitions] == [s.split_partition_id_low, s.split_partition_id_high]
