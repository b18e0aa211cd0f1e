"""Segment garbage collection on a replica (source 3.5 DELETE / MERGE_THEN_DELETE), without servers."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from metadata.table import Column, ColumnType, TableDefinition
from shoal.errors import ConfigError
from shoal.ids import new_partition_id
from shoal.kafka.settings import KafkaSettings
from shoal.segments import read_segment
from shoal.segments.parquet_io import segment_path
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import Gtid
from shoal_app.testing.segments import commit_local_major
from storage_node.config import LeaderConfig
from storage_node.replica import PartitionReplica, versioned_rows
from storage_node.replication.collect import (
    collect_on_follower,
    leader_deletable,
    merge_unreferenced,
    unreferenced_segments,
    weak_segments,
)

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)

KAFKA = KafkaSettings("b:9092")


def _ingest(keys: list[int], values: list[str]) -> pa.Table:
    return pa.table(
        {"k": pa.array(keys, pa.uint64()), "v": pa.array(values, pa.string()), "_shoal_deleted": [False] * len(keys)},
        schema=ingest_schema(TABLE.arrow_schema()),
    )


def _replica_with_minors(tmp_path: Path, n: int = 3) -> PartitionReplica:
    r = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    for i in range(n):
        r.append(versioned_rows(_ingest([i, 100], [f"v{i}", f"last{i}"]), Gtid(1, 2 * i)), i)
        assert r.flush(1) is not None
    return r


def _compact(r: PartitionReplica) -> tuple[str, list[str]]:
    return commit_local_major(r, epoch=1)


def test_weak_segments_are_deletable_by_the_leader_only_after_every_follower_acked_the_major(tmp_path: Path) -> None:
    r = _replica_with_minors(tmp_path)
    assert weak_segments(r.chain) == []
    major, folded = _compact(r)
    assert weak_segments(r.chain) == folded
    offsets = {**{s: i * 2 for i, s in enumerate(folded)}, major: 10}
    assert leader_deletable(r.chain, manifest_offsets=offsets, acks=[11, None]) == []  # one never acked
    assert leader_deletable(r.chain, manifest_offsets=offsets, acks=[11, 10]) == []  # one stops at the major
    assert leader_deletable(r.chain, manifest_offsets={}, acks=[11, 11]) == []  # the major is not published yet
    assert leader_deletable(r.chain, manifest_offsets=offsets, acks=[11, 12]) == folded
    assert leader_deletable(r.chain, manifest_offsets=offsets, acks=[]) == folded  # no other replica


def test_follower_deletes_folded_segments_and_reads_are_unchanged(tmp_path: Path) -> None:
    r = _replica_with_minors(tmp_path)
    before = r.scan().sort_by("k").to_pylist()
    major, folded = _compact(r)
    assert collect_on_follower(r) == folded
    assert all(s not in r.chain and not segment_path(r.directory, s).exists() for s in folded)
    assert r.chain.root == major and r.deleted_segments == len(folded)
    assert r.scan().sort_by("k").to_pylist() == before
    assert collect_on_follower(r) == []  # nothing left to delete
    reopened = PartitionReplica(TABLE, r.partition_id, 1, tmp_path)  # the deletion is durable
    assert set(reopened.chain.entries) == {major}


def test_a_file_being_read_is_unlinked_only_when_the_last_reader_ends(tmp_path: Path) -> None:
    r = _replica_with_minors(tmp_path)
    _major, folded = _compact(r)
    path = segment_path(r.directory, folded[0])
    with r.reading([folded[0]]), r.reading([folded[0]]):
        assert r.delete_segments(folded) == folded
        assert folded[0] not in r.chain  # the entry goes at once, new scans do not see it
        assert path.exists()  # the file stays for the readers
        assert read_segment(r.directory, folded[0]).num_rows == 2
        assert not segment_path(r.directory, folded[1]).exists()  # unpinned files go at once
    assert not path.exists()
    assert r.delete_segments([r.chain.root or ""]) == []  # the root is never deleted


def test_leader_merges_unreferenced_segments_then_deletes_them(tmp_path: Path) -> None:
    r = _replica_with_minors(tmp_path, n=3)
    chain = r.chain
    walk = [s.segment_id for s in chain.walk()]  # newest first
    r.rewind(walk[1])  # the newest segment is left unreferenced (e.g. a rewind after a failover)
    assert unreferenced_segments(r.chain) == [walk[0]]
    assert r.scan().sort_by("k").to_pylist() != [
        {"k": 0, "v": "v0"},
        {"k": 1, "v": "v1"},
        {"k": 2, "v": "v2"},
        {"k": 100, "v": "last2"},
    ]
    assert merge_unreferenced(r, epoch=2) == 1
    assert unreferenced_segments(r.chain) == [] and walk[0] not in r.chain
    assert not segment_path(r.directory, walk[0]).exists()
    # its rows are back, with their GTIDs (the newest version of key 100 wins again)
    assert r.scan().sort_by("k").to_pylist() == [
        {"k": 0, "v": "v0"},
        {"k": 1, "v": "v1"},
        {"k": 2, "v": "v2"},
        {"k": 100, "v": "last2"},
    ]


def test_stall_settings_are_validated() -> None:
    assert LeaderConfig(KAFKA).max_minors_before_stall == 64 and LeaderConfig(KAFKA).minor_stall_s == 0.2
    with pytest.raises(ConfigError, match="max_minors_before_stall"):
        LeaderConfig(KAFKA, max_minors_before_stall=-1)
    with pytest.raises(ConfigError, match="minor_stall_s"):
        LeaderConfig(KAFKA, minor_stall_s=-0.1)


def test_an_unreferenced_segment_the_merge_refuses_does_not_stop_the_others(tmp_path: Path) -> None:
    """Rows of an epoch above the merging leader's are refused (their GTIDs would win over its writes);
    the unreferenced segments beside that one are still merged, at every pass."""
    r = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    for i, epoch in enumerate((1, 1, 5)):
        r.append(versioned_rows(_ingest([i], [f"v{i}"]), Gtid(epoch, i)), i)
        assert r.flush(epoch) is not None
    walk = [s.segment_id for s in r.chain.walk()]  # newest first: epochs 5, 1, 1
    r.rewind(walk[2])
    assert sorted(unreferenced_segments(r.chain)) == sorted(walk[:2])
    assert merge_unreferenced(r, epoch=2) == 1
    assert unreferenced_segments(r.chain) == [walk[0]]  # the refused one stays, its file too
    assert segment_path(r.directory, walk[0]).exists() and not segment_path(r.directory, walk[1]).exists()
    assert sorted(r.scan().column("k").to_pylist()) == [0, 1]
    assert merge_unreferenced(r, epoch=2) == 0
