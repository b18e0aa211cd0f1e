"""Partition discovery on a node whose local state of one partition is damaged.

A corrupt segment list makes ``PartitionReplica()`` raise ``SegmentListCorruptError``; discovery must
log it and go on with the table's other partitions, which this node then follows, leads and serves
(the loop used to stop at the damaged one, so every later partition of the table stayed unheld).
Real ``StorageNode._on_file`` / ``_apply_discovery`` / ``_held_replicas`` / ``_check_bootstrap`` on a
stand-in node state: no ZooKeeper, so the bootstrap check is deferred, as when ZooKeeper is away.
"""

from __future__ import annotations

import threading
import types
import uuid
from pathlib import Path
from typing import Any

from metadata.metadata_file import MetadataFile, PartitionEntry, Placement
from metadata.table import Column, ColumnType, TableDefinition
from shoal.ids import new_partition_id
from shoal.segments import segment_list_path
from storage_node.node import StorageNode
from storage_node.replica import replica_dir

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)


class _NoZooKeeper:
    def __getattr__(self, name: str) -> Any:
        raise ConnectionError("ZooKeeper unreachable (test)")


def _file(pids: list[str]) -> MetadataFile:
    """A table of ``pids``' partitions, each with one placement on node-1."""
    parts = tuple(
        PartitionEntry(begin=b"" if i == 0 else bytes([i * 50]), partition_id=p, servers=(Placement("node-1", i + 1),))
        for i, p in enumerate(pids)
    )
    return MetadataFile(TABLE, uuid.uuid4().hex, 1, parts)


def _node_state() -> dict[str, Any]:
    return {"_stop": threading.Event(), "_lock": threading.RLock(), "_files": {}, "_held": {}}


def test_a_damaged_partition_does_not_stop_discovery_of_the_others(tmp_path: Path) -> None:
    pids = sorted(new_partition_id() for _ in range(3))
    damaged = replica_dir(tmp_path, pids[0], 1)
    damaged.mkdir(parents=True)
    segment_list_path(damaged, pids[0], 1).write_bytes(b"garbage" * 200)
    file = _file(pids)
    node: Any = types.SimpleNamespace(
        **_node_state(),
        _retired={},
        config=types.SimpleNamespace(server_id="node-1", data_dir=tmp_path),
        _client=_NoZooKeeper(),
        _start_follower=lambda held: None,
        _campaign=lambda held: None,
        _start_splitters=lambda: None,
        _start_forwarders=lambda: None,
        _ensure_lifecycle=lambda held: None,
        _retire_roles=lambda held: None,
        _may_campaign=StorageNode._may_campaign,
    )
    for name in ("_held_replicas", "_apply_discovery", "_check_bootstrap"):
        setattr(node, name, getattr(StorageNode, name).__get__(node))
    try:
        StorageNode._on_file(node, file)
        assert sorted(node._held) == pids[1:]
        assert segment_list_path(damaged, pids[0], 1).read_bytes() == b"garbage" * 200  # left as found
    finally:
        for held in node._held.values():
            held.replica.close()


def test_a_partition_that_fails_for_another_reason_does_not_stop_discovery_of_the_others(tmp_path: Path) -> None:
    """An error that is not shoal's own (a full disk: OSError) stopped the loop at that partition, and
    the table watcher delivers a METADATA version once: every later partition stayed unheld until
    the table changed again."""
    pids = sorted(new_partition_id() for _ in range(3))
    file = _file(pids)
    node: Any = types.SimpleNamespace(
        **_node_state(),
        _start_splitters=lambda: None,
        _start_forwarders=lambda: None,
        config=types.SimpleNamespace(server_id="node-1", data_dir=tmp_path),
    )

    def apply(file: MetadataFile, d: Any) -> None:
        if d.partition_id == pids[0]:
            raise OSError(28, "No space left on device")
        node._held[d.partition_id] = d

    node._held_replicas = lambda file: {}
    node._apply_discovery = apply
    StorageNode._on_file(node, file)
    assert sorted(node._held) == pids[1:]
