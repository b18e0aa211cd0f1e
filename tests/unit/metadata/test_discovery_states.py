from __future__ import annotations

from helpers_metadata import Ids, new_file

from metadata.discovery import HeldReplica, ReplicaState, discover, discover_one, transition_allowed
from metadata.keyspace import UNBOUNDED, KeyRange, Keyspace
from metadata.operations import FinalizeJoin, FinalizeSplit, JoinServer, LeaveServer, SplitPartition

U = Keyspace.UINT64.encode
FULL = KeyRange(UNBOUNDED, UNBOUNDED)


def test_lifecycle_transitions() -> None:
    S = ReplicaState
    assert transition_allowed(S.LOAD, S.LIVE) and transition_allowed(S.LOAD, S.UNLOAD)
    assert transition_allowed(S.LIVE, S.UNLOAD) and not transition_allowed(S.LIVE, S.LOAD)
    assert transition_allowed(S.UNLOAD, S.UNLOAD_FINAL) and not transition_allowed(S.UNLOAD, S.LIVE)
    assert not any(transition_allowed(S.UNLOAD_FINAL, s) for s in (S.LOAD, S.LIVE, S.UNLOAD))


def test_live_and_should_hold() -> None:
    f = new_file(rf=2)
    entry = f.partitions[0]
    p1, p2 = entry.servers
    # node-1 holds nothing yet: it should hold the partition, LIVE, pushing to node-2
    (d,) = discover(f, "node-1")
    assert d.state is ReplicaState.LIVE and d.partition_id == entry.partition_id and d.placement_id == p1.placement_id
    assert [t.placement for t in d.targets] == [p2]
    assert d.eligible_for_election and d.txnid == f.txnid
    held = HeldReplica(entry.partition_id, p1.placement_id, FULL)
    assert discover(f, "node-1", [held]) == [d]
    assert discover(f, "node-9") == []


def test_join_is_load_then_live_and_not_eligible() -> None:
    ids = Ids()
    f = new_file(rf=2, ids=ids)
    pid = f.partitions[0].partition_id
    (p3,) = ids.place("node-3")
    f = JoinServer(pid, p3).apply(f)
    (d,) = discover(f, "node-3")
    assert d.state is ReplicaState.LOAD and not d.eligible_for_election
    # the leader's targets include the joining server
    live = discover(f, "node-1")[0]
    assert p3 in [t.placement for t in live.targets]
    f = FinalizeJoin(pid, p3.placement_id).apply(f)
    assert discover_one(f, "node-3", HeldReplica(pid, p3.placement_id, FULL)).state is ReplicaState.LIVE


def test_leave_is_unload_then_final() -> None:
    ids = Ids()
    f = new_file(rf=2, ids=ids)
    pid = f.partitions[0].partition_id
    p1 = f.partitions[0].servers[0]
    f = JoinServer(pid, ids.place("node-3")[0]).apply(f)
    f = LeaveServer(pid, "node-1", allow_under_replication=True).apply(f)  # node-3 is still joining
    held = HeldReplica(pid, p1.placement_id, FULL)
    d = discover_one(f, "node-1", held)
    assert d.state is ReplicaState.UNLOAD
    assert {t.placement.server_id for t in d.targets} == {"node-2", "node-3"}
    done = HeldReplica(pid, p1.placement_id, FULL, all_data_pushed=True)
    assert discover_one(f, "node-1", done).state is ReplicaState.UNLOAD_FINAL


def test_aba_old_placement_is_unload() -> None:
    ids = Ids()
    f = new_file(rf=2, ids=ids)
    pid = f.partitions[0].partition_id
    p1 = f.partitions[0].servers[0]
    f = LeaveServer(pid, "node-1", allow_under_replication=True).apply(f)
    (p1b,) = ids.place("node-1")
    f = JoinServer(pid, p1b).apply(f)
    results = discover(f, "node-1", [HeldReplica(pid, p1.placement_id, FULL)])
    states = {(r.placement_id, r.state) for r in results}
    assert states == {(p1.placement_id, ReplicaState.UNLOAD), (p1b.placement_id, ReplicaState.LOAD)}


def test_split_targets_children_load_then_parent_unload() -> None:
    ids = Ids()
    f = new_file(rf=2, ids=ids)
    parent = f.partitions[0]
    p1 = parent.servers[0]
    low, high = ids.place("node-1", "node-3"), ids.place("node-3", "node-2")
    s = SplitPartition(parent.partition_id, U(1000), low, high)
    f = s.apply(f)
    held_parent = HeldReplica(parent.partition_id, p1.placement_id, FULL)
    d = discover_one(f, "node-1", held_parent)
    assert d.state is ReplicaState.LIVE and d.splitting
    by_pid = {(t.partition_id, t.placement.server_id): t.key_range for t in d.targets}
    assert by_pid[(s.split_partition_id_low, "node-3")] == KeyRange(UNBOUNDED, U(1000))
    assert by_pid[(s.split_partition_id_high, "node-3")] == KeyRange(U(1000), UNBOUNDED)
    # node-3 should build both children, in LOAD
    n3 = {r.partition_id: r.state for r in discover(f, "node-3")}
    assert n3 == {s.split_partition_id_low: ReplicaState.LOAD, s.split_partition_id_high: ReplicaState.LOAD}
    f = FinalizeSplit(parent.partition_id, None, {p.placement_id: None for p in low + high}).apply(f)
    d = discover_one(f, "node-1", held_parent)
    assert d.state is ReplicaState.UNLOAD
    assert {(t.partition_id, t.key_range) for t in d.targets} == {
        (s.split_partition_id_low, KeyRange(UNBOUNDED, U(1000))),
        (s.split_partition_id_high, KeyRange(U(1000), UNBOUNDED)),
    }
    held_child = HeldReplica(s.split_partition_id_low, low[1].placement_id, KeyRange(UNBOUNDED, U(1000)))
    assert discover_one(f, "node-3", held_child).state is ReplicaState.LIVE
