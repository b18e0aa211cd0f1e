"""A follower role still running when the node wins its partition's election (its start-up scrub
hashes every chain file: longer than the 30 s stop bound on a large replica) must not share the
replica with the leader role: it moved the leader's replayed memtable into an overlay, and the
leader's next flush wrote a segment covering WAL records whose rows it did not hold, lost at the
next restart (an audit's proof). The node leads once the follower role has ended (DESIGN.md
section 7).

Real code: StorageNode._start_follower / _start_leader / _supervise, PartitionFollower.run,
PartitionReplica, recovery.replay_wal. Stand-ins: the WAL channel, the election, the leader role
(the real replay; the test then commits and flushes as the role would), a slow file hash, and the
stop bound (0.3 s)."""

from __future__ import annotations

import threading
import types
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import storage_node.node as node_module
import storage_node.roles.follower as follower_module
import storage_node.roles.leader.recovery as recovery
from metadata.discovery import ReplicaState
from metadata.election import LeaderState
from metadata.keyspace import KeyRange
from metadata.table import Column, ColumnType, TableDefinition
from shoal.ids import new_partition_id
from shoal.kafka.readers import ChannelRecord
from shoal.topics import TopicNames
from shoal.wire.arrow_ipc import encode_batch
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import GENESIS_HASH, Gtid, WalRecord
from shoal.worker import Worker
from storage_node.node import HeldPartition, StorageNode
from storage_node.replica import PartitionReplica, versioned_rows
from storage_node.replication.receive import InFlightBudget, ReceiveStats

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)
SCHEMA = ingest_schema(TABLE.arrow_schema())


def _ingest(keys: list[int]) -> pa.Table:
    return pa.table(
        {"k": pa.array(keys, pa.uint64()), "v": [f"v{k}" for k in keys], "_shoal_deleted": [False] * len(keys)},
        schema=SCHEMA,
    )


def _wal(pid: str, keys: list[int], gtids: list[Gtid], prev: bytes = GENESIS_HASH) -> list[WalRecord]:
    out = []
    for key, gtid in zip(keys, gtids, strict=True):
        rec = WalRecord.create(
            partition_id=pid,
            placement_id=1,
            gtid=gtid,
            row_count=1,
            payload=encode_batch(_ingest([key])),
            prev_hash=prev,
        )
        out.append(rec)
        prev = rec.hash
    return out


class _LeaderRole(Worker):
    """The leader role's start: the real WAL replay into the memtable."""

    def __init__(self, replica: PartitionReplica, *_a: Any, **_k: Any) -> None:
        super().__init__("leader-stand-in")
        self.replica = replica
        self.ready = threading.Event()
        self.publisher = None
        self.term = None

    def run(self) -> None:
        recovery.replay_wal(self.replica, None, "wal", SCHEMA, recovery.ChainPosition())
        self.ready.set()
        self.stopping.wait()


class _NoIntake:
    def __init__(self, *_a: Any, **_k: Any) -> None:
        pass

    def start(self) -> _NoIntake:
        return self

    def stop(self, timeout: float = 30.0) -> bool:
        return True


def _keys(replica: PartitionReplica) -> list[int]:
    return sorted(replica.scan().column("k").to_pylist())


def _won(pid: str, replica: PartitionReplica) -> HeldPartition:
    """A LIVE partition whose election this node won at epoch 2 (no role started yet)."""
    lead = types.SimpleNamespace(epoch=2)
    election = types.SimpleNamespace(
        check_writable=lambda: lead, state=LeaderState.LEADER, leadership=lead, recheck=lambda: None
    )
    return HeldPartition(
        TABLE, pid, 1, KeyRange(b"", b""), replica, election=election, bootstrap_checked=True, state=ReplicaState.LIVE
    )


def test_the_leader_starts_only_after_the_follower_role_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pid = new_partition_id()
    wal = _wal(pid, [1, 2, 3, 4], [Gtid(1, i) for i in range(4)])
    monkeypatch.setattr(
        recovery,
        "read_wal_channel",
        lambda _k, _t, start, **_kw: (ChannelRecord(o, wal[o]) for o in range(max(start, 0), len(wal))),
    )
    monkeypatch.setattr(recovery, "read_wal_record_at", lambda _k, _t, o, **_kw: wal[o] if 0 <= o < len(wal) else None)
    release, entered = threading.Event(), threading.Event()
    real_sha = follower_module.file_sha256

    def slow_sha256(path: Path) -> str:  # the follower's start-up scrub outlasts the stop bound
        entered.set()
        release.wait(30)
        return str(real_sha(path))

    monkeypatch.setattr(follower_module, "file_sha256", slow_sha256)
    monkeypatch.setattr(follower_module.PartitionFollower, "stop", lambda self, timeout=30.0: Worker.stop(self, 0.3))
    monkeypatch.setattr(node_module, "PartitionLeader", _LeaderRole)
    monkeypatch.setattr(node_module, "CompactionIntake", _NoIntake)

    # before the restart: WAL [0, 2) (keys 1, 2) flushed; records 2 and 3 (keys 3, 4) acknowledged only
    first = PartitionReplica(TABLE, pid, 1, tmp_path)
    for offset in (0, 1):
        first.append(versioned_rows(_ingest([offset + 1]), wal[offset].gtid), offset)
    first.flush(1)
    first.close()
    replica = PartitionReplica(TABLE, pid, 1, tmp_path)
    held = _won(pid, replica)
    lead = held.election.leadership  # type: ignore[union-attr]
    config = types.SimpleNamespace(
        server_id="node-1", data_dir=tmp_path, kafka=None, topics=TopicNames("t"), leader_config=lambda: None
    )
    node: Any = types.SimpleNamespace(
        _stop=threading.Event(),
        _client=types.SimpleNamespace(),
        budget=InFlightBudget(),
        config=config,
        _in_sync=lambda _held, _election: None,
        _listed=lambda _held: True,
        _stop_intake=StorageNode._stop_intake,
        _start_splitters=lambda: None,
        _start_forwarders=lambda: None,
        partitions=lambda: {pid: held},
        _has_joiners=lambda _held: False,
        _may_campaign=StorageNode._may_campaign,
    )
    for name in ("_start_follower", "_start_leader", "_supervise"):
        setattr(node, name, getattr(StorageNode, name).__get__(node))

    node._start_follower(held)  # discovery: the LIVE replica follows (its scrub runs), then wins at once
    follower = held.follower
    assert follower is not None and entered.wait(5)
    node._start_leader(held, lead)
    assert held.leader is None  # the follower role has not ended: not yet
    release.set()
    assert follower.join(5)
    node._supervise(types.SimpleNamespace(zk=None, layout=None))  # the next supervision pass leads
    assert held.leader is not None and held.leader.ready.wait(5)
    assert replica.memtable.rows == 2 and _keys(replica) == [1, 2, 3, 4]

    # the leader commits key 5 (WAL offset 4) and flushes; a restart replays what no segment holds
    wal += _wal(pid, [5], [Gtid(2, 0)], wal[-1].hash)
    replica.append(versioned_rows(_ingest([5]), wal[4].gtid), 4)
    assert replica.flush(2) is not None
    held.leader.stop(5)
    replica.close()
    again = PartitionReplica(TABLE, pid, 1, tmp_path)
    recovery.replay_wal(again, None, "wal", SCHEMA, recovery.ChainPosition())
    assert _keys(again) == [1, 2, 3, 4, 5]
    again.close()


class _StagingFollower(Worker):
    """A split child's staging follower that ends only when released (a long scrub)."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__("staging-follower")
        self.release = release
        self.stats = ReceiveStats()

    def run(self) -> None:
        self.release.wait(30)


class _Follower(Worker):
    def __init__(self, *_a: Any, **_k: Any) -> None:
        super().__init__("follower-stand-in")
        self.stats = ReceiveStats()

    def run(self) -> None:
        self.stopping.wait()


def test_a_promoted_split_childs_staging_follower_is_held_until_it_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPLIT_FINALIZE makes a LOAD child LIVE: its staging follower was dropped after a stop whose result
    was ignored, and a new follower (or, once elected, the leader) started on the replica it still used."""
    from metadata.discovery import PartitionDiscovery
    from metadata.metadata_file import Placement
    from metadata.operations import create_file

    monkeypatch.setattr(follower_module.PartitionFollower, "stop", lambda self, timeout=30.0: Worker.stop(self, 0.3))
    monkeypatch.setattr(node_module, "PartitionFollower", _Follower)
    file = create_file(TABLE, [(Placement("node-1", 1),)], ())
    pid = file.partitions[0].partition_id
    replica = PartitionReplica(TABLE, pid, 1, tmp_path)
    release = threading.Event()
    staging = _StagingFollower(release).start()
    monkeypatch.setattr(staging, "stop", lambda timeout=30.0: Worker.stop(staging, 0.3))
    held = HeldPartition(
        TABLE, pid, 1, KeyRange(b"", b""), replica, split_parent=new_partition_id(), state=ReplicaState.LOAD
    )
    held.follower = staging  # type: ignore[assignment]
    config = types.SimpleNamespace(server_id="node-1", data_dir=tmp_path, kafka=None, topics=TopicNames("t"))
    node: Any = types.SimpleNamespace(
        _stop=threading.Event(),
        _lock=threading.Lock(),
        _held={pid: held},
        _client=types.SimpleNamespace(),
        budget=InFlightBudget(),
        config=config,
        _stop_intake=lambda _held: None,
        _check_bootstrap=lambda h: setattr(h, "bootstrap_checked", True),
        _may_campaign=lambda _held: False,
    )
    for name in ("_apply_discovery", "_start_follower"):
        setattr(node, name, getattr(StorageNode, name).__get__(node))
    live = PartitionDiscovery(pid, 1, ReplicaState.LIVE, KeyRange(b"", b""), (), file.txnid, file.sequence)
    node._apply_discovery(file, live)
    assert held.split_parent is None and held.follower is staging  # still running: nothing else starts
    release.set()
    assert staging.join(5)
    node._start_follower(held)  # the supervision's next pass
    assert isinstance(held.follower, _Follower)
    held.follower.stop(5)
    replica.close()


class _Leader(Worker):
    def __init__(self, *_a: Any, **_k: Any) -> None:
        super().__init__("leader-stand-in")
        self.ready = threading.Event()
        self.publisher = None
        self.term = None

    def run(self) -> None:
        self.ready.set()
        self.stopping.wait()


def test_a_follower_started_after_the_election_was_won_is_stopped_and_the_node_leads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """_start_leader returned while the old follower ran; a discovery (or a handover) started a new
    follower after it ended and before the supervision's next pass: every later pass skipped leading,
    and the node held the leadership in ZooKeeper with writes refused until it restarted."""
    monkeypatch.setattr(node_module, "PartitionLeader", _Leader)
    monkeypatch.setattr(node_module, "CompactionIntake", _NoIntake)
    pid = new_partition_id()
    replica = PartitionReplica(TABLE, pid, 1, tmp_path)
    held = _won(pid, replica)
    held.follower = _Follower().start()  # type: ignore[assignment]
    config = types.SimpleNamespace(
        server_id="node-1", data_dir=tmp_path, kafka=None, topics=TopicNames("t"), leader_config=lambda: None
    )
    node: Any = types.SimpleNamespace(
        _stop=threading.Event(),
        config=config,
        _in_sync=lambda _held, _election: None,
        _listed=lambda _held: True,
        _start_splitters=lambda: None,
        _start_forwarders=lambda: None,
        partitions=lambda: {pid: held},
        _has_joiners=lambda _held: False,
        _may_campaign=StorageNode._may_campaign,
    )
    for name in ("_start_leader", "_supervise"):
        setattr(node, name, getattr(StorageNode, name).__get__(node))
    for _ in range(3):  # supervision passes
        node._supervise(types.SimpleNamespace(zk=None, layout=None))
        if held.leader is not None:
            break
        assert held.follower is not None
        held.follower.join(5)
    assert held.leader is not None and held.leader.ready.wait(5)
    held.leader.stop(5)
    replica.close()


def test_a_won_election_whose_replica_bootstraps_is_left_not_led(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Won while eligible, then re-bootstrapping (its follower found the replica behind the Tail): the
    supervision does not stop that follower to lead a half-copied replica; it leaves the election."""
    monkeypatch.setattr(node_module, "PartitionLeader", _Leader)
    pid = new_partition_id()
    replica = PartitionReplica(TABLE, pid, 1, tmp_path)
    replica.catch_up.begin("behind the leader's Tail")
    lead = types.SimpleNamespace(epoch=2)
    resigned: list[bool] = []
    election = types.SimpleNamespace(
        check_writable=lambda: lead,
        state=LeaderState.LEADER,
        leadership=lead,
        recheck=lambda: None,
        resign=lambda: resigned.append(True),
    )
    held = HeldPartition(
        TABLE, pid, 1, KeyRange(b"", b""), replica, election=election, bootstrap_checked=True, state=ReplicaState.LIVE
    )
    bootstrapping = _Follower().start()
    held.follower = bootstrapping  # type: ignore[assignment]
    node: Any = types.SimpleNamespace(
        _stop=threading.Event(),
        _start_splitters=lambda: None,
        _start_forwarders=lambda: None,
        partitions=lambda: {pid: held},
        _has_joiners=lambda _held: False,
        _may_campaign=StorageNode._may_campaign,
        _check_bootstrap=lambda _held: None,
        _start_follower=lambda _held: None,
        config=types.SimpleNamespace(server_id="node-1"),
    )
    node._supervise = StorageNode._supervise.__get__(node)
    node._supervise(types.SimpleNamespace(zk=None, layout=None))
    assert held.leader is None and resigned == [True]
    assert not bootstrapping.stopping.is_set()  # the bootstrap goes on
    bootstrapping.stop(5)
    replica.close()
