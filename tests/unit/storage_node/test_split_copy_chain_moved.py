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


def test_a_piece_skipped_because_a_major_replaced_its_segment_is_staged_before_the_copy_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    parent.append(versioned_rows(_rows([(7, "old"), (150, "h")]), Gtid(2, 0)), 0)
    parent.flush(2)
    split_at = Keyspace.UINT64.encode(100)
    children = (
        SplitChild(new_partition_id(), KeyRange(UNBOUNDED, split_at), (Placement("n1", 3),)),
        SplitChild(new_partition_id(), KeyRange(split_at, UNBOUNDED), (Placement("n1", 4),)),
    )
    s = object.__new__(PartitionSplitter)
    Worker.__init__(s, "split-test")
    s.parent, s.children, s.stats, s.kafka = parent, children, SplitStats(), None
    s.topics = types.SimpleNamespace(replica_group=lambda c, p: f"{c}-{p}")
    s._staging = {c.partition_id: staging_replica(TABLE, c.partition_id, 1, tmp_path) for c in children}
    s._publishers = {c.partition_id: _Publisher(s._staging[c.partition_id], c.partition_id) for c in children}
    s._piece_gtids, s._following = {}, {}

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
