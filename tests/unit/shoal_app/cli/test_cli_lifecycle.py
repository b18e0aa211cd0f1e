"""Bad input to the lifecycle commands: a clear error naming the input, and nothing committed."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from kazoo.exceptions import NoNodeError

from metadata.errors import InvalidOperationError
from metadata.metadata_file import MetadataFile, Placement
from metadata.operations import (
    FinalizeJoin,
    JoinServer,
    LeaveServer,
    LifecycleConflictError,
    SplitPartition,
    create_file,
)
from metadata.table import Column, ColumnType, TableDefinition
from metadata.zk_layout import ZkLayout
from shoal_app.cli.node import DrainError, plan_drain
from shoal_app.cli.table import (
    OnlyInSyncReplicaError,
    UnknownPartitionArgError,
    UnknownServerError,
    add_replica,
    remove_replica,
    replica_state,
    resolve_partition,
)


def new_file(rf: int = 2, split_points: tuple[bytes, ...] = ()) -> MetadataFile:
    table = TableDefinition("events", (Column("k", ColumnType.UINT64, False),), ("k",), "k", rf)
    ids = itertools.count(1)
    servers = [[Placement(f"node-{i}", next(ids)) for i in range(1, rf + 1)] for _ in range(len(split_points) + 1)]
    return create_file(table, servers, split_points)


class FakeCoordinator:
    """Applies changes like the real one (apply before any store), recording what was committed."""

    def __init__(self, file: MetadataFile) -> None:
        self.file = file
        self.committed: list[str] = []

    def current(self, _table: str) -> MetadataFile:
        return self.file

    def join(self, _table: str, pid: str, server: str) -> MetadataFile:
        placement = Placement(server, max(self.file.placement_ids()) + 1)  # the ZooKeeper counter's part
        self.file = JoinServer(pid, placement).apply(self.file)
        self.committed.append("join")
        return self.file

    def finalize_join(self, pid: str, placement_id: int) -> MetadataFile:
        self.file = FinalizeJoin(pid, placement_id).apply(self.file)
        self.committed.append("finalize_join")
        return self.file

    def leave(self, _table: str, pid: str, server: str, *, allow_under_replication: bool = False) -> MetadataFile:
        self.file = LeaveServer(pid, server, allow_under_replication).apply(self.file)
        self.committed.append("leave")
        return self.file


class FakeZk:
    """The registered nodes, and the in-sync records (none: every replica in sync)."""

    def __init__(self, nodes: list[str]) -> None:
        self.nodes = nodes
        self.in_sync: dict[str, bytes] = {}

    def get_children(self, _path: str) -> list[str]:
        return self.nodes

    def get(self, path: str) -> tuple[bytes, Any]:
        if path not in self.in_sync:
            raise NoNodeError(path)
        return self.in_sync[path], type("Stat", (), {"version": 1})()


class FakeClient:
    def __init__(self, file: MetadataFile, nodes: list[str]) -> None:
        self.coordinator = FakeCoordinator(file)
        self.zk = FakeZk(nodes)
        self.layout = ZkLayout()


def _client(rf: int = 2, nodes: tuple[str, ...] = ("node-1", "node-2", "node-3")) -> tuple[Any, str]:
    file = new_file(rf=rf)
    return FakeClient(file, list(nodes)), file.partitions[0].partition_id


def test_add_and_remove_a_replica() -> None:
    client, pid = _client()
    file, placement = add_replica(client, "events", pid[:6], "node-3")
    assert replica_state(file, pid, placement.placement_id) == "LOAD"
    with pytest.raises(InvalidOperationError, match="not LIVE yet"):
        remove_replica(client, "events", pid, "node-1")
    client.coordinator.finalize_join(pid, placement.placement_id)  # the leader, once node-3 caught up
    file, left = remove_replica(client, "events", pid, "node-1")
    assert replica_state(file, pid, left.placement_id) == "UNLOAD"
    assert replica_state(file, pid, 999) == "REMOVED"


def test_a_replica_below_the_replication_factor_is_removed_only_when_allowed() -> None:
    """The in-sync replicas' nodes gone for good: the operator removes them so that an out-of-sync
    replica may lead (DESIGN.md section 7), below the replication factor only when told so."""
    client, pid = _client(rf=3)
    with pytest.raises(InvalidOperationError, match="below the replication factor 3"):
        remove_replica(client, "events", pid, "node-1")
    assert client.coordinator.committed == []
    file, left = remove_replica(client, "events", pid, "node-1", allow_under_replication=True)
    assert replica_state(file, pid, left.placement_id) == "UNLOAD"
    assert [p.server_id for p in file.partition(pid).servers] == ["node-2", "node-3"]


def test_a_server_removed_added_back_and_removed_again_reports_the_placement_it_just_left() -> None:
    """Still leaving under its old placement, node-1 is added back and removed again: the command
    named the old placement, and ``--wait`` could see it REMOVED while the new one still held data
    (an audit's proof)."""
    client, pid = _client()
    coord = client.coordinator
    _, third = add_replica(client, "events", pid, "node-3")
    coord.finalize_join(pid, third.placement_id)
    _, old = remove_replica(client, "events", pid, "node-1")
    _, back = add_replica(client, "events", pid, "node-1")
    coord.finalize_join(pid, back.placement_id)
    file, left = remove_replica(client, "events", pid, "node-1")
    assert {p.placement_id for p in file.partition(pid).servers_leaving} == {old.placement_id, back.placement_id}
    assert left.placement_id == back.placement_id


def test_unknown_server_is_refused_and_nothing_changes() -> None:
    client, pid = _client()
    with pytest.raises(UnknownServerError, match="unknown server 'node-9'") as info:
        add_replica(client, "events", pid, "node-9")
    assert info.value.server_id == "node-9" and "node-3" in info.value.known
    with pytest.raises(UnknownServerError, match="node-9"):
        remove_replica(client, "events", pid, "node-9")
    assert client.coordinator.committed == []


def test_unknown_partition_names_the_input() -> None:
    client, _pid = _client()
    with pytest.raises(UnknownPartitionArgError, match="'ffff' is not a partition of table events"):
        add_replica(client, "events", "ffff", "node-3")
    assert client.coordinator.committed == []
    file = client.coordinator.file
    assert resolve_partition(file, file.partitions[0].partition_id) == file.partitions[0].partition_id


def test_adding_a_server_already_listed_is_refused() -> None:
    client, pid = _client()
    with pytest.raises(LifecycleConflictError, match="server node-1 is already in servers of partition") as info:
        add_replica(client, "events", pid, "node-1")
    assert (info.value.server_id, info.value.conflict) == ("node-1", "servers")
    add_replica(client, "events", pid, "node-3")
    with pytest.raises(LifecycleConflictError, match="node-3 is already in servers_joining"):
        add_replica(client, "events", pid, "node-3")
    assert client.coordinator.committed == ["join"]


def test_removing_the_last_replica_is_refused() -> None:
    client, pid = _client(rf=1)
    with pytest.raises(InvalidOperationError, match="node-1 is the last live server of partition"):
        remove_replica(client, "events", pid, "node-1")
    assert client.coordinator.committed == []


def test_a_second_leave_of_the_same_server_conflicts() -> None:
    client, pid = _client()
    _file, placement = add_replica(client, "events", pid, "node-3")
    client.coordinator.finalize_join(pid, placement.placement_id)
    remove_replica(client, "events", pid, "node-1")
    with pytest.raises(
        LifecycleConflictError, match=r"node-1 does not serve partition .*: it is already leaving"
    ) as info:
        remove_replica(client, "events", pid, "node-1")
    assert info.value.conflict == "servers_leaving"
    assert client.coordinator.committed == ["join", "finalize_join", "leave"]


def test_drain_plan_moves_leaders_last_and_refuses_when_no_server_is_free() -> None:
    f = new_file(rf=2, split_points=((100).to_bytes(8, "big"),))
    leaders = {e.partition_id: e.servers[0].placement_id for e in f.partitions}
    moves = plan_drain([f], "node-1", ["node-1", "node-2", "node-3"], leaders)
    assert [m.was_leader for m in moves] == sorted(m.was_leader for m in moves)
    assert all(m.to_server == "node-3" for m in moves)
    with pytest.raises(DrainError, match="unknown server 'node-7'"):
        plan_drain([f], "node-7", ["node-1", "node-2"], leaders)
    with pytest.raises(DrainError, match="has no running server to move to"):
        plan_drain([f], "node-1", ["node-1", "node-2"], leaders)
    # a splitting partition refuses joins and leaves: the drain is refused before committing any move
    # (it committed the joins planned before that partition, then failed)
    high = f.partitions[1]
    split = SplitPartition(
        high.partition_id,
        (200).to_bytes(8, "big"),
        (Placement("node-1", 90), Placement("node-2", 91)),
        (Placement("node-1", 92), Placement("node-2", 93)),
    ).apply(f)
    with pytest.raises(DrainError, match=f"partition {high.partition_id} of events is splitting"):
        plan_drain([split], "node-1", ["node-1", "node-2", "node-3"], leaders)


def test_a_drain_run_again_after_its_join_finishes_the_move_instead_of_adding_another() -> None:
    """A drain stopped between its join and its leave (a killed CLI, a join slower than --timeout,
    a ZooKeeper ConnectionLoss): the next run reuses the replica that joined, whether it is still
    joining or LIVE already, and only removes the drained one; it added a second replica (four
    nodes) or refused with no server to move to (three)."""
    f = new_file(rf=2)
    pid = f.partitions[0].partition_id
    joining = JoinServer(pid, Placement("node-3", 3)).apply(f)
    live = FinalizeJoin(pid, 3).apply(joining)
    leaders = {pid: 2}
    for nodes in (["node-1", "node-2", "node-3"], ["node-1", "node-2", "node-3", "node-4"]):
        (moved,) = plan_drain([joining], "node-1", nodes, leaders)
        assert (moved.placement_id, moved.to_server, moved.to_placement_id, moved.reused) == (1, "node-3", 3, True)
        (moved,) = plan_drain([live], "node-1", nodes, leaders)
        assert (moved.placement_id, moved.to_placement_id, moved.reused) == (1, 0, True)


def test_the_last_in_sync_live_replica_is_removed_only_when_allowed() -> None:
    """RF 2 with a third replica: node-2 and node-3 are out of sync, so node-1 is the only in-sync
    LIVE replica. LeaveServer counts LIVE replicas (3 - 1 >= 2), the election counts in-sync ones:
    removed, an out-of-sync replica would lead (an unclean election the command's help says needs
    --allow-under-replication)."""
    client, pid = _client()
    file, placement = add_replica(client, "events", pid, "node-3")
    client.coordinator.finalize_join(pid, placement.placement_id)
    path = client.layout.in_sync(pid)
    client.zk.in_sync[path] = json.dumps({"epoch": 1, "placement_id": 1, "out_of_sync": [2, 3]}).encode()
    with pytest.raises(OnlyInSyncReplicaError, match="node-1 holds the only in-sync LIVE replica") as refused:
        remove_replica(client, "events", pid, "node-1")
    assert refused.value.out_of_sync == (2, 3) and client.coordinator.committed == ["join", "finalize_join"]
    remove_replica(client, "events", pid, "node-2")  # an out-of-sync one may go
    client.zk.in_sync[path] = json.dumps({"epoch": 1, "placement_id": 1, "out_of_sync": [3]}).encode()
    with pytest.raises(InvalidOperationError):  # now below the replication factor too
        remove_replica(client, "events", pid, "node-1")
    file, left = remove_replica(client, "events", pid, "node-1", allow_under_replication=True)
    assert replica_state(file, pid, left.placement_id) == "UNLOAD"
