"""Malformed znodes and a ZooKeeper blip while a leader steps down (DESIGN.md section 7).

A JSON znode nested deeper than Python's recursion limit (100 kB of ``[``, under the decoders' size
bound) raised RecursionError out of every reader: a traceback for the CLI and the nodes, and, as an
election candidate, the death of every election step of the partition (nobody led it). A leader
resigning while a ConnectionLoss hit the delete of its candidate znode left it first in line for
the session's lifetime: no other replica could lead."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from metadata.coordinator import MetadataCoordinator
from metadata.discovery import ReplicaState
from metadata.election import Eligibility, LeaderState, PartitionElection, candidates, read_epoch
from metadata.errors import MetadataDecodeError
from metadata.in_sync import read_in_sync
from metadata.node_registry import lookup_node, node_path
from metadata.store import MemoryFileStore
from metadata.zk_layout import ZkLayout
from shoal.errors import MetadataError
from shoal.ids import new_partition_id

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage_node"))
from test_election_in_sync import FakeZk

DEEP = b"[" * 100_000
LAYOUT = ZkLayout()


def test_a_deeply_nested_znode_is_a_decode_error_not_a_recursion_error() -> None:
    zk = FakeZk()
    zk.ensure_path(LAYOUT.tables)
    zk.create(LAYOUT.table("events"), DEEP)
    with pytest.raises(MetadataDecodeError):
        MetadataCoordinator(zk, MemoryFileStore()).current("events")
    pid = new_partition_id()
    zk.ensure_path(LAYOUT.partition(pid))
    zk.create(LAYOUT.in_sync(pid), DEEP)
    with pytest.raises(MetadataDecodeError):
        read_in_sync(zk, LAYOUT, pid)
    zk.create(LAYOUT.epoch(pid), DEEP)
    with pytest.raises(MetadataDecodeError):
        read_epoch(zk, LAYOUT, pid)


def test_a_deeply_nested_candidate_znode_is_skipped_and_the_real_candidate_leads() -> None:
    zk = FakeZk()
    pid = new_partition_id()
    zk.ensure_path(LAYOUT.election(pid))
    zk.create(f"{LAYOUT.election(pid)}/n_", DEEP, sequence=True)  # first in line
    assert candidates(zk, LAYOUT, pid) == []
    election = PartitionElection(zk, pid, "node-1", 1, replica_state=ReplicaState.LIVE)
    election.start()
    try:
        assert election.wait_for(LeaderState.LEADER, timeout=5)
    finally:
        election.close()


class _BlipZk(FakeZk):
    fail_next_delete = False

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        if self.fail_next_delete and "/election/" in path:
            self.fail_next_delete = False
            raise ConnectionLoss()
        return super().delete(path, version, recursive)


def test_a_resigning_leader_deletes_its_candidate_znode_through_a_connection_loss() -> None:
    zk = _BlipZk()
    pid = new_partition_id()
    a = PartitionElection(zk, pid, "node-1", 1, replica_state=ReplicaState.LIVE)
    a.start()
    assert a.wait_for(LeaderState.LEADER, timeout=5)
    b = PartitionElection(zk, pid, "node-2", 2, replica_state=ReplicaState.LIVE)
    b.start()
    try:
        assert b.wait_for(LeaderState.CANDIDATE, timeout=5)
        zk.fail_next_delete = True
        a.replica_state = ReplicaState.UNLOAD  # what StorageNode._retire_roles does, then close()
        a.close()
        assert [c.placement_id for c in candidates(zk, LAYOUT, pid)] == [2]
        b.recheck(now=time.monotonic() + 100)
        assert b.wait_for(LeaderState.LEADER, timeout=5) and read_epoch(zk, LAYOUT, pid).epoch == 2
    finally:
        b.close()


def test_a_deeply_nested_node_registration_is_a_clear_error() -> None:
    zk = FakeZk()
    path = node_path(LAYOUT, "node-1")
    zk.ensure_path(path.rsplit("/", 1)[0])
    zk.create(path, DEEP)
    with pytest.raises(MetadataError, match="malformed"):
        lookup_node(zk, LAYOUT, "node-1")


class _CountingZk(FakeZk):
    def __init__(self) -> None:
        super().__init__()
        self.children_reads = 0

    def get_children(self, path: str, watch: Any = None) -> Any:
        self.children_reads += 1
        return super().get_children(path, watch)


@pytest.mark.timeout(60)
def test_a_candidate_that_may_not_lead_waits_on_a_watch_past_a_skipped_candidate_znode() -> None:
    """The line read raw (every child) and parsed (malformed candidates skipped) never matched: a
    candidate first in line that may not lead (out of sync) re-read ZooKeeper without end."""
    zk = _CountingZk()
    pid = new_partition_id()
    zk.ensure_path(LAYOUT.election(pid))
    zk.create(f"{LAYOUT.election(pid)}/n_", DEEP, sequence=True)
    election = PartitionElection(
        zk, pid, "node-2", 2, replica_state=ReplicaState.LIVE, eligible=lambda _line: Eligibility(frozenset())
    )
    election.start()
    try:
        time.sleep(1.0)
        assert election.state is LeaderState.CANDIDATE and zk.children_reads < 50, zk.children_reads
    finally:
        election.close()
