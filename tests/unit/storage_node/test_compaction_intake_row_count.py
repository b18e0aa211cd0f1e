"""The compaction intake refuses a major whose file holds another row count than its manifest says:
listed with the manifest's count, the leader publishes it and every follower refuses it
(``storage_node.replication.receive.apply_segment``), so the replicas never converge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from metadata.table import Column, ColumnType, TableDefinition
from shoal.ids import new_segment_id
from shoal.kafka.settings import KafkaSettings
from shoal.segments import SegmentRecord, compaction_entry, lww_merge, read_segment, write_segment
from shoal.segments.channel import to_wire
from shoal.topics import TopicNames
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import Gtid, SegmentChunk
from storage_node.replica import PartitionReplica, versioned_rows
from storage_node.roles.compaction_intake import CompactionIntake

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)
TOPICS = TopicNames("shoal")
PID = "0123456789abcdef0123456789abcdef"


class _Msg:
    def __init__(self, topic: str, offset: int, kind: bytes, value: bytes) -> None:
        self._topic, self._offset, self._kind, self._value = topic, offset, kind, value

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def error(self) -> None:
        return None

    def headers(self) -> list[tuple[str, bytes]]:
        return [("shoal.kind", self._kind)]

    def value(self) -> bytes:
        return self._value


class _Consumer:
    def __init__(self, msgs: list[_Msg]) -> None:
        self.msgs, self.commits = msgs, []

    def poll(self, timeout: float) -> Any:
        return self.msgs.pop(0) if self.msgs else None

    def commit(self, offsets: Any, asynchronous: bool) -> None:
        self.commits.append(offsets[0].offset)


def _rows(keys: list[int]) -> pa.Table:
    return pa.table(
        {"k": pa.array(keys, pa.uint64()), "v": [f"v{k}" for k in keys], "_shoal_deleted": [False] * len(keys)},
        schema=ingest_schema(TABLE.arrow_schema()),
    )


def test_a_major_whose_manifest_claims_another_row_count_is_refused(tmp_path: Path) -> None:
    leader = PartitionReplica(TABLE, PID, 1, tmp_path / "leader")
    for i, keys in enumerate([[1, 2, 3], [3, 4]]):
        leader.append(versioned_rows(_rows(keys), Gtid(1, 10 * i)), i)
        leader.flush(1)
    root = leader.chain.root
    merged = lww_merge([read_segment(leader.directory, e.segment_id) for e in leader.chain.since_latest_major()], ["k"])
    sid = new_segment_id()
    (tmp_path / "svc").mkdir()
    written = write_segment(tmp_path / "svc", sid, merged, key_columns=["k"])
    entry = compaction_entry(leader.chain, sid, placement_id=1, epoch=1)
    claimed = SegmentRecord(
        entry=entry, sha256=written.sha256, row_count=written.row_count + 1, size_bytes=written.size_bytes
    )
    manifest = to_wire(
        claimed, table="events", partition_id=PID, topics=TOPICS, latest_major_offset=None, chunk_bytes=1 << 20
    )
    topic = TOPICS.compaction(PID)
    chunk = SegmentChunk(sid, 0, manifest.chunk_count, written.path.read_bytes())
    intake = CompactionIntake(leader, lambda: 1, KafkaSettings(bootstrap_servers="unused:9092"), topics=TOPICS)
    intake._consumer = _Consumer([_Msg(topic, 1, b"chunk", chunk.to_bytes())])
    intake._handle(_Msg(topic, 0, b"manifest", manifest.to_bytes()))
    assert intake.stats.committed == 0 and intake.stats.rejected == 1
    assert "file holds 4 rows, manifest says 5" in (intake.stats.last_error or "")
    assert leader.record(sid) is None and leader.chain.root == root
    assert not (leader.directory / f"{sid}.parquet").exists()
    assert intake._consumer.commits == [2]  # committed past it
