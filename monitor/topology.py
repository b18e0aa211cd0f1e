"""Which channels exist and who reads them (DESIGN.md section 3), from the METADATA files and ZooKeeper.

For every partition of every table (or one table): its placements (servers, joining, leaving),
its preferred leader (the first of ``servers``, :func:`metadata.placements.preferred_leader`), its
leader and epoch (``PartitionStatus`` from the election znodes), and from those the channels the
monitor watches:

- ``ingest.<pid>``, read by the leader group (committed = accepted-by-leader index);
- ``wal.<pid>.<placement>`` for every placement (it exists once that placement has led); each
  *other* placement of the partition is a reader: ``replica_group`` = its Ack index,
  ``consume_group`` = its Consume index;
- ``segments.<pid>.<placement>``, read by every other placement's ``replica_group`` (committed
  past a manifest = that replica acked the segment).

:func:`partition_topology` is pure (a METADATA file and the leader record in, channels out).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from metadata.metadata_file import MetadataFile, PartitionEntry
from metadata.placements import preferred_leader
from shoal.topics import TopicNames


@dataclass(frozen=True)
class ReplicaRef:
    server_id: str
    placement_id: int
    role: str
    """``servers`` | ``servers_joining`` | ``servers_leaving``."""


@dataclass(frozen=True)
class Reader:
    """One replica reading one channel, with the groups whose committed offsets are its indexes."""

    replica: ReplicaRef
    ack_group: str
    consume_group: str | None = None


@dataclass(frozen=True)
class Channel:
    kind: str
    """``ingest`` | ``wal`` | ``segments``."""
    topic: str
    owner: ReplicaRef | None
    """The placement that writes the channel (None for ingest)."""
    readers: tuple[Reader, ...]


@dataclass(frozen=True)
class PartitionTopology:
    table: str
    partition_id: str
    leader_server_id: str | None
    leader_placement_id: int | None
    leader_alive: bool
    epoch: int
    replicas: tuple[ReplicaRef, ...]
    ingest: Channel
    wal: tuple[Channel, ...]
    segments: tuple[Channel, ...]
    preferred_server_id: str | None = None
    """The partition's preferred leader (DESIGN.md section 7)."""
    campaigning: frozenset[int] = frozenset()
    """Placements in the partition's election line: a process serves each (its groups commit with
    ``assign()``, so Kafka lists no member for them; this tells a stuck reader from a stopped one)."""

    def channels(self) -> tuple[Channel, ...]:
        return (self.ingest, *self.wal, *self.segments)


def _replicas(entry: PartitionEntry) -> tuple[ReplicaRef, ...]:
    out = []
    seen = set()
    for role in ("servers", "servers_joining", "servers_leaving"):
        for p in getattr(entry, role):
            if p.placement_id not in seen:
                seen.add(p.placement_id)
                out.append(ReplicaRef(p.server_id, p.placement_id, role))
    return tuple(out)


def partition_topology(
    topics: TopicNames,
    table: str,
    entry: PartitionEntry,
    *,
    epoch: int,
    leader_server_id: str | None,
    leader_placement_id: int | None,
    leader_alive: bool,
    campaigning: Iterable[int] = (),
) -> PartitionTopology:
    pid = entry.partition_id
    replicas = _replicas(entry)
    leader_ref = ReplicaRef(leader_server_id or "-", leader_placement_id or 0, "leader")
    ingest = Channel("ingest", topics.ingest(pid), None, (Reader(leader_ref, topics.leader_group(pid)),))
    wal = []
    segments = []
    for owner in replicas:
        others = [r for r in replicas if r.placement_id != owner.placement_id]
        wal.append(
            Channel(
                "wal",
                topics.wal(pid, owner.placement_id),
                owner,
                tuple(
                    Reader(r, topics.replica_group(pid, r.placement_id), topics.consume_group(pid, r.placement_id))
                    for r in others
                ),
            )
        )
        segments.append(
            Channel(
                "segments",
                topics.segments(pid, owner.placement_id),
                owner,
                tuple(Reader(r, topics.replica_group(pid, r.placement_id)) for r in others),
            )
        )
    return PartitionTopology(
        table,
        pid,
        leader_server_id,
        leader_placement_id,
        leader_alive,
        epoch,
        replicas,
        ingest,
        tuple(wal),
        tuple(segments),
        preferred_leader(entry).server_id if entry.servers else None,
        frozenset(campaigning),
    )


def file_topology(topics: TopicNames, file: MetadataFile, coordinator: Any) -> list[PartitionTopology]:
    out = []
    for entry in file.partitions:
        st = coordinator.partition_status(entry.partition_id)
        out.append(
            partition_topology(
                topics,
                file.table.name,
                entry,
                epoch=st.epoch,
                leader_server_id=st.leader_server_id,
                leader_placement_id=st.leader_placement_id,
                leader_alive=st.leader_alive,
                campaigning=st.campaigning,
            )
        )
    return out


def read_topology(topics: TopicNames, coordinator: Any, table: str | None = None) -> list[PartitionTopology]:
    """Every partition of ``table`` (or of every table), with leaders and epochs as ZooKeeper has them now."""
    names = [table] if table is not None else coordinator.list_tables()
    out: list[PartitionTopology] = []
    for name in names:
        out.extend(file_topology(topics, coordinator.current(name), coordinator))
    return out
