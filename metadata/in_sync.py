"""The in-sync set of a partition's replicas, in ZooKeeper (DESIGN.md sections 6 and 7; Kafka's ISR).

The leader decides which of the partition's other placements are out of sync (dead, or lagging
past the replica-lag bounds: :mod:`storage_node.replication.tail`) and records them in one znode,
``<root>/partitions/<partition_id>/in_sync``::

    {"epoch": 7, "placement_id": 12, "out_of_sync": [13]}

Every write is fenced by the leader's epoch: one ZooKeeper transaction checks that the epoch znode
still has the version that names the writer's epoch, and sets the in-sync znode at the version
read (kazoo's :class:`~kazoo.retry.KazooRetry` retries a lost race on the in-sync znode; a
superseded epoch raises :class:`~shoal.errors.StaleEpochError` at once), so a stale leader cannot
change the set.

The znode stores the *out-of-sync* placements: every placement of the partition not listed is in
sync. A partition without the znode has all its replicas in sync (as Kafka's ISR starts as every
assigned replica), and a placement that leaves the partition simply stops being asked about.

Rules (Kafka's, with ``unclean.leader.election.enable=false``): a replica leaves the set when it lags
past a bound or is dead; it rejoins only once caught up; an out-of-sync replica is never elected
while an in-sync placement of the partition exists, even one whose node is restarting and so is not
in the election line (:func:`prefer_in_sync`: the line waits for it). Only when no LIVE placement is
in sync any more (an operator removed the dead ones: ``shoal table remove-replica``) may an
out-of-sync replica lead, as Kafka's unclean election would.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.retry import KazooRetry

from metadata.election import EpochFence, candidates
from metadata.errors import MetadataDecodeError
from metadata.security import OPEN, ZkSecurity
from metadata.zk_client import cas_retry, retrying, zk_errors
from metadata.zk_layout import MAX_ZNODE_BYTES, EpochRecord, ZkLayout
from shoal import jsonio
from shoal.errors import InvalidIdError, MetadataConflictError, StaleEpochError
from shoal.ids import validate_placement_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InSyncRecord:
    """The out-of-sync placements of a partition, and the leader epoch that recorded them."""

    partition_id: str
    out_of_sync: frozenset[int] = frozenset()
    epoch: int = 0
    placement_id: int | None = None
    """The leader placement that wrote the record (None: never written)."""
    version: int = -1
    """The znode's version (-1: no znode)."""

    def in_sync(self, placements: Iterable[int]) -> tuple[int, ...]:
        """The placements of ``placements`` that are in sync, in the order given."""
        return tuple(p for p in placements if p not in self.out_of_sync)

    def encode(self) -> bytes:
        return json.dumps(
            {"epoch": self.epoch, "placement_id": self.placement_id, "out_of_sync": sorted(self.out_of_sync)},
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, partition_id: str, data: bytes, version: int) -> InSyncRecord:
        if not data:
            return cls(partition_id, version=version)
        try:
            if len(data) > MAX_ZNODE_BYTES:
                raise ValueError(f"{len(data)} bytes")
            obj: Any = jsonio.loads_checked(data)
            epoch = obj["epoch"]
            if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
                raise ValueError(f"epoch {epoch!r:.40}")
            placement = obj.get("placement_id")
            out = obj["out_of_sync"]
            if not isinstance(out, list):
                raise ValueError("out_of_sync is not a list")
            return cls(
                partition_id,
                frozenset(validate_placement_id(p) for p in out),
                epoch,
                None if placement is None else validate_placement_id(placement),
                version,
            )
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, InvalidIdError) as exc:
            raise MetadataDecodeError(f"in-sync znode of partition {partition_id} is invalid: {exc}") from exc


def read_in_sync(zk: Any, layout: ZkLayout, partition_id: str) -> InSyncRecord:
    """The partition's in-sync record (every replica in sync when there is none)."""
    with zk_errors(f"read the in-sync set of {partition_id}"):
        try:
            data, stat = zk.get(layout.in_sync(partition_id))
        except NoNodeError:
            return InSyncRecord(partition_id)
    return InSyncRecord.decode(partition_id, data, stat.version)


def in_sync(zk: Any, layout: ZkLayout, partition_id: str, placements: Iterable[int]) -> tuple[int, ...]:
    """Which of ``placements`` are in sync (for the election preference: DESIGN.md section 7)."""
    return read_in_sync(zk, layout, partition_id).in_sync(placements)


def prefer_in_sync(line: Sequence[int], out_of_sync: Iterable[int], placements: Iterable[int]) -> tuple[int, ...]:
    """Pure: the candidates (placement ids, in election order) that may lead (DESIGN.md section 7).

    ``placements``: the partition's LIVE placements in METADATA (its ``servers``). The in-sync
    candidates; none while an in-sync placement is not in line (its node restarting: the line waits
    for it, as Kafka does with unclean leader election off: an out-of-sync replica did not hold the
    old leader's Tail back, so the old leader's WAL may be truncated above what it holds); every
    candidate only once no LIVE placement is in sync (an operator removed the in-sync ones)."""
    out = set(out_of_sync)
    synced = tuple(p for p in line if p not in out)
    if synced:
        return synced
    if any(p not in out for p in placements):
        return ()
    return tuple(line)


def write_out_of_sync(
    zk: Any,
    layout: ZkLayout,
    fence: EpochFence,
    placement_id: int,
    out_of_sync: Iterable[int],
    *,
    security: ZkSecurity = OPEN,
    retry: KazooRetry | None = None,
) -> InSyncRecord:
    """Record ``out_of_sync`` as the partition's out-of-sync placements, fenced by ``fence``.

    StaleEpochError when the partition's epoch is no longer ``fence.epoch`` (nothing is written).
    """
    pid = fence.partition_id
    path, epoch_path = layout.in_sync(pid), layout.epoch(pid)
    wanted = frozenset(validate_placement_id(p) for p in out_of_sync)

    def attempt() -> InSyncRecord:
        with zk_errors(f"record the in-sync set of {pid}"):
            try:
                edata, estat = zk.get(epoch_path)
            except NoNodeError as exc:
                raise StaleEpochError(f"partition {pid} has no leader epoch") from exc
            current = EpochRecord.decode(pid, edata, estat.version)
            if current.epoch != fence.epoch:
                raise StaleEpochError(
                    f"partition {pid}: epoch {fence.epoch} is stale, the current one is {current.epoch}"
                )
            try:
                data, stat = zk.get(path)
                version: int | None = stat.version
                old = InSyncRecord.decode(pid, data, stat.version)
            except NoNodeError:
                version, old = None, InSyncRecord(pid)
            new = InSyncRecord(pid, wanted, fence.epoch, placement_id)
            if old.out_of_sync == wanted and old.epoch == fence.epoch and old.placement_id == placement_id:
                return old
            txn = zk.transaction()
            txn.check(epoch_path, estat.version)
            if version is None:
                txn.create(path, new.encode(), acl=security.acls())
            else:
                txn.set_data(path, new.encode(), version=version)
            results = txn.commit()
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            raise StaleEpochError(f"partition {pid}: epoch {fence.epoch} was superseded")
        if isinstance(results[1], (BadVersionError, NodeExistsError, NoNodeError)):
            raise MetadataConflictError(f"partition {pid}: the in-sync set changed meanwhile")
        if isinstance(results[1], Exception):
            raise MetadataConflictError(f"partition {pid}: cannot record the in-sync set: {results[1]!r}")
        log.info(
            "partition %s: out-of-sync replicas %s -> %s (epoch %d)",
            pid,
            sorted(old.out_of_sync),
            sorted(wanted),
            fence.epoch,
        )
        return InSyncRecord(pid, wanted, fence.epoch, placement_id, (version if version is not None else -1) + 1)

    return retrying(retry or cas_retry(), attempt)


class PartitionInSync:
    """One leader's view of its partition's replicas in ZooKeeper: who is alive (a candidate in the
    election: every LIVE replica campaigns), who is out of sync, and the fenced write of that set."""

    def __init__(
        self,
        zk: Any,
        layout: ZkLayout,
        partition_id: str,
        placement_id: int,
        fence: Callable[[], EpochFence],
        *,
        security: ZkSecurity = OPEN,
    ) -> None:
        """``fence()``: the leader's current epoch fence, raising when it no longer leads."""
        self.zk = zk
        self.layout = layout
        self.partition_id = partition_id
        self.placement_id = placement_id
        self.fence = fence
        self.security = security

    def alive(self) -> frozenset[int]:
        return frozenset(c.placement_id for c in candidates(self.zk, self.layout, self.partition_id))

    def out_of_sync(self) -> frozenset[int]:
        return read_in_sync(self.zk, self.layout, self.partition_id).out_of_sync

    def mark(self, out_of_sync: Iterable[int]) -> frozenset[int]:
        rec = write_out_of_sync(
            self.zk, self.layout, self.fence(), self.placement_id, out_of_sync, security=self.security
        )
        return rec.out_of_sync
