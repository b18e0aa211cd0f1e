"""The leader's memtable flusher (storage_node.roles.leader.flusher) on a real replica on disk.

The segment write is held by a gate (a wrapper around the real ``write_segment``) so a test can look
at the replica while a flush is in flight; the failing write raises ``OSError`` as a full disk would.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from metadata.table import Column, ColumnType, TableDefinition
from shoal.ids import new_partition_id
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import Gtid
from shoal.worker import WorkerState
from storage_node.replica import PartitionReplica, versioned_rows
from storage_node.replica import replica as replica_module
from storage_node.roles.leader.flusher import MemtableFlusher

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)


def rows(keys: list[int], value: str, gtid: Gtid) -> pa.Table:
    table = pa.table(
        {"k": pa.array(keys, pa.uint64()), "v": [f"{value}{k}" for k in keys], "_shoal_deleted": [False] * len(keys)},
        schema=ingest_schema(TABLE.arrow_schema()),
    )
    return versioned_rows(table, gtid)


class Gate:
    """Holds every segment write until opened; ``entered`` is set once a write waits."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fail: bool = False) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()
        real = replica_module.write_segment

        def held(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            assert self.open.wait(30), "the test never opened the gate"
            if fail:
                raise OSError(28, "No space left on device")
            return real(*args, **kwargs)

        monkeypatch.setattr(replica_module, "write_segment", held)


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[PartitionReplica]:
    r = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    yield r
    r.close()


@pytest.fixture
def flushed() -> list[int]:
    return []


@pytest.fixture
def flusher(replica: PartitionReplica, flushed: list[int]) -> Iterator[MemtableFlusher]:
    f = MemtableFlusher(replica, lambda: flushed.append(1)).start()
    yield f
    f.stop()


def test_a_flush_in_flight_leaves_writes_and_reads_going(
    replica: PartitionReplica, flusher: MemtableFlusher, flushed: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    replica.append(rows([1, 2, 3], "a", Gtid(1, 0)), 0)
    gate = Gate(monkeypatch)
    assert flusher.submit(1)
    assert gate.entered.wait(10), "the flush never started"
    assert not flusher.idle.is_set()
    assert not flusher.submit(1), "a second flush while one is in flight"
    # the leader appends to a new memtable meanwhile, and scans see the frozen rows and the new ones
    replica.append(rows([3, 4], "b", Gtid(1, 3)), 1)
    seen = replica.scan().to_pydict()
    assert dict(zip(seen["k"], seen["v"], strict=True)) == {1: "a1", 2: "a2", 3: "b3", 4: "b4"}
    assert replica.chain.root is None and flushed == []
    gate.open.set()
    flusher.wait_idle()
    assert flushed == [1]
    root = replica.record(replica.chain.root or "")
    assert root is not None and root.row_count == 3 and root.entry.covered[0].end_offset == 1
    assert replica.memtable.rows == 2 and replica.memtable.start_offset == 1
    # the next flush covers the rest of the channel, after the first
    assert flusher.submit(1)
    flusher.wait_idle()
    assert flushed == [1, 1] and replica.memtable.empty and replica.covered_end() == 2
    assert replica.scan().to_pydict() == seen


def test_a_failed_flush_keeps_every_row_and_ends_the_flusher_with_its_error(
    replica: PartitionReplica, flusher: MemtableFlusher, flushed: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    replica.append(rows([1, 2], "a", Gtid(1, 0)), 0)
    gate = Gate(monkeypatch, fail=True)
    assert flusher.submit(1)
    assert gate.entered.wait(10)
    replica.append(rows([2, 5], "b", Gtid(1, 2)), 1)  # accepted while the flush fails
    gate.open.set()
    with pytest.raises(OSError, match="No space left"):
        flusher.wait_idle()
    assert flusher.state is WorkerState.FAILED and flushed == []
    with pytest.raises(OSError):
        flusher.submit(1)  # the leader raises it on its next step: the role ends
    # nothing was lost: the frozen rows are back in front of the newer ones, in WAL order
    mem = replica.memtable
    assert (mem.start_offset, mem.end_offset, mem.rows) == (0, 2, 4)
    seen = replica.scan().to_pydict()
    assert dict(zip(seen["k"], seen["v"], strict=True)) == {1: "a1", 2: "b2", 5: "b5"}
    assert replica.chain.root is None


def test_stopping_lets_a_flush_in_progress_finish(
    replica: PartitionReplica, flusher: MemtableFlusher, flushed: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    replica.append(rows([7], "a", Gtid(1, 0)), 0)
    gate = Gate(monkeypatch)
    assert flusher.submit(1)
    assert gate.entered.wait(10)
    flusher.request_stop()
    assert not flusher.join(0.3), "stopped in the middle of a flush"
    gate.open.set()
    assert flusher.join(10)
    assert flushed == [1] and replica.memtable.empty and replica.covered_end() == 1
    flusher.wait_idle()  # returns at once on an ended flusher
