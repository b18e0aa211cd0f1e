"""The METADATA commit (EventQL table partitioning, section 5): build, store, then compare-and-swap.

Per table, ZooKeeper holds ``metadata_txnid``, ``metadata_sequence`` and ``metadata_servers`` in one
znode whose version is the CAS token. A change is committed like this:

1. read the table znode; the change must be based on its current txnid (else ``StaleTxnidError``);
2. load the file of that txnid from the store and apply the change to it: a new file with a new
   random txnid and sequence + 1;
3. store the new file durably (the compacted metadata topic, ``acks=all``);
4. compare-and-swap the znode from the version read in step 1 to the new txnid and sequence
   (atomically with a check of the partition's leader epoch when the change is fenced).

If the CAS loses (another change was committed, or the metadata servers changed), a tombstone is
written for the aborted file and :class:`~shoal.errors.MetadataConflictError` is raised. If the
connection breaks during the CAS the outcome is looked up before anything else is done, so a
committed file is never tombstoned and an aborted one never reported as committed.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.retry import KazooRetry

from metadata.election import EpochFence, candidates, read_epoch
from metadata.errors import (
    CommitOutcomeUnknownError,
    InvalidOperationError,
    MetadataConflictError,
    MetadataFileNotFoundError,
    StaleEpochError,
    StaleTxnidError,
    TableExistsError,
    UnknownTableError,
)
from metadata.metadata_file import MetadataFile, Placement, validate_txnid
from metadata.operations import (
    Change,
    FinalizeJoin,
    FinalizeLeave,
    FinalizeSplit,
    ForceJoin,
    JoinServer,
    LeaveServer,
    SplitPartition,
    create_file,
)
from metadata.placements import PlacementAllocator
from metadata.security import OPEN, ZkSecurity
from metadata.store import FileStore
from metadata.table import TableDefinition
from metadata.zk_client import ZooKeeperUnavailableError, cas_retry, ensure_path, retrying, zk_errors
from metadata.zk_layout import EpochRecord, TableHead, ZkLayout
from shoal.errors import MetadataError
from shoal.ids import validate_server_id, validate_table_name

log = logging.getLogger(__name__)
DEFAULT_METADATA_SERVERS = 3


@dataclass(frozen=True)
class PartitionStatus:
    """Leader and epoch of one partition, as ZooKeeper has them now (for ``describe``)."""

    partition_id: str
    epoch: int
    leader_server_id: str | None
    leader_placement_id: int | None
    leader_alive: bool
    campaigning: tuple[int, ...] = ()
    """Placement ids in the partition's election line, in order: every LIVE replica whose node is up
    campaigns, so a placement here has a process serving it."""


class MetadataCoordinator:
    """Creates tables and commits changes to their METADATA files. Thread-safe (no local state)."""

    def __init__(
        self,
        zk: Any,
        store: FileStore,
        *,
        layout: ZkLayout | None = None,
        security: ZkSecurity = OPEN,
        retry: KazooRetry | None = None,
    ) -> None:
        self.zk = zk
        self.store = store
        self.layout = layout or ZkLayout()
        self.security = security
        self.retry = retry or cas_retry()
        self.placements = PlacementAllocator(zk, self.layout, security, floor=self._highest_placement_id)

    # -- reading --------------------------------------------------------------------------------

    def head(self, table: str) -> TableHead:
        path = self.layout.table(table)
        with zk_errors(f"read table {table}"):
            try:
                data, stat = self.zk.get(path)
            except NoNodeError as exc:
                raise UnknownTableError(f"unknown table {table!r}") from exc
        return TableHead.decode(table, data, stat.version)

    def current(self, table: str) -> MetadataFile:
        """The current METADATA file of ``table`` (the one the znode's txnid names)."""
        head = self.head(table)
        file = self.store.get(table, head.metadata_txnid)
        self._check_matches(head, file)
        return file

    @staticmethod
    def _check_matches(head: TableHead, file: MetadataFile) -> None:
        if file.sequence != head.metadata_sequence or file.txnid != head.metadata_txnid:
            raise MetadataError(
                f"table {head.table}: stored file {file.txnid}@{file.sequence} does not match the znode "
                f"{head.metadata_txnid}@{head.metadata_sequence}"
            )

    def _highest_placement_id(self) -> int:
        """The highest placement id in any stored METADATA version of any table (0 with none)."""
        tables = set(self.list_tables()) | self.store.tables()
        return max((p for t in tables for f in self.store.versions(t) for p in f.placement_ids()), default=0)

    def list_tables(self) -> list[str]:
        with zk_errors("list tables"):
            try:
                return sorted(self.zk.get_children(self.layout.tables))
            except NoNodeError:
                return []

    def history(self, table: str) -> list[MetadataFile]:
        """The committed versions of ``table``, oldest first: the chain from the current file back."""
        head = self.head(table)
        by_txnid = {f.txnid: f for f in self.store.versions(table)}
        chain: list[MetadataFile] = []
        txnid: str | None = head.metadata_txnid
        while txnid is not None:
            file = by_txnid.get(txnid) or self.store.get(table, txnid)
            chain.append(file)
            txnid = file.parent_txnid
            if len(chain) > head.metadata_sequence:
                raise MetadataError(f"table {table}: METADATA chain is longer than its sequence (a cycle?)")
        chain.reverse()
        for i, f in enumerate(chain, start=1):
            if f.sequence != i:
                raise MetadataError(f"table {table}: METADATA chain has sequence {f.sequence} at position {i}")
        return chain

    def partition_status(self, partition_id: str) -> PartitionStatus:
        """Epoch and elected leader of a partition; ``leader_alive`` if that placement still leads."""
        rec = read_epoch(self.zk, self.layout, partition_id)
        line = candidates(self.zk, self.layout, partition_id)
        alive = bool(line) and rec.placement_id is not None and line[0].placement_id == rec.placement_id
        return PartitionStatus(
            partition_id, rec.epoch, rec.server_id, rec.placement_id, alive, tuple(c.placement_id for c in line)
        )

    # -- create ---------------------------------------------------------------------------------

    def create_table(
        self,
        table: TableDefinition,
        servers: Sequence[str],
        split_points: Sequence[bytes] = (),
        *,
        metadata_servers: Sequence[str] | None = None,
    ) -> MetadataFile:
        """Create a table: sequence 1 with one partition (or one per split point + 1), stored then published.

        Partition ``i`` is placed on ``replication_factor`` consecutive servers of ``servers`` starting
        at ``i`` (round-robin). The metadata servers default to three random servers of the list.
        """
        names = [validate_server_id(s) for s in servers]
        if len(set(names)) != len(names):
            raise InvalidOperationError(f"servers listed twice: {names}")
        rf = table.replication_factor
        if len(names) < rf:
            raise InvalidOperationError(f"table {table.name} needs {rf} servers (replication factor), got {len(names)}")
        path = self.layout.table(table.name)
        with zk_errors(f"create table {table.name}"):
            if self.zk.exists(path):
                raise TableExistsError(f"table {table.name!r} already exists")
        nparts = len(split_points) + 1
        ids = iter(self.placements.allocate(nparts * rf))
        assignments = [[Placement(names[(i + j) % len(names)], next(ids)) for j in range(rf)] for i in range(nparts)]
        file = create_file(table, assignments, split_points)
        if metadata_servers is None:
            metadata_servers = random.sample(names, min(DEFAULT_METADATA_SERVERS, len(names)))
        mservers = tuple(validate_server_id(s) for s in metadata_servers)
        head = TableHead(table.name, file.txnid, 1, mservers)
        self.store.put(file)
        ensure_path(self.zk, self.layout.tables, self.security)
        with zk_errors(f"create table {table.name}"):
            try:
                self.zk.create(path, head.encode(), acl=self.security.acls())
            except NodeExistsError as exc:
                self._tombstone(table.name, file.txnid)
                raise TableExistsError(f"table {table.name!r} already exists") from exc
            except (ConnectionLoss, SessionExpiredError):
                if self._committed(table.name, file):
                    return file
                raise
        log.info("created table %s (txnid %s, %d partitions)", table.name, file.txnid, nparts)
        return file

    # -- commit ---------------------------------------------------------------------------------

    def commit(
        self,
        table: str,
        change: Change,
        based_on_txnid: str,
        *,
        fence: EpochFence | None = None,
    ) -> MetadataFile:
        """Commit ``change`` on top of ``based_on_txnid`` (section 5.1). Returns the new current file.

        Raises StaleTxnidError (a MetadataConflictError) if the base is not current, or
        MetadataConflictError if another change won the CAS (the new file is then tombstoned), or
        StaleEpochError if ``fence`` names an epoch that is no longer current.
        """
        validate_table_name(table)
        validate_txnid(based_on_txnid)
        head = self.head(table)
        if head.metadata_txnid != based_on_txnid:
            raise StaleTxnidError(
                f"table {table}: change is based on txnid {based_on_txnid}, but the current one is "
                f"{head.metadata_txnid} (sequence {head.metadata_sequence})"
            )
        base = self.store.get(table, based_on_txnid)
        self._check_matches(head, base)
        epoch_version = self._check_fence(fence) if fence is not None else None
        new = change.apply(base)
        new_head = TableHead(table, new.txnid, new.sequence, head.metadata_servers)
        self.store.put(new)
        try:
            self._cas(head, new_head, fence, epoch_version)
        except (MetadataConflictError, StaleEpochError, UnknownTableError):
            self._tombstone(table, new.txnid)  # the CAS did not happen: the stored file is never current
            raise
        except ZooKeeperUnavailableError as exc:
            try:
                committed = not self._settle(head) and self._committed(table, new)
            except MetadataError as exc2:
                raise CommitOutcomeUnknownError(
                    f"table {table}: connection lost during the CAS of {new.txnid}; outcome unknown: {exc2}"
                ) from exc
            if not committed:
                self._tombstone(table, new.txnid)
                raise MetadataConflictError(
                    f"table {table}: the CAS of {new.txnid} did not happen (connection lost); nothing committed"
                ) from exc
        log.info("table %s: committed %s -> sequence %d (%s)", table, new.change.value, new.sequence, new.txnid)
        return new

    def _check_fence(self, fence: EpochFence) -> int:
        with zk_errors(f"read epoch of {fence.partition_id}"):
            try:
                data, stat = self.zk.get(self.layout.epoch(fence.partition_id))
            except NoNodeError as exc:
                raise StaleEpochError(f"partition {fence.partition_id} has no leader epoch") from exc
        rec = EpochRecord.decode(fence.partition_id, data, stat.version)
        if rec.epoch != fence.epoch:
            raise StaleEpochError(
                f"partition {fence.partition_id}: epoch {fence.epoch} is stale, the current one is {rec.epoch}"
            )
        return int(stat.version)

    def _cas(self, head: TableHead, new_head: TableHead, fence: EpochFence | None, epoch_version: int | None) -> None:
        path = self.layout.table(head.table)
        with zk_errors(f"commit to table {head.table}"):
            if fence is None:
                try:
                    self.zk.set(path, new_head.encode(), version=head.version)
                except BadVersionError as exc:
                    raise MetadataConflictError(
                        f"table {head.table}: another change was committed after sequence {head.metadata_sequence}"
                    ) from exc
                except NoNodeError as exc:
                    raise UnknownTableError(f"table {head.table} disappeared during the commit") from exc
                return
            assert epoch_version is not None
            txn = self.zk.transaction()
            txn.check(self.layout.epoch(fence.partition_id), epoch_version)
            txn.set_data(path, new_head.encode(), version=head.version)
            results = txn.commit()
            if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
                raise StaleEpochError(f"partition {fence.partition_id}: epoch {fence.epoch} was superseded")
            if isinstance(results[1], Exception):
                raise MetadataConflictError(
                    f"table {head.table}: another change was committed after sequence {head.metadata_sequence}"
                )

    def _settle(self, head: TableHead) -> bool:
        """After a connection loss during the CAS over ``head``: write ``head`` again at its version.
        True when that write happened: the lost CAS, still in flight maybe, can never land now (the
        version it needs is gone), so the new file is not committed. False when the znode moved on
        (the lost CAS landed, or another change did): :meth:`_committed` then reads it. Without
        this, a read served by a server that had not applied the lost CAS yet said "not committed",
        the file was tombstoned, and the CAS landed after: the table named a tombstoned file."""
        path = self.layout.table(head.table)

        def write() -> bool:
            with zk_errors(f"settle the commit to table {head.table}"):
                try:
                    self.zk.set(path, head.encode(), version=head.version)
                except BadVersionError:
                    return False
                except NoNodeError:
                    return True
            return True

        return retrying(self.retry, write, on=ZooKeeperUnavailableError)

    def _committed(self, table: str, file: MetadataFile) -> bool:
        """After a connection loss: is ``file`` in the committed chain? (Reads with retries, after a
        ``sync``: the server answering has applied every write the leader committed before it.)"""

        def read_head() -> TableHead | None:
            with zk_errors(f"sync table {table}"):
                self.zk.sync(self.layout.table(table))
            try:
                return self.head(table)
            except UnknownTableError:
                return None

        try:
            head = retrying(self.retry, read_head, on=MetadataError)
        except MetadataError as exc:
            raise CommitOutcomeUnknownError(f"table {table}: cannot read the table znode: {exc}") from exc
        if head is None:
            return False
        if head.metadata_txnid == file.txnid:
            return True
        if head.metadata_sequence < file.sequence:
            return False
        cur = self.store.get(table, head.metadata_txnid)
        while cur.sequence > file.sequence and cur.parent_txnid is not None:
            cur = self.store.get(table, cur.parent_txnid)
        return cur.txnid == file.txnid

    def _tombstone(self, table: str, txnid: str) -> None:
        try:
            self.store.tombstone(table, txnid)
        except MetadataError:
            # The file is not current and never will be; compaction just keeps it longer.
            log.warning("could not tombstone aborted METADATA file %s/%s", table, txnid, exc_info=True)

    def update(
        self,
        table: str,
        make_change: Callable[[MetadataFile], Change],
        *,
        fence: EpochFence | None = None,
        retry: KazooRetry | None = None,
    ) -> MetadataFile:
        """Read the current file, build a change from it, commit; on a conflict retry with the new file
        (a stale epoch is not a conflict: it ends the loop)."""

        def attempt() -> MetadataFile:
            base = self.current(table)
            return self.commit(table, make_change(base), base.txnid, fence=fence)

        return retrying(retry or self.retry, attempt)

    # -- the operations, with placement ids allocated here --------------------------------------

    def split(
        self,
        table: str,
        partition_id: str,
        split_point: bytes,
        servers_low: Sequence[str],
        servers_high: Sequence[str],
        *,
        fence: EpochFence | None = None,
    ) -> MetadataFile:
        ids = iter(self.placements.allocate(len(servers_low) + len(servers_high)))
        low = tuple(Placement(validate_server_id(s), next(ids)) for s in servers_low)
        high = tuple(Placement(validate_server_id(s), next(ids)) for s in servers_high)
        change = SplitPartition(partition_id, split_point, low, high)
        return self.update(table, lambda _base: change, fence=fence)

    def finalize_split(
        self,
        table: str,
        partition_id: str,
        *,
        through: tuple[int, int] | None = None,
        acked: Mapping[int, tuple[int, int] | None] | None = None,
        fence: EpochFence | None = None,
    ) -> MetadataFile:
        """SPLIT_FINALIZE with its evidence (see :class:`~metadata.operations.FinalizeSplit`)."""
        change = FinalizeSplit(partition_id, through, dict(acked or {}))
        return self.update(table, lambda _base: change, fence=fence)

    def join(self, table: str, partition_id: str, server_id: str) -> MetadataFile:
        placement = Placement(validate_server_id(server_id), self.placements.allocate_one())
        return self.update(table, lambda _base: JoinServer(partition_id, placement))

    def finalize_join(
        self, table: str, partition_id: str, placement_id: int, *, fence: EpochFence | None = None
    ) -> MetadataFile:
        return self.update(table, lambda _base: FinalizeJoin(partition_id, placement_id), fence=fence)

    def leave(
        self, table: str, partition_id: str, server_id: str, *, allow_under_replication: bool = False
    ) -> MetadataFile:
        return self.update(table, lambda _base: LeaveServer(partition_id, server_id, allow_under_replication))

    def finalize_leave(self, table: str, partition_id: str, placement_id: int) -> MetadataFile:
        return self.update(table, lambda _base: FinalizeLeave(partition_id, placement_id))

    def force_join(self, table: str, partition_id: str, server_id: str) -> MetadataFile:
        placement = Placement(validate_server_id(server_id), self.placements.allocate_one())
        log.warning("force-join of %s into %s/%s (all its servers are presumed down)", server_id, table, partition_id)
        return self.update(table, lambda _base: ForceJoin(partition_id, placement))

    # -- metadata servers (sections 5.2, 5.3) -----------------------------------------------------

    def set_metadata_servers(self, head: TableHead, servers: Sequence[str]) -> TableHead:
        """CAS the metadata server list of ``head`` (same txnid); MetadataConflictError if it moved."""
        new = TableHead(head.table, head.metadata_txnid, head.metadata_sequence, tuple(servers))
        path = self.layout.table(head.table)
        with zk_errors(f"update metadata servers of {head.table}"):
            try:
                stat = self.zk.set(path, new.encode(), version=head.version)
            except BadVersionError as exc:
                raise MetadataConflictError(f"table {head.table}: changed while updating its metadata servers") from exc
            except NoNodeError as exc:
                raise UnknownTableError(f"unknown table {head.table!r}") from exc
        return TableHead(new.table, new.metadata_txnid, new.metadata_sequence, new.metadata_servers, stat.version)


__all__ = ["MetadataCoordinator", "MetadataFileNotFoundError", "PartitionStatus"]
