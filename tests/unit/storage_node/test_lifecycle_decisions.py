"""The partition lifecycle's pure decisions (storage_node.roles.lifecycle; metadata.discovery)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from metadata.discovery import IllegalTransitionError, ReplicaState, check_transition
from metadata.keyspace import KeyRange
from metadata.table import Column, ColumnType, TableDefinition
from storage_node.replica import PartitionReplica
from storage_node.roles.lifecycle import (
    held_on_disk,
    joiner_caught_up,
    unload_check,
    unload_final_at,
    write_marker,
)

PID = "a" * 32
WAL = "shoal.wal." + PID + ".5"


def manifest(offset: int, sid: str, included: tuple[str, ...] = (), covers: tuple[tuple[str, int], ...] = ()) -> Any:
    ranges = tuple(SimpleNamespace(topic=t, start_offset=0, end_offset=e) for t, e in covers)
    return SimpleNamespace(
        offset=offset,
        manifest=SimpleNamespace(segment_id=sid, included_segment_ids=included, covered_wal_offsets=ranges),
    )


def test_joiner_is_caught_up_once_it_acked_the_root_and_the_covered_wal() -> None:
    base = {"chain_empty": False, "root_manifest_offset": 10, "covered_end": 50}
    assert not joiner_caught_up(**base, segments_ack=None, wal_ack=None)
    assert not joiner_caught_up(**base, segments_ack=10, wal_ack=50)  # the root's manifest itself is not acked
    assert not joiner_caught_up(**base, segments_ack=14, wal_ack=49)
    assert joiner_caught_up(**base, segments_ack=14, wal_ack=50)
    assert not joiner_caught_up(chain_empty=False, root_manifest_offset=None, segments_ack=9, covered_end=0, wal_ack=0)
    assert joiner_caught_up(chain_empty=True, root_manifest_offset=None, segments_ack=None, covered_end=0, wal_ack=None)


def test_unload_waits_for_references_own_wal_and_every_remaining_ack() -> None:
    manifests = [manifest(0, "m" * 32), manifest(5, "b" * 32, covers=((WAL, 40),)), manifest(9, "c" * 32)]
    args: dict[str, Any] = {"own_segments": ["m" * 32, "b" * 32], "own_wal_topic": WAL, "manifests": manifests}
    p = unload_check(**args, own_wal_end=40, acks={7: 6, 8: 5})
    assert not p.done and p.needed_offset == 5 and p.waiting_for == (8,)
    assert "placements [8]" in p.describe()
    assert unload_check(**args, own_wal_end=40, acks={7: 6, 8: 10}).done
    # its own WAL channel holds records beyond what the leader's segments cover: not adopted yet
    p = unload_check(**args, own_wal_end=41, acks={7: 99})
    assert not p.done and not p.wal_covered
    # a segment the leader does not reference is missing until pushed, merged and published after
    p = unload_check(**{**args, "own_segments": ["m" * 32, "d" * 32]}, own_wal_end=0, acks={7: 99})
    assert not p.done and p.missing == ("d" * 32,)
    p = unload_check(**{**args, "own_segments": ["d" * 32]}, own_wal_end=0, acks={7: 99}, resolved={"d" * 32: 9})
    assert p.done and p.needed_offset == 9


def test_unload_counts_segments_folded_into_a_major() -> None:
    manifests = [manifest(3, "z" * 32, included=("m" * 32, "b" * 32))]
    p = unload_check(own_segments=["m" * 32, "b" * 32], own_wal_topic=WAL, own_wal_end=0, manifests=manifests, acks={})
    assert p.done and p.needed_offset == 3


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (ReplicaState.LIVE, ReplicaState.LOAD),
        (ReplicaState.UNLOAD, ReplicaState.LIVE),
        (ReplicaState.UNLOAD_FINAL, ReplicaState.UNLOAD),
        (ReplicaState.LOAD, ReplicaState.UNLOAD_FINAL),
    ],
)
def test_illegal_transitions_are_refused_naming_the_replica(old: ReplicaState, new: ReplicaState) -> None:
    with pytest.raises(IllegalTransitionError, match=f"events/x: illegal lifecycle transition {old.value}") as info:
        check_transition(old, new, "events/x")
    assert (info.value.old, info.value.new, info.value.replica) == (old, new, "events/x")


def test_allowed_transitions() -> None:
    for old, new in [
        (ReplicaState.LOAD, ReplicaState.LIVE),
        (ReplicaState.LOAD, ReplicaState.UNLOAD),
        (ReplicaState.LIVE, ReplicaState.UNLOAD),
        (ReplicaState.UNLOAD, ReplicaState.UNLOAD_FINAL),
        (ReplicaState.LIVE, ReplicaState.LIVE),
    ]:
        check_transition(old, new, "r")


def test_held_replicas_are_found_on_disk_with_their_unload_final_mark(tmp_path: Path) -> None:
    table = TableDefinition("events", (Column("k", ColumnType.UINT64, False),), ("k",), "k", 1)
    replica = PartitionReplica(table, PID, 5, tmp_path)
    krange = KeyRange(b"", (7).to_bytes(8, "big"))
    write_marker(replica, krange)
    (held,) = held_on_disk(tmp_path, "events")
    assert (held.partition_id, held.placement_id, held.key_range, held.all_data_pushed) == (PID, 5, krange, False)
    assert held_on_disk(tmp_path, "other") == []
    write_marker(replica, krange, unload_final_at=123.0)
    assert unload_final_at(replica.directory) == 123.0
    assert held_on_disk(tmp_path, "events")[0].all_data_pushed
    replica.close()
