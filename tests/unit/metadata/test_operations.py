from __future__ import annotations

import pytest
from helpers_metadata import Ids, new_file, table

from metadata.errors import InvalidKeyError, InvalidOperationError, UnknownPartitionError
from metadata.keyspace import UNBOUNDED, Keyspace
from metadata.metadata_file import ChangeType, Placement
from metadata.operations import (
    FinalizeJoin,
    FinalizeLeave,
    FinalizeSplit,
    ForceJoin,
    JoinServer,
    LeaveServer,
    SplitPartition,
    create_file,
)

U = Keyspace.UINT64.encode


def test_create_one_partition_covers_keyspace() -> None:
    f = new_file()
    assert f.sequence == 1 and f.parent_txnid is None and f.change is ChangeType.CREATE_TABLE
    assert len(f.partitions) == 1 and f.partitions[0].begin == UNBOUNDED
    assert f.range_of(0).end == UNBOUNDED


def test_create_k_partitions_from_split_points() -> None:
    f = new_file(split_points=(U(10), U(20), U(30)))
    assert [e.begin for e in f.partitions] == [UNBOUNDED, U(10), U(20), U(30)]
    ids = Ids()
    t = table(rf=1)
    with pytest.raises(InvalidOperationError, match="strictly increasing"):
        create_file(t, [ids.place("node-1") for _ in range(3)], [U(20), U(10)])
    with pytest.raises(InvalidOperationError):
        create_file(t, [ids.place("node-1") for _ in range(2)], [UNBOUNDED])
    with pytest.raises(InvalidOperationError, match="server lists"):
        create_file(t, [ids.place("node-1")], [U(5)])
    with pytest.raises(InvalidOperationError, match="replication factor"):
        create_file(t, [ids.place("node-1", "node-2")])
    with pytest.raises(InvalidOperationError, match="twice"):
        create_file(table(rf=2), [ids.place("node-1", "node-1")])


def test_split_then_finalize() -> None:
    ids = Ids()
    f0 = new_file(ids=ids)
    pid = f0.partitions[0].partition_id
    s = SplitPartition(pid, U(100), ids.place("node-1", "node-2"), ids.place("node-2", "node-1"))
    f1 = s.apply(f0)
    assert f1.sequence == 2 and f1.parent_txnid == f0.txnid and f1.txnid != f0.txnid
    assert f1.partitions[0].splitting and f1.partitions[0].split_point == U(100)
    with pytest.raises(InvalidOperationError, match="already splitting"):
        SplitPartition(pid, U(50), ids.place("node-1", "node-2"), ids.place("node-1", "node-2")).apply(f1)
    children = [p.placement_id for p in s.split_servers_low + s.split_servers_high]
    f2 = FinalizeSplit(pid, (1, 9), dict.fromkeys(children, (1, 9))).apply(f1)
    assert [e.partition_id for e in f2.partitions] == [s.split_partition_id_low, s.split_partition_id_high]
    assert f2.partitions[1].begin == U(100)
    assert f2.partitions[0].servers == s.split_servers_low
    with pytest.raises(UnknownPartitionError):
        FinalizeSplit(pid, None, dict.fromkeys(children)).apply(f2)
    with pytest.raises(InvalidOperationError, match="not splitting"):
        FinalizeSplit(f2.partitions[0].partition_id).apply(f2)


def test_split_point_must_be_strictly_inside() -> None:
    ids = Ids()
    f = new_file(split_points=(U(10), U(20)), ids=ids)
    mid = f.partitions[1].partition_id
    for point in (U(10), U(20), U(5), U(25), UNBOUNDED):
        with pytest.raises(InvalidOperationError):
            SplitPartition(mid, point, ids.place("node-1", "node-2"), ids.place("node-1", "node-2")).apply(f)
    # the lowest key: the partition below a split at 0 could hold no key, for ever
    low = f.partitions[0].partition_id
    with pytest.raises(InvalidOperationError, match="lowest key"):
        SplitPartition(low, U(0), ids.place("node-1", "node-2"), ids.place("node-1", "node-2")).apply(f)
    with pytest.raises(InvalidOperationError, match="lowest key"):
        new_file(split_points=(U(0), U(10)), ids=Ids())
    with pytest.raises(InvalidKeyError, match="lowest key"):
        Keyspace.UINT64.validate_split_point(Keyspace.UINT64.parse_text("0"))
    assert Keyspace.UINT64.validate_split_point(U(1)) == U(1)
    with pytest.raises(InvalidKeyError, match="lowest key"):
        Keyspace.STRING.validate_split_point(Keyspace.STRING.parse_text(""))
    with pytest.raises(Exception, match="8 bytes"):
        SplitPartition(mid, b"\x01", ids.place("node-1", "node-2"), ids.place("node-1", "node-2")).apply(f)
    # reused placement ids are refused (ABA)
    used = f.partitions[0].servers
    with pytest.raises(InvalidOperationError, match="placement id"):
        SplitPartition(mid, U(15), used, ids.place("node-1", "node-2")).apply(f)


def test_join_finalize_leave_force_join() -> None:
    ids = Ids()
    f = new_file(rf=2, ids=ids)
    pid = f.partitions[0].partition_id
    (p3,) = ids.place("node-3")
    f = JoinServer(pid, p3).apply(f)
    assert f.partitions[0].servers_joining == (p3,)
    with pytest.raises(InvalidOperationError, match="already"):
        JoinServer(pid, ids.place("node-3")[0]).apply(f)
    with pytest.raises(InvalidOperationError):
        FinalizeJoin(pid, 999).apply(f)
    f = FinalizeJoin(pid, p3.placement_id).apply(f)
    assert p3 in f.partitions[0].servers and not f.partitions[0].servers_joining
    f = LeaveServer(pid, "node-1").apply(f)
    assert [p.server_id for p in f.partitions[0].servers] == ["node-2", "node-3"]
    assert [p.server_id for p in f.partitions[0].servers_leaving] == ["node-1"]
    with pytest.raises(InvalidOperationError, match="replication factor"):
        LeaveServer(pid, "node-2").apply(f)
    f = LeaveServer(pid, "node-2", allow_under_replication=True).apply(f)
    with pytest.raises(InvalidOperationError, match="last live server"):
        LeaveServer(pid, "node-3", allow_under_replication=True).apply(f)
    with pytest.raises(InvalidOperationError, match="does not serve"):
        LeaveServer(pid, "node-1").apply(f)
    # a server that left may come back, with a new placement id
    (p1b,) = ids.place("node-1")
    f = ForceJoin(pid, p1b).apply(f)
    assert f.change is ChangeType.FORCE_JOIN and p1b in f.partitions[0].servers
    leaving = f.partitions[0].servers_leaving[0]
    f = FinalizeLeave(pid, leaving.placement_id).apply(f)
    assert leaving not in f.partitions[0].servers_leaving
    with pytest.raises(InvalidOperationError):
        FinalizeLeave(pid, leaving.placement_id).apply(f)
    with pytest.raises(InvalidOperationError, match="placement id"):
        JoinServer(pid, Placement("node-7", p1b.placement_id)).apply(f)


def test_a_joining_replica_does_not_count_toward_the_replication_factor() -> None:
    """Removing a LIVE replica while its replacement still catches up left fewer copies than the
    replication factor (for good, if the join never finished). Cancelling the join stays possible."""
    ids = Ids()
    f = new_file(rf=3, ids=ids)
    pid = f.partitions[0].partition_id
    (p4,) = ids.place("node-4")
    f = JoinServer(pid, p4).apply(f)
    with pytest.raises(InvalidOperationError, match=r"2 LIVE replica\(s\), below the replication factor 3 \(1 more"):
        LeaveServer(pid, "node-1").apply(f)
    cancelled = LeaveServer(pid, "node-4").apply(f)
    assert cancelled.partitions[0].servers_leaving == (p4,) and len(cancelled.partitions[0].servers) == 3
    f = FinalizeJoin(pid, p4.placement_id).apply(f)
    f = LeaveServer(pid, "node-1").apply(f)
    assert [p.server_id for p in f.partitions[0].servers] == ["node-2", "node-3", "node-4"]


def test_unknown_partition() -> None:
    f = new_file()
    with pytest.raises(UnknownPartitionError):
        JoinServer("0" * 32, Placement("node-5", 99)).apply(f)
