"""A fenced commit that loses leaves no stored METADATA file behind (DESIGN.md section 8)."""

from __future__ import annotations

from typing import Any

import pytest
from helpers_metadata import new_file

from metadata.coordinator import MetadataCoordinator
from metadata.election import EpochFence
from metadata.errors import MetadataFileNotFoundError
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
