"""Operations on the METADATA file, as pure transitions (EventQL table partitioning, section 4).

``create_file`` builds sequence 1 of a table. Every other change is a small frozen dataclass whose
``apply(base)`` returns the next version (new txnid, sequence + 1, ``parent_txnid = base.txnid``) or
raises :class:`~metadata.errors.InvalidOperationError` if the change does not fit the base. Nothing
here talks to ZooKeeper or Kafka: the coordinator stores the result and compare-and-swaps it in.

New placements carry placement ids that the caller allocated from ZooKeeper
(:mod:`metadata.placements`); the file refuses a placement id it already holds.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from metadata.errors import InvalidOperationError
from metadata.keyspace import UNBOUNDED, Keyspace
from metadata.metadata_file import ChangeType, MetadataFile, PartitionEntry, Placement, new_txnid
from metadata.placements import spread_leaders
from metadata.table import TableDefinition
from shoal.ids import new_partition_id, validate_partition_id


class Change(Protocol):
    """A change request: what to do to the METADATA file it is applied to."""

    change_type: ChangeType

    def apply(self, base: MetadataFile) -> MetadataFile: ...


def _check_split_point(keyspace: Keyspace, point: bytes) -> None:
    """A valid boundary above the keyspace's lowest key (a UINT64 split at 0 made a partition that
    could hold no key, for ever: there is no merge)."""
    keyspace.validate_boundary(point, "split point")
    if point <= keyspace.lowest():
        raise InvalidOperationError(
            f"the lowest key ({keyspace.format_key(keyspace.lowest())}) cannot be a split point"
        )


def create_file(
    table: TableDefinition,
    assignments: Sequence[Sequence[Placement]],
    split_points: Sequence[bytes] = (),
    *,
    partition_ids: Sequence[str] | None = None,
    txnid: str | None = None,
    now_ms: int | None = None,
) -> MetadataFile:
    """Sequence 1 of a table: one partition over the whole keyspace, or K from K-1 split points.

    ``assignments[i]`` are the servers (with fresh placement ids) of partition ``i``; each list holds
    ``table.replication_factor`` distinct servers. Each list is rotated by
    :func:`~metadata.placements.spread_leaders` so that its first placement, the partition's
    preferred leader, goes round robin over the servers across partitions.
    """
    points = list(split_points)
    if len(assignments) != len(points) + 1:
        raise InvalidOperationError(
            f"{len(points)} split points make {len(points) + 1} partitions, but {len(assignments)} server lists given"
        )
    for p in points:
        _check_split_point(table.keyspace, p)
    if any(b <= a for a, b in itertools.pairwise(points)):
        raise InvalidOperationError("split points must be strictly increasing (no duplicates)")
    ids = list(partition_ids) if partition_ids is not None else [new_partition_id() for _ in assignments]
    if len(ids) != len(assignments):
        raise InvalidOperationError("one partition id per partition")
    entries = []
    for begin, pid, servers in zip([UNBOUNDED, *points], ids, spread_leaders(assignments), strict=True):
        _check_server_list(
            servers, table.replication_factor, f"partition beginning at {table.keyspace.format_key(begin)}"
        )
        entries.append(PartitionEntry(begin=begin, partition_id=validate_partition_id(pid), servers=tuple(servers)))
    kwargs = {} if now_ms is None else {"created_at_ms": now_ms}
    return MetadataFile(
        table=table,
        txnid=txnid or new_txnid(),
        sequence=1,
        partitions=tuple(entries),
        parent_txnid=None,
        change=ChangeType.CREATE_TABLE,
        change_summary=f"create table {table.name} with {len(entries)} partition(s)",
        **kwargs,
    ).validate()


def _check_server_list(servers: Sequence[Placement], want: int, what: str) -> None:
    if len(servers) != want:
        raise InvalidOperationError(f"{what}: needs {want} server(s) (the replication factor), got {len(servers)}")
    names = [p.server_id for p in servers]
    if len(set(names)) != len(names):
        raise InvalidOperationError(f"{what}: a server is listed twice: {names}")


def _replace_entry(base: MetadataFile, index: int, *entries: PartitionEntry) -> list[PartitionEntry]:
    parts = list(base.partitions)
    parts[index : index + 1] = entries
    return parts


def _check_new_placements(base: MetadataFile, placements: Sequence[Placement]) -> None:
    used = base.placement_ids()
    for p in placements:
        if p.placement_id in used:
            raise InvalidOperationError(
                f"placement id {p.placement_id} is already used in this table; every assignment needs a new one"
            )


@dataclass(frozen=True)
class SplitPartition:
    """Record an ongoing split of a partition at ``split_point`` (initiated by its leader)."""

    partition_id: str
    split_point: bytes
    split_servers_low: tuple[Placement, ...]
    split_servers_high: tuple[Placement, ...]
    split_partition_id_low: str = ""
    split_partition_id_high: str = ""
    change_type = ChangeType.SPLIT_PARTITION

    def __post_init__(self) -> None:
        object.__setattr__(self, "split_servers_low", tuple(self.split_servers_low))
        object.__setattr__(self, "split_servers_high", tuple(self.split_servers_high))
        if not self.split_partition_id_low:
            object.__setattr__(self, "split_partition_id_low", new_partition_id())
        if not self.split_partition_id_high:
            object.__setattr__(self, "split_partition_id_high", new_partition_id())

    def apply(self, base: MetadataFile) -> MetadataFile:
        i = base.index_of(self.partition_id)
        entry = base.partitions[i]
        ks = base.table.keyspace
        if entry.splitting:
            raise SplitConflictError(
                f"partition {self.partition_id} is already splitting at {ks.format_key(entry.split_point)}",
                partition_id=self.partition_id,
                operation="split",
            )
        if entry.servers_joining or entry.servers_leaving:
            busy = [str(p) for p in entry.servers_joining + entry.servers_leaving]
            raise SplitConflictError(
                f"partition {self.partition_id} has a join or leave in progress ({', '.join(busy)}); "
                "finish it before splitting",
                partition_id=self.partition_id,
                operation="join/leave",
            )
        _check_split_point(ks, self.split_point)
        krange = base.range_of(i)
        if self.split_point in (krange.begin, krange.end):
            raise InvalidOperationError(
                f"split point {ks.format_key(self.split_point)} equals a boundary of partition {self.partition_id} "
                f"{krange.describe(ks)}: a split point must lie strictly inside it"
            )
        if not krange.strictly_inside(self.split_point):
            raise InvalidOperationError(
                f"split point {ks.format_key(self.split_point)} is outside partition {self.partition_id} "
                f"{krange.describe(ks)}"
            )
        rf = base.table.replication_factor
        _check_server_list(self.split_servers_low, rf, "low split partition")
        _check_server_list(self.split_servers_high, rf, "high split partition")
        _check_new_placements(base, self.split_servers_low + self.split_servers_high)
        new = replace(
            entry,
            splitting=True,
            split_point=self.split_point,
            split_partition_id_low=validate_partition_id(self.split_partition_id_low),
            split_partition_id_high=validate_partition_id(self.split_partition_id_high),
            split_servers_low=self.split_servers_low,
            split_servers_high=self.split_servers_high,
        )
        return base.derive(
            _replace_entry(base, i, new),
            self.change_type,
            f"split {self.partition_id} at {ks.format_key(self.split_point)} into "
            f"{self.split_partition_id_low} and {self.split_partition_id_high}",
        )


GtidPair = tuple[int, int]
"""A GTID as ``(epoch, seq)`` (DESIGN.md section 2); compared as a tuple."""


class SplitConflictError(InvalidOperationError):
    """A split of a partition that is already splitting, or that has another lifecycle operation open."""

    def __init__(self, message: str, *, partition_id: str, operation: str) -> None:
        super().__init__(message)
        self.partition_id = partition_id
        self.operation = operation
        """The operation in progress: ``split`` or ``join/leave``."""


class SplitNotAckedError(InvalidOperationError):
    """SPLIT_FINALIZE refused: some child placement has not acknowledged the parent's data.

    ``through`` is the parent's last accepted GTID; ``missing`` maps each child placement id that
    is behind to the GTID it acknowledged (None: nothing, or not reported).
    """

    def __init__(self, partition_id: str, through: GtidPair | None, missing: dict[int, GtidPair | None]) -> None:
        behind = ", ".join(f"placement {p} acked {a}" for p, a in sorted(missing.items()))
        super().__init__(
            f"cannot finalize the split of {partition_id}: the parent's last accepted GTID is {through}, "
            f"but not every child placement acknowledged it ({behind})"
        )
        self.partition_id = partition_id
        self.through = through
        self.missing = missing


@dataclass(frozen=True)
class FinalizeSplit:
    """Replace a splitting partition by its two children (SPLIT_FINALIZE, seed 000 section 3.8).

    Committed only with the evidence that every child placement acknowledged everything up to the
    parent's last accepted GTID: ``through`` is that GTID (None when the parent accepted no row),
    ``acked`` maps every placement id of ``split_servers_low`` and ``split_servers_high`` to the
    GTID up to which it acknowledged the parent's data. A placement missing from ``acked`` or behind
    ``through`` refuses the change with :class:`SplitNotAckedError`.
    """

    partition_id: str
    through: GtidPair | None = None
    acked: Mapping[int, GtidPair | None] = field(default_factory=dict)
    change_type = ChangeType.FINALIZE_SPLIT

    def apply(self, base: MetadataFile) -> MetadataFile:
        i = base.index_of(self.partition_id)
        entry = base.partitions[i]
        if not entry.splitting or entry.split_partition_id_low is None or entry.split_partition_id_high is None:
            raise InvalidOperationError(f"partition {self.partition_id} is not splitting")
        missing = split_acks_missing(entry, self.through, self.acked)
        if missing:
            raise SplitNotAckedError(self.partition_id, self.through, missing)
        low = PartitionEntry(
            begin=entry.begin, partition_id=entry.split_partition_id_low, servers=entry.split_servers_low
        )
        high = PartitionEntry(
            begin=entry.split_point, partition_id=entry.split_partition_id_high, servers=entry.split_servers_high
        )
        return base.derive(
            _replace_entry(base, i, low, high),
            self.change_type,
            f"finalize split of {self.partition_id} into {low.partition_id} and {high.partition_id} "
            f"(children acked through GTID {self.through})",
        )


def split_acks_missing(
    entry: PartitionEntry, through: GtidPair | None, acked: Mapping[int, GtidPair | None]
) -> dict[int, GtidPair | None]:
    """The child placements of a splitting ``entry`` that have not acked ``through`` (-> what they acked)."""
    missing: dict[int, GtidPair | None] = {}
    for p in entry.split_servers_low + entry.split_servers_high:
        if p.placement_id not in acked:
            missing[p.placement_id] = None
            continue
        got = acked[p.placement_id]
        if through is not None and (got is None or tuple(got) < tuple(through)):
            missing[p.placement_id] = got
    return missing


class LifecycleConflictError(InvalidOperationError):
    """A join or leave that conflicts with the partition's state or another lifecycle operation in
    progress on it (a server already listed or still leaving, a split under way)."""

    def __init__(self, message: str, *, partition_id: str, server_id: str, conflict: str) -> None:
        super().__init__(message)
        self.partition_id = partition_id
        self.server_id = server_id
        self.conflict = conflict
        """``servers`` / ``servers_joining`` / ``servers_leaving`` (where the server is listed) or ``splitting``."""


def _check_not_listed(entry: PartitionEntry, server_id: str) -> None:
    """A server may be added unless it is listed (a leaving one may come back under a new placement id)."""
    found = entry.find(server_id)
    if found is not None and found[0] != "servers_leaving":
        raise LifecycleConflictError(
            f"server {server_id} is already in {found[0]} of partition {entry.partition_id} ({found[1]})",
            partition_id=entry.partition_id,
            server_id=server_id,
            conflict=found[0],
        )


def _check_not_splitting(entry: PartitionEntry, server_id: str, action: str) -> None:
    """Joins and leaves wait for a split to finish: the split's targets were chosen from the servers."""
    if entry.splitting:
        raise LifecycleConflictError(
            f"cannot {action} server {server_id}: partition {entry.partition_id} is splitting; "
            "retry once the split is finalized",
            partition_id=entry.partition_id,
            server_id=server_id,
            conflict="splitting",
        )


@dataclass(frozen=True)
class JoinServer:
    """Place a server in the joining list (LOAD): it receives data but serves nothing yet."""

    partition_id: str
    placement: Placement
    change_type = ChangeType.JOIN_SERVER

    def apply(self, base: MetadataFile) -> MetadataFile:
        i = base.index_of(self.partition_id)
        entry = base.partitions[i]
        _check_not_splitting(entry, self.placement.server_id, "add")
        _check_not_listed(entry, self.placement.server_id)
        _check_new_placements(base, [self.placement])
        new = replace(entry, servers_joining=(*entry.servers_joining, self.placement))
        return base.derive(
            _replace_entry(base, i, new), self.change_type, f"{self.placement} joins {self.partition_id} (LOAD)"
        )


@dataclass(frozen=True)
class FinalizeJoin:
    """Move a joining placement into the live server list (JOIN_FINALIZE, committed by the leader)."""

    partition_id: str
    placement_id: int
    change_type = ChangeType.FINALIZE_JOIN

    def apply(self, base: MetadataFile) -> MetadataFile:
        i = base.index_of(self.partition_id)
        entry = base.partitions[i]
        match = [p for p in entry.servers_joining if p.placement_id == self.placement_id]
        if not match:
            raise InvalidOperationError(f"placement {self.placement_id} is not joining partition {self.partition_id}")
        new = replace(
            entry,
            servers=(*entry.servers, match[0]),
            servers_joining=tuple(p for p in entry.servers_joining if p.placement_id != self.placement_id),
        )
        return base.derive(
            _replace_entry(base, i, new), self.change_type, f"{match[0]} finished joining {self.partition_id} (LIVE)"
        )


@dataclass(frozen=True)
class LeaveServer:
    """Remove a server from the live or joining list; its placement moves to ``servers_leaving``.

    The leaving replica pushes its unreplicated data to the remaining ones (UNLOAD) and is then
    dropped from the leaving list by :class:`FinalizeLeave`. A partition never loses its last
    live server, and its LIVE servers do not fall below the replication factor unless
    ``allow_under_replication`` (joining servers do not count; removing a joining one is always allowed).
    """

    partition_id: str
    server_id: str
    allow_under_replication: bool = False
    change_type = ChangeType.LEAVE_SERVER

    def apply(self, base: MetadataFile) -> MetadataFile:
        i = base.index_of(self.partition_id)
        entry = base.partitions[i]
        found = entry.find(self.server_id)
        if found is None:
            raise InvalidOperationError(f"server {self.server_id} does not serve partition {self.partition_id}")
        if found[0] == "servers_leaving":
            raise LifecycleConflictError(
                f"server {self.server_id} does not serve partition {self.partition_id}: "
                f"it is already leaving ({found[1]})",
                partition_id=self.partition_id,
                server_id=self.server_id,
                conflict="servers_leaving",
            )
        _check_not_splitting(entry, self.server_id, "remove")
        list_name, placement = found
        servers = tuple(p for p in entry.servers if p != placement)
        joining = tuple(p for p in entry.servers_joining if p != placement)
        if not servers:
            raise InvalidOperationError(
                f"server {self.server_id} is the last live server of partition {self.partition_id}; "
                "add (or force-join) another server first"
            )
        # only LIVE replicas count: a joining one may still be catching up, and removing a LIVE
        # replica on its account would leave fewer copies than the replication factor until it is
        # LIVE (or for good, if it never gets there). Cancelling a join removes no LIVE replica.
        rf = base.table.replication_factor
        if list_name == "servers" and len(servers) < rf and not self.allow_under_replication:
            waiting = f" ({len(joining)} more joining, not LIVE yet: wait for them)" if joining else ""
            raise InvalidOperationError(
                f"removing {self.server_id} leaves partition {self.partition_id} with "
                f"{len(servers)} LIVE replica(s), below the replication factor {rf}{waiting}"
            )
        new = replace(
            entry, servers=servers, servers_joining=joining, servers_leaving=(*entry.servers_leaving, placement)
        )
        return base.derive(
            _replace_entry(base, i, new),
            self.change_type,
            f"{placement} leaves {self.partition_id} (was in {list_name})",
        )


@dataclass(frozen=True)
class FinalizeLeave:
    """Drop a leaving placement once it has pushed out its data (it reached UNLOAD_FINAL)."""

    partition_id: str
    placement_id: int
    change_type = ChangeType.FINALIZE_LEAVE

    def apply(self, base: MetadataFile) -> MetadataFile:
        i = base.index_of(self.partition_id)
        entry = base.partitions[i]
        if not any(p.placement_id == self.placement_id for p in entry.servers_leaving):
            raise InvalidOperationError(f"placement {self.placement_id} is not leaving partition {self.partition_id}")
        new = replace(
            entry, servers_leaving=tuple(p for p in entry.servers_leaving if p.placement_id != self.placement_id)
        )
        return base.derive(
            _replace_entry(base, i, new),
            self.change_type,
            f"placement {self.placement_id} finished leaving {self.partition_id}",
        )


@dataclass(frozen=True)
class ForceJoin:
    """Put a server straight into the live list (only for when every server of the partition is down)."""

    partition_id: str
    placement: Placement
    change_type = ChangeType.FORCE_JOIN

    def apply(self, base: MetadataFile) -> MetadataFile:
        i = base.index_of(self.partition_id)
        entry = base.partitions[i]
        # a split's finalize keeps only the placements it chose when it began: this one would be
        # dropped without passing through servers_leaving, undoing the operator's recovery
        _check_not_splitting(entry, self.placement.server_id, "force-join")
        _check_not_listed(entry, self.placement.server_id)
        _check_new_placements(base, [self.placement])
        new = replace(entry, servers=(*entry.servers, self.placement))
        return base.derive(
            _replace_entry(base, i, new), self.change_type, f"{self.placement} force-joins {self.partition_id} (LIVE)"
        )


def apply_change(base: MetadataFile, change: Change) -> MetadataFile:
    """Apply ``change`` to ``base`` (UnknownPartitionError / InvalidOperationError if it does not fit)."""
    return change.apply(base)


__all__ = [
    "Change",
    "FinalizeJoin",
    "FinalizeLeave",
    "FinalizeSplit",
    "ForceJoin",
    "JoinServer",
    "LeaveServer",
    "LifecycleConflictError",
    "SplitConflictError",
    "SplitNotAckedError",
    "SplitPartition",
    "apply_change",
    "create_file",
    "split_acks_missing",
]
