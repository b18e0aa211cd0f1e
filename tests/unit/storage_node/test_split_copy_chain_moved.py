"""A split's copy round is done only when the staging lists hold the parent's chain as it is now.

A major committed by the compaction intake, its folded minors collected by the publisher's Tail pass
(neither waits for a split's freeze), while ``stage_pieces`` reads an earlier piece: the later minor's
record is gone when it is looked up, so its piece is skipped. ``_copy`` used to report every child
caught up all the same, and SPLIT_FINALIZE (evidence ``acked = through``) committed without those rows.
"""

from __future__ import annotations

import contextlib
import types
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import storage_node.roles.split as split_role
from metadata.keyspace import UNBOUNDED, KeyRange, Keyspace
from metadata.metadata_file import Placement
from metadata.table import Column, ColumnType, TableDefinition
from shoal.ids import new_partition_id
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import Gtid
from shoal.worker import Worker
from shoal_app.testing.segments import commit_local_major
from storage_node.replica import PartitionReplica, versioned_rows
from storage_node.replication.collect import collect_on_leader
from storage_node.replication.split import staging_replica
from storage_node.roles.split import PartitionSplitter, SplitChild, SplitStats

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)


def _rows(pairs: list[tuple[int, str]]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([k for k, _ in pairs], pa.uint64()),
            "v": [v for _, v in pairs],
            "_shoal_deleted": [False] * len(pairs),
        },
        schema=ingest_schema(TABLE.arrow_schema()),
    )


class _Publisher:
    def __init__(self, staging: PartitionReplica, topic: str) -> None:
        self.staging, self.topic, self.manifest_offsets = staging, topic, {}

    def publish_pending(self) -> None:
        for e in self.staging.chain.since_latest_major():
            self.manifest_offsets.setdefault(e.segment_id, 2 * len(self.manifest_offsets))


def _splitter(parent: PartitionReplica, children: tuple[SplitChild, ...], tmp: Path) -> PartitionSplitter:
    """What StorageNode._start_splitters builds for a leader of the parent (its staging replicas on disk)."""
    s = object.__new__(PartitionSplitter)
    Worker.__init__(s, "split-test")
    s.parent, s.children, s.stats, s.kafka = parent, children, SplitStats(), None
    s.topics = types.SimpleNamespace(replica_group=lambda c, p: f"{c}-{p}")
    s._staging = {c.partition_id: staging_replica(TABLE, c.partition_id, parent.placement_id, tmp) for c in children}
    s._publishers = {c.partition_id: _Publisher(s._staging[c.partition_id], c.partition_id) for c in children}
    s._piece_gtids, s._following = {}, {}
    return s


def _children() -> tuple[SplitChild, ...]:
    split_at = Keyspace.UINT64.encode(100)
    return (
        SplitChild(new_partition_id(), KeyRange(UNBOUNDED, split_at), (Placement("n1", 3),)),
        SplitChild(new_partition_id(), KeyRange(split_at, UNBOUNDED), (Placement("n1", 4),)),
    )


def test_staging_lists_follow_the_parents_chain_rewound_while_another_placement_led(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent's leader staged pieces a, b, c, lost the leadership to a placement that adopted
    c's rows into c' (based on b) and, following it, rewound its chain to b. Leading again, every
    splitter it started failed (c' is not based on the staging root c) until a compaction."""
    monkeypatch.setattr(
        split_role,
        "channel_indexes",
        lambda _k, _topic, groups, timeout_s=10: types.SimpleNamespace(append=0, tail=0, acks=[(g, 0) for g in groups]),
    )
    parent = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    flushed = []
    for i, (low, high) in enumerate([(1, 150), (2, 160), (3, 170)]):
        parent.append(versioned_rows(_rows([(low, "x"), (high, "x")]), Gtid(2, 2 * i)), i)
        flushed.append(parent.flush(2))
    children = _children()
    first = _splitter(parent, children, tmp_path)
    first._copy()
    for staging in first._staging.values():
        staging.close()
    parent.rewind(flushed[1].segment_id)  # what PartitionFollower._diverged does
    parent.delete_segments([flushed[2].segment_id])
    parent.append(versioned_rows(_rows([(3, "x"), (170, "x")]), Gtid(2, 4)), 10)
    parent.flush(3)  # c', the new leader's adoption of c's rows
    parent.append(versioned_rows(_rows([(4, "d"), (180, "d")]), Gtid(3, 0)), 11)
    parent.flush(3)
    again = _splitter(parent, children, tmp_path)
    again._copy()
    low, high = (sorted(r["k"] for r in again._staging[c.partition_id].scan().to_pylist()) for c in children)
    assert (low, high) == ([1, 2, 3, 4], [150, 160, 170, 180])


def test_a_piece_skipped_because_a_major_replaced_its_segment_is_staged_before_the_copy_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    parent.append(versioned_rows(_rows([(7, "old"), (150, "h")]), Gtid(2, 0)), 0)
    parent.flush(2)
    children = _children()
    s = _splitter(parent, children, tmp_path)

    def indexes(_kafka: Any, topic: str, groups: list[str], timeout_s: float = 10) -> Any:
        end = 2 * len(s._publishers[topic].manifest_offsets)  # every child acked everything published
        return types.SimpleNamespace(append=end, tail=0, acks=[(g, end) for g in groups])

    monkeypatch.setattr(split_role, "channel_indexes", indexes)
    assert s._copy()
    parent.append(versioned_rows(_rows([(9, "x")]), Gtid(2, 2)), 1)
    s2 = parent.flush(2)
    parent.append(versioned_rows(_rows([(7, "new"), (160, "h2")]), Gtid(2, 3)), 2)
    parent.flush(2)
    real_reading = parent.reading

    @contextlib.contextmanager
    def reading(ids: Any) -> Any:
        with real_reading(ids):
            if list(ids) == [s2.segment_id] and not hasattr(parent, "_major"):
                major, folded = commit_local_major(parent, epoch=2)  # the intake's commit
                offsets = {sid: i for i, sid in enumerate(folded)} | {major: 10}
                assert collect_on_leader(parent, manifest_offsets=offsets, acks=[11])  # the Tail pass's GC
                parent._major = major  # type: ignore[attr-defined]
            yield

    monkeypatch.setattr(parent, "reading", reading)
    assert not s._copy()  # the newest minor's piece was skipped: not done
    assert s._copy()  # the major is staged now
    low, high = (s._staging[c.partition_id].scan().to_pylist() for c in children)
    assert {r["k"]: r["v"] for r in low} == {7: "new", 9: "x"}
    assert {r["k"]: r["v"] for r in high} == {150: "h", 160: "h2"}
