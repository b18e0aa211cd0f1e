"""An out-of-sync replica never leads while an in-sync placement of the partition exists (DESIGN.md
section 7; Kafka with ``unclean.leader.election.enable=false``), even when that placement's node is
restarting and so not in the election line; only once no LIVE placement is in sync (an operator
removed them: ``shoal table remove-replica --allow-under-replication``) may it lead.

The real :class:`~storage_node.node.StorageNode` election wiring (``_campaign``: its ``prefer`` and
``eligible`` hooks) and :class:`~metadata.election.PartitionElection`, on an in-memory ZooKeeper.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError, RolledBackError

from metadata.election import EpochFence, LeaderState, PartitionElection, candidates, read_epoch
from metadata.in_sync import InSyncRecord, prefer_in_sync, read_in_sync, write_out_of_sync
from metadata.table import Column, ColumnType, TableDefinition
from metadata.zk_layout import EpochRecord, ZkLayout
from shoal.ids import new_partition_id
from shoal.kafka.settings import ConnectionSettings
from shoal.topics import TopicNames
from storage_node.config import NodeConfig
from storage_node.node import HeldPartition, StorageNode
from storage_node.replica import PartitionReplica
from storage_node.roles.rebalance import LeaderRebalancer

TABLE = TableDefinition("events", (Column("k", ColumnType.UINT64, False),), ("k",), "k", 3)
OLD_LEADER, IN_SYNC, LAGGING = 1, 2, 3
TOPICS = TopicNames("t1")


@dataclass
class _Stat:
    version: int
    ephemeralOwner: int = 0


class _Txn:
    def __init__(self, zk: FakeZk) -> None:
        self.zk, self.ops = zk, []  # type: ignore[var-annotated]

    def check(self, path: str, version: int) -> None:
        self.ops.append(("check", path, version, None))

    def set_data(self, path: str, data: bytes, version: int = -1) -> None:
        self.ops.append(("set", path, version, data))

    def create(self, path: str, data: bytes = b"", acl: Any = None, **_kw: Any) -> None:
        self.ops.append(("create", path, -1, data))

    def commit(self) -> list[Any]:
        return self.zk._commit(self.ops)


class FakeZk:
    """kazoo's calls the election and the in-sync set make, with one-shot exists/get_children watches."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.nodes: dict[str, list[Any]] = {"/": [b"", 0, 0]}  # path -> [data, version, ephemeral owner]
        self.seq = itertools.count()
        self.client_id = (1, b"")
        self.watch_node: dict[str, list[Callable[[Any], None]]] = {}
        self.watch_children: dict[str, list[Callable[[Any], None]]] = {}

    def _fire(self, path: str) -> None:
        parent = path.rsplit("/", 1)[0] or "/"
        with self.lock:
            fns = self.watch_node.pop(path, []) + self.watch_children.pop(parent, [])
        for fn in fns:
            fn(None)

    def get(self, path: str, watch: Any = None) -> tuple[bytes, _Stat]:
        with self.lock:
            if path not in self.nodes:
                raise NoNodeError(path)
            data, version, owner = self.nodes[path]
            return data, _Stat(version, owner)

    def exists(self, path: str, watch: Any = None) -> _Stat | None:
        with self.lock:
            if watch is not None:
                self.watch_node.setdefault(path, []).append(watch)
            if path not in self.nodes:
                return None
            return _Stat(self.nodes[path][1], self.nodes[path][2])

    def get_children(self, path: str, watch: Any = None) -> list[str]:
        with self.lock:
            if path not in self.nodes:
                raise NoNodeError(path)
            if watch is not None:
                self.watch_children.setdefault(path, []).append(watch)
            pre = path.rstrip("/") + "/"
            return sorted({p[len(pre) :].split("/")[0] for p in self.nodes if p.startswith(pre)})

    def create(
        self,
        path: str,
        value: bytes = b"",
        acl: Any = None,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        with self.lock:
            if sequence:
                path = f"{path}{next(self.seq):010d}"
            parent = path.rsplit("/", 1)[0] or "/"
            if parent not in self.nodes:
                raise NoNodeError(parent)
            if path in self.nodes:
                raise NodeExistsError(path)
            self.nodes[path] = [value, 0, self.client_id[0] if ephemeral else 0]
        self._fire(path)
        return path

    def set(self, path: str, data: bytes, version: int = -1) -> _Stat:
        with self.lock:
            if path not in self.nodes:
                raise NoNodeError(path)
            if version != -1 and self.nodes[path][1] != version:
                raise BadVersionError(path)
            self.nodes[path][0] = data
            self.nodes[path][1] += 1
            stat = _Stat(self.nodes[path][1])
        self._fire(path)
        return stat

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        with self.lock:
            if path not in self.nodes:
                raise NoNodeError(path)
            if version != -1 and self.nodes[path][1] != version:
                raise BadVersionError(path)
            if any(p.startswith(path + "/") for p in self.nodes):
                raise NotEmptyError(path)
            del self.nodes[path]
        self._fire(path)

    def ensure_path(self, path: str, acl: Any = None) -> None:
        with self.lock:
            cur = ""
            for part in [p for p in path.split("/") if p]:
                cur += "/" + part
                self.nodes.setdefault(cur, [b"", 0, 0])

    def transaction(self) -> _Txn:
        return _Txn(self)

    def _commit(self, ops: list[tuple[str, str, int, bytes | None]]) -> list[Any]:
        with self.lock:
            failed: Exception | None = None
            for kind, path, version, _ in ops:
                if kind == "create":
                    failed = NodeExistsError(path) if path in self.nodes else None
                elif path not in self.nodes:
                    failed = NoNodeError(path)
                elif version != -1 and self.nodes[path][1] != version:
                    failed = BadVersionError(path)
                if failed is not None:
                    return [failed if op[1] == path else RolledBackError() for op in ops]
            for kind, path, _, data in ops:
                if kind == "create":
                    self.nodes[path] = [data, 0, 0]
                elif kind == "set":
                    self.nodes[path][0] = data
                    self.nodes[path][1] += 1
        for _, path, _, _ in ops:
            self._fire(path)
        return [True for _ in ops]

    def add_listener(self, fn: Any) -> None:
        pass

    def remove_listener(self, fn: Any) -> None:
        pass


def _node(zk: FakeZk, tmp_path: Path, server: str) -> StorageNode:
    """A storage node whose ZooKeeper is ``zk``; no leader role is started, nothing runs after a LOST."""
    connection = ConnectionSettings.plain("127.0.0.1:1", "127.0.0.1:1")
    node = StorageNode(NodeConfig(server, tmp_path / server, connection))
    node._client = SimpleNamespace(zk=zk, layout=ZkLayout())  # type: ignore[assignment]
    node._rebalancer = LeaderRebalancer(zk, ZkLayout(), node.config.kafka, node.config.topics, delay_s=30)
    node._start_leader = lambda held, leadership: None  # type: ignore[method-assign]
    node._after_lost = lambda held: None  # type: ignore[method-assign]
    return node


def _held(tmp_path: Path, server: str, pid: str, placement: int, live: tuple[int, ...]) -> HeldPartition:
    replica = PartitionReplica(TABLE, pid, placement, tmp_path / server)
    held = HeldPartition(TABLE, pid, placement, None, replica)  # type: ignore[arg-type]
    held.peers = tuple(p for p in (OLD_LEADER, IN_SYNC, LAGGING) if p != placement)
    held.live = live  # the partition's LIVE placements in METADATA (servers)
    held.bootstrap_checked = True
    return held


def _partition(zk: FakeZk) -> str:
    """Placement 1 led at epoch 4 and marked placement 3 out of sync; placement 2 is in sync."""
    pid, layout = new_partition_id(), ZkLayout()
    zk.ensure_path(layout.partition(pid))
    zk.create(layout.epoch(pid), EpochRecord(pid, 4, "node-1", OLD_LEADER).encode())
    zk.create(layout.in_sync(pid), InSyncRecord(pid, frozenset({LAGGING}), 4, OLD_LEADER).encode())
    return pid


def _election(node: StorageNode, held: HeldPartition) -> PartitionElection:
    node._campaign(held)
    assert held.election is not None
    return held.election


def _line(zk: FakeZk, pid: str) -> list[int]:
    return [c.placement_id for c in candidates(zk, ZkLayout(), pid)]


def test_an_out_of_sync_replica_waits_for_an_in_sync_one_that_is_restarting(tmp_path: Path) -> None:
    zk = FakeZk()
    pid = _partition(zk)
    # the old leader (node-1) crashed and node-2 (in sync) is restarting: only node-3 is in line
    node3 = _node(zk, tmp_path, "node-3")
    e3 = _election(node3, _held(tmp_path, "node-3", pid, LAGGING, (OLD_LEADER, IN_SYNC, LAGGING)))
    try:
        assert not e3.wait_for(LeaderState.LEADER, timeout=1.5), "the out-of-sync replica leads"
        assert e3.state is LeaderState.CANDIDATE
        assert read_epoch(zk, ZkLayout(), pid).epoch == 4  # nobody took an epoch

        # node-2 is back: it joins behind node-3, which steps aside for it at once (a watch on the line)
        node2 = _node(zk, tmp_path, "node-2")
        e2 = _election(node2, _held(tmp_path, "node-2", pid, IN_SYNC, (OLD_LEADER, IN_SYNC, LAGGING)))
        try:
            assert e2.wait_for(LeaderState.LEADER, timeout=5), (e2.state, _line(zk, pid))
            assert e3.state is LeaderState.CANDIDATE
            rec = read_epoch(zk, ZkLayout(), pid)
            assert (rec.epoch, rec.placement_id) == (5, IN_SYNC)
            assert _line(zk, pid) == [IN_SYNC, LAGGING]
        finally:
            e2.close()
    finally:
        e3.close()


def test_an_out_of_sync_replica_leads_once_no_live_placement_is_in_sync(tmp_path: Path) -> None:
    """The operator removed the dead in-sync placements (remove-replica): the unclean choice is theirs."""
    zk = FakeZk()
    pid = _partition(zk)
    node3 = _node(zk, tmp_path, "node-3")
    held = _held(tmp_path, "node-3", pid, LAGGING, (OLD_LEADER, IN_SYNC, LAGGING))
    e3 = _election(node3, held)
    try:
        assert not e3.wait_for(LeaderState.LEADER, timeout=1.0)
        held.live = (LAGGING,)  # METADATA now lists placements 1 and 2 as leaving
        e3.recheck(now=time.monotonic() + 60)  # the node's supervision tick
        assert e3.wait_for(LeaderState.LEADER, timeout=5), e3.state
        assert read_epoch(zk, ZkLayout(), pid).epoch == 5
    finally:
        e3.close()


def test_a_leader_does_not_hand_over_to_an_out_of_sync_preferred_leader(tmp_path: Path) -> None:
    """It could not lead (the ISR rule above): the handover would only elect another replica."""
    zk = FakeZk()
    pid = _partition(zk)
    rebalancer = LeaderRebalancer(
        zk, ZkLayout(), ConnectionSettings.plain("127.0.0.1:1", "127.0.0.1:1").kafka, TOPICS, delay_s=0
    )
    zk.ensure_path(ZkLayout().election(pid))
    zk.create(f"{ZkLayout().election(pid)}/n_", b'{"server_id": "node-3", "placement_id": 3}', sequence=True)
    decision = rebalancer.check("events", pid, OLD_LEADER, LAGGING, now=100.0)
    assert not decision.yield_now and "catching up" in decision.reason, decision


@pytest.mark.parametrize(
    ("line", "out", "live", "eligible"),
    [
        ([4, 3, 1], {3, 4}, [1, 3, 4], (1,)),  # the in-sync candidate, wherever it is in line
        ([4, 3], {3, 4}, [1, 3, 4], ()),  # in-sync placement 1 not in line (restarting): nobody yet
        ([4, 3], {3, 4}, [3, 4], (4, 3)),  # no LIVE placement in sync (the rest were removed): unclean
        ([4, 3], set(), [3, 4], (4, 3)),
        ([2], {3}, [1, 2, 3], (2,)),
    ],
)
def test_prefer_in_sync(line: list[int], out: set[int], live: list[int], eligible: tuple[int, ...]) -> None:
    assert prefer_in_sync(line, out, live) == eligible


@pytest.mark.parametrize("had_record", [True, False], ids=["record-changed", "record-created"])
def test_an_old_leader_marking_the_winner_out_of_sync_before_its_bump_stops_it(
    tmp_path: Path, had_record: bool
) -> None:
    """The old leader (its session not expired yet, its epoch still current) marks the in-sync winner
    out of sync between the winner's read of the in-sync record and its epoch bump: the bump, guarded
    by the record's version (or its absence), fails and the winner looks at the line again, where it
    may no longer lead (placement 1, in sync, is not in line)."""
    zk = FakeZk()
    pid = _partition(zk)
    layout = ZkLayout()
    if not had_record:
        zk.delete(layout.in_sync(pid))
    node2 = _node(zk, tmp_path, "node-2")
    original = node2._in_sync_leaders
    raced = threading.Event()

    def racing_hook(held: HeldPartition) -> Callable[[Any], Any]:
        hook = original(held)

        def eligible(line: Any) -> Any:
            rule = hook(line)
            if not raced.is_set():  # the old leader's fenced write lands right after the winner's read
                raced.set()
                write_out_of_sync(zk, layout, EpochFence(pid, 4), OLD_LEADER, {IN_SYNC, LAGGING})
            return rule

        return eligible

    node2._in_sync_leaders = racing_hook  # type: ignore[method-assign]
    e2 = _election(node2, _held(tmp_path, "node-2", pid, IN_SYNC, (OLD_LEADER, IN_SYNC, LAGGING)))
    try:
        assert raced.wait(5)
        assert not e2.wait_for(LeaderState.LEADER, timeout=1.5), "an out-of-sync replica took the lead"
        assert read_epoch(zk, layout, pid).epoch == 4
        assert e2.state is LeaderState.CANDIDATE
    finally:
        e2.close()


def test_the_guard_lets_the_winner_lead_when_the_record_is_unchanged(tmp_path: Path) -> None:
    zk = FakeZk()
    pid = _partition(zk)
    layout = ZkLayout()
    zk.delete(layout.in_sync(pid))  # no record: every replica in sync; the bump creates it empty
    node2 = _node(zk, tmp_path, "node-2")
    e2 = _election(node2, _held(tmp_path, "node-2", pid, IN_SYNC, (OLD_LEADER, IN_SYNC, LAGGING)))
    try:
        assert e2.wait_for(LeaderState.LEADER, timeout=5), e2.state
        assert read_epoch(zk, layout, pid).epoch == 5
        rec = read_in_sync(zk, layout, pid)
        assert (rec.out_of_sync, rec.version) == (frozenset(), 0)
    finally:
        e2.close()
