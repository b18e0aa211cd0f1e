"""The leader's own WAL Tail follows what its segments CHANNEL covers, not its local chain
(DESIGN.md section 6): a segment flushed but not yet published is on the leader's disk only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from metadata.table import Column, ColumnType, TableDefinition
from shoal.ids import new_partition_id
from shoal.kafka.settings import KafkaSettings
from shoal.segments import WalRange
from shoal.topics import TopicNames
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import Gtid
from storage_node.replica import PartitionReplica, versioned_rows
from storage_node.replication import publish
from storage_node.replication.tail import ChainSegment, TailDecision, published_end

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)


def _rows(keys: list[int]) -> pa.Table:
    return pa.table(
        {"k": pa.array(keys, pa.uint64()), "v": [f"v{k}" for k in keys], "_shoal_deleted": [False] * len(keys)},
        schema=ingest_schema(TABLE.arrow_schema()),
    )


def test_published_end_counts_only_segments_with_a_manifest_offset() -> None:
    pid = new_partition_id()
    own, other = (pid, 1), (pid, 2)
    segments = [
        ChainSegment(0, (WalRange(pid, 1, 0, 3),), 10),
        ChainSegment(4, (WalRange(pid, 1, 3, 5), WalRange(pid, 2, 0, 7)), 10),
        ChainSegment(None, (WalRange(pid, 1, 5, 9),), 10),  # flushed, not published
    ]
    assert published_end(segments, own) == 5
    assert published_end(segments, other) == 7
    assert published_end(segments[2:], own) == 0


def test_the_tail_pass_passes_the_published_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replication factor 1 (no peer holds the Tail back): S1 published, S2 flushed after the
    publisher's walk. The Tail may go to the end of S1, not past the WAL records only S2 holds."""
    replica = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    s = []
    for seq, key in enumerate([1, 2, 3, 4, 5]):
        replica.append(versioned_rows(_rows([key]), Gtid(1, seq)), seq * 2)  # a record, then its commit marker
        if key in (2, 5):
            s.append(replica.flush(1))
    assert replica.covered_end() == 9
    seen: dict[str, Any] = {}

    def truncate(*_args: Any, own_covered_end: int, **_kwargs: Any) -> TailDecision:
        seen["own_covered_end"] = own_covered_end
        return TailDecision(None, None)

    monkeypatch.setattr(publish, "truncate", truncate)
    monkeypatch.setattr(publish, "collect_on_leader", lambda *_a, **_k: [])
    publisher = publish.SegmentPublisher(
        replica, KafkaSettings("localhost:1"), topics=TopicNames("t"), peers=lambda: [1]
    )
    publisher.manifest_offsets = {s[0].segment_id: 0}
    publisher._tail_admin = object()  # type: ignore[assignment]
    publisher._next_truncate = 0.0
    publisher._maybe_truncate()
    s1_end = max(r.end_offset for r in s[0].entry.covered)
    assert seen["own_covered_end"] == s1_end == 3
