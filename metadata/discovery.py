"""Partition discovery (EventQL table partitioning, sections 3 and 6.1).

Given the current METADATA file, a server learns for every partition it holds, or should hold,
its should-be state and where that replica's data must go:

- ``LOAD``: the placement is joining (``servers_joining``), or it is a target of an ongoing split.
  It receives data, serves nothing and is not eligible for leader election.
- ``LIVE``: the placement is in ``servers``: it serves reads and writes and takes part in elections.
- ``UNLOAD``: the placement left the partition (``servers_leaving``, or no longer listed at all, or
  listed under another placement id: the ABA rule), or the partition split and no longer exists.
  It serves nothing and pushes its data to the targets.
- ``UNLOAD_FINAL``: UNLOAD, and the holder reports every target has acknowledged all data; the
  local data may be deleted. Nothing leaves UNLOAD_FINAL.

``discover`` is a pure function; the watcher (:mod:`metadata.notify`) calls it on every committed
change.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from metadata.keyspace import KeyRange
from metadata.metadata_file import MetadataFile, PartitionEntry, Placement
from shoal.errors import MetadataError
from shoal.ids import validate_partition_id, validate_placement_id, validate_server_id


class ReplicaState(enum.Enum):
    LOAD = "LOAD"
    LIVE = "LIVE"
    UNLOAD = "UNLOAD"
    UNLOAD_FINAL = "UNLOAD_FINAL"


_ALLOWED: dict[ReplicaState, frozenset[ReplicaState]] = {
    ReplicaState.LOAD: frozenset({ReplicaState.LOAD, ReplicaState.LIVE, ReplicaState.UNLOAD}),
    ReplicaState.LIVE: frozenset({ReplicaState.LIVE, ReplicaState.UNLOAD}),
    ReplicaState.UNLOAD: frozenset({ReplicaState.UNLOAD, ReplicaState.UNLOAD_FINAL}),
    ReplicaState.UNLOAD_FINAL: frozenset({ReplicaState.UNLOAD_FINAL}),
}


def transition_allowed(old: ReplicaState, new: ReplicaState) -> bool:
    """The lifecycle of section 3: LOAD -> LIVE | UNLOAD, LIVE -> UNLOAD, UNLOAD -> UNLOAD_FINAL."""
    return new in _ALLOWED[old]


class IllegalTransitionError(MetadataError):
    """A replica was asked to move between lifecycle states that section 3 does not connect."""

    def __init__(self, replica: str, old: ReplicaState, new: ReplicaState) -> None:
        allowed = ", ".join(sorted(s.value for s in _ALLOWED[old] if s is not old)) or "nothing"
        super().__init__(
            f"{replica}: illegal lifecycle transition {old.value} -> {new.value} (from {old.value} only to {allowed})"
        )
        self.replica = replica
        self.old = old
        self.new = new


def check_transition(old: ReplicaState, new: ReplicaState, replica: str) -> None:
    """Raise :class:`IllegalTransitionError` unless ``old -> new`` is allowed (staying put is)."""
    if not transition_allowed(old, new):
        raise IllegalTransitionError(replica, old, new)


@dataclass(frozen=True)
class HeldReplica:
    """A replica a server has on disk: what it knows about its own copy."""

    partition_id: str
    placement_id: int
    key_range: KeyRange
    all_data_pushed: bool = False
    """The holder's replication reports every target acknowledged every segment."""

    def __post_init__(self) -> None:
        validate_partition_id(self.partition_id)
        validate_placement_id(self.placement_id)


@dataclass(frozen=True)
class ReplicationTarget:
    """A replica that must receive this replica's data, restricted to ``key_range``."""

    partition_id: str
    placement: Placement
    key_range: KeyRange


@dataclass(frozen=True)
class PartitionDiscovery:
    """The partition discovery response for one replica of one server."""

    partition_id: str
    placement_id: int | None
    state: ReplicaState
    key_range: KeyRange
    targets: tuple[ReplicationTarget, ...]
    txnid: str
    sequence: int
    splitting: bool = False

    @property
    def eligible_for_election(self) -> bool:
        return self.state is ReplicaState.LIVE


def _targets_of(
    entry: PartitionEntry, key_range: KeyRange, exclude: int | None, *, include_split: bool
) -> list[ReplicationTarget]:
    out = [ReplicationTarget(entry.partition_id, p, key_range) for p in entry.replicas if p.placement_id != exclude]
    if include_split and entry.splitting:
        assert entry.split_partition_id_low is not None and entry.split_partition_id_high is not None
        low = KeyRange(key_range.begin, entry.split_point)
        high = KeyRange(entry.split_point, key_range.end)
        out += [ReplicationTarget(entry.split_partition_id_low, p, low) for p in entry.split_servers_low]
        out += [ReplicationTarget(entry.split_partition_id_high, p, high) for p in entry.split_servers_high]
    return out


def discover(file: MetadataFile, server_id: str, held: Iterable[HeldReplica] = ()) -> list[PartitionDiscovery]:
    """Should-be state and targets of every replica ``server_id`` holds or should hold.

    One result per held replica (in the given order), then one per placement the server is
    assigned in ``file`` but does not hold yet (in key order).
    """
    validate_server_id(server_id)
    held_list = list(held)
    held_placements = {h.placement_id for h in held_list}
    index = {e.partition_id: (e, r) for e, r in file.ranges()}
    split_children: dict[str, tuple[KeyRange, tuple[Placement, ...]]] = {}
    for e, r in file.ranges():
        if e.splitting:
            assert e.split_partition_id_low is not None and e.split_partition_id_high is not None
            split_children[e.split_partition_id_low] = (KeyRange(r.begin, e.split_point), e.split_servers_low)
            split_children[e.split_partition_id_high] = (KeyRange(e.split_point, r.end), e.split_servers_high)

    def result(
        pid: str,
        placement_id: int,
        state: ReplicaState,
        krange: KeyRange,
        targets: Iterable[ReplicationTarget],
        splitting: bool = False,
    ) -> PartitionDiscovery:
        return PartitionDiscovery(
            pid, placement_id, state, krange, tuple(targets), file.txnid, file.sequence, splitting=splitting
        )

    def unload(h: HeldReplica, targets: list[ReplicationTarget]) -> PartitionDiscovery:
        state = ReplicaState.UNLOAD_FINAL if h.all_data_pushed else ReplicaState.UNLOAD
        return result(h.partition_id, h.placement_id, state, h.key_range, targets)

    def mine(placements: Iterable[Placement], placement_id: int) -> bool:
        return any(p.placement_id == placement_id and p.server_id == server_id for p in placements)

    results: list[PartitionDiscovery] = []
    for h in held_list:
        if h.partition_id in index:
            entry, krange = index[h.partition_id]
            if mine(entry.servers, h.placement_id):
                targets = _targets_of(entry, krange, h.placement_id, include_split=True)
                results.append(
                    result(h.partition_id, h.placement_id, ReplicaState.LIVE, krange, targets, entry.splitting)
                )
            elif mine(entry.servers_joining, h.placement_id):
                targets = _targets_of(entry, krange, h.placement_id, include_split=False)
                results.append(
                    result(h.partition_id, h.placement_id, ReplicaState.LOAD, krange, targets, entry.splitting)
                )
            else:  # leaving, removed, or re-assigned under a new placement id (ABA)
                results.append(unload(h, _targets_of(entry, krange, h.placement_id, include_split=True)))
        elif h.partition_id in split_children:
            krange, servers = split_children[h.partition_id]
            targets = [
                ReplicationTarget(h.partition_id, p, krange) for p in servers if p.placement_id != h.placement_id
            ]
            if mine(servers, h.placement_id):
                results.append(result(h.partition_id, h.placement_id, ReplicaState.LOAD, krange, targets))
            else:
                results.append(unload(h, targets))
        else:
            # The partition is gone (its split was finalized): push to whatever now covers its keys.
            targets = []
            for entry, krange in file.ranges():
                overlap = krange.intersection(h.key_range)
                if overlap is not None:
                    targets += _targets_of(entry, overlap, h.placement_id, include_split=False)
            results.append(unload(h, targets))

    for entry, krange in file.ranges():
        for state, placements in ((ReplicaState.LIVE, entry.servers), (ReplicaState.LOAD, entry.servers_joining)):
            for p in placements:
                if p.server_id == server_id and p.placement_id not in held_placements:
                    targets = _targets_of(entry, krange, p.placement_id, include_split=state is ReplicaState.LIVE)
                    results.append(result(entry.partition_id, p.placement_id, state, krange, targets, entry.splitting))
        for child_id in (entry.split_partition_id_low, entry.split_partition_id_high):
            if not entry.splitting or child_id is None:
                continue
            crange, servers = split_children[child_id]
            for p in servers:
                if p.server_id == server_id and p.placement_id not in held_placements:
                    targets = [ReplicationTarget(child_id, q, crange) for q in servers if q != p]
                    results.append(result(child_id, p.placement_id, ReplicaState.LOAD, crange, targets))
    return results


def discover_one(file: MetadataFile, server_id: str, replica: HeldReplica) -> PartitionDiscovery:
    """The discovery response for a single held replica."""
    return discover(file, server_id, [replica])[0]
