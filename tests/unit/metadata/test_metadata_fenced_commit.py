"""A fenced commit that loses leaves no stored METADATA file behind (DESIGN.md section 8)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from helpers_metadata import new_file
from kazoo.exceptions import BadVersionError, ConnectionLoss

from metadata.coordinator import MetadataCoordinator
from metadata.election import EpochFence
from metadata.errors import MetadataConflictError, MetadataFileNotFoundError
from metadata.metadata_file import Placement
from metadata.operations import JoinServer
from metadata.store import MemoryFileStore
from metadata.zk_layout import TableHead
from shoal.errors import StaleEpochError


def test_a_commit_fenced_by_a_newer_epoch_tombstones_its_stored_file(monkeypatch: Any) -> None:
    store = MemoryFileStore()
    base = new_file()
    store.put(base)
    coord = MetadataCoordinator(object(), store)
    head = TableHead("events", base.txnid, base.sequence, (), version=3)
    monkeypatch.setattr(coord, "head", lambda _table: head)
    monkeypatch.setattr(coord, "_check_fence", lambda _fence: 5)

    def superseded(*_args: object) -> None:  # the epoch moved between the read and the CAS
        raise StaleEpochError("epoch 1 was superseded")

    monkeypatch.setattr(coord, "_cas", superseded)
    pid = base.partitions[0].partition_id
    change = JoinServer(pid, Placement("node-9", 99))
    with pytest.raises(StaleEpochError):
        coord.commit("events", change, base.txnid, fence=EpochFence(pid, 1))
    (_, stored, value), (_, tombstoned, gone) = store.log[-2:]
    assert value is not None and stored != base.txnid  # the new file was stored before the CAS ...
    assert (tombstoned, gone) == (stored, None)  # ... and tombstoned when the fenced CAS lost
    with pytest.raises(MetadataFileNotFoundError, match="aborted"):
        store.get("events", stored)
    assert [f.txnid for f in store.versions("events")] == [base.txnid]


class _LosingZk:
    """One table znode. The first ``set`` loses its connection: with ``landed`` the write was applied
    anyway, else it stays in flight until :meth:`land` (a server that has not applied it yet)."""

    def __init__(self, data: bytes, *, landed: bool) -> None:
        self.data, self.version, self.landed = data, 0, landed
        self.pending: tuple[bytes, int] | None = None
        self.lost = False

    def get(self, _path: str) -> tuple[bytes, Any]:
        return self.data, SimpleNamespace(version=self.version)

    def set(self, _path: str, data: bytes, version: int = -1) -> Any:
        if not self.lost:
            self.lost = True
            if self.landed:
                self._apply(data, version)
            else:
                self.pending = (data, version)
            raise ConnectionLoss()
        return self._apply(data, version)

    def _apply(self, data: bytes, version: int) -> Any:
        if version not in (-1, self.version):
            raise BadVersionError()
        self.data, self.version = data, self.version + 1
        return SimpleNamespace(version=self.version)

    def sync(self, _path: str) -> None:
        pass

    def land(self) -> None:
        assert self.pending is not None
        self._apply(*self.pending)


@pytest.mark.parametrize("landed", [False, True], ids=["still in flight", "applied"])
def test_a_cas_whose_connection_was_lost_is_settled_before_its_file_is_tombstoned(landed: bool) -> None:
    """The outcome was read from a server that had not applied the lost CAS: "not committed", the
    file tombstoned, then the CAS landed and the table named a tombstoned file for ever (an audit's
    proof). The old head is written again at its version first: the lost CAS can no longer land."""
    store = MemoryFileStore()
    base = new_file()
    store.put(base)
    zk = _LosingZk(TableHead("events", base.txnid, base.sequence, ()).encode(), landed=landed)
    coord = MetadataCoordinator(zk, store)
    pid = base.partitions[0].partition_id
    change = JoinServer(pid, Placement("node-9", 99))
    if landed:
        new = coord.commit("events", change, base.txnid)
        assert coord.current("events").txnid == new.txnid
        return
    with pytest.raises(MetadataConflictError, match="did not happen"):
        coord.commit("events", change, base.txnid)
    with pytest.raises(BadVersionError):
        zk.land()  # the lost CAS arrives: its version is gone
    assert coord.current("events").txnid == base.txnid
