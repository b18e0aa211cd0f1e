"""A leader that leads again may find, on its own segments channel, a major of an earlier term that
its chain no longer holds (dropped as never published by the leader of the term between). Neither
the manifests it publishes now, nor its segments Tail, nor a bootstrap may follow that major
(DESIGN.md section 6: the segments channel keeps everything from the latest major on)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import shoal.kafka.transaction as transaction
from metadata.table import Column, ColumnType, TableDefinition
from shoal.ids import new_partition_id, new_segment_id
from shoal.kafka.indexes import ChannelIndexes
from shoal.kafka.readers import ChannelManifest
from shoal.kafka.settings import KafkaSettings
from shoal.segments import WalRange
from shoal.segments.channel import KIND_HEADER, KIND_MANIFEST, to_wire
from shoal.topics import TopicNames
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import Gtid, ManifestRecord
from storage_node.replica import PartitionReplica, versioned_rows
from storage_node.replication import bootstrap, publish, tail

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)
TOPICS = TopicNames("t")


def _rows(keys: list[int], tag: str) -> pa.Table:
    return pa.table(
        {"k": pa.array(keys, pa.uint64()), "v": [f"{tag}{k}" for k in keys], "_shoal_deleted": [False] * len(keys)},
        schema=ingest_schema(TABLE.arrow_schema()),
    )


class _Delivered:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class _Producer:
    """A transactional producer on a channel that holds offsets [0, 8) already (the earlier term)."""

    def __init__(self) -> None:
        self.pending: list[Any] = []
        self.next_offset = 8
        self.values: dict[int, bytes] = {}

    def init_transactions(self, _t: float) -> None:
        pass

    def begin_transaction(self) -> None:
        pass

    def produce(self, _topic: str, value: bytes, **kw: Any) -> None:
        self.pending.append((value, kw["on_delivery"]))

    def flush(self, _t: float = 0) -> int:
        for value, callback in self.pending:
            self.values[self.next_offset] = value
            callback(None, _Delivered(self.next_offset))
            self.next_offset += 1
        self.pending = []
        return 0

    def poll(self, _t: float) -> int:
        return 0

    def commit_transaction(self, _t: float) -> None:
        self.next_offset += 1  # the commit marker

    def abort_transaction(self, _t: float) -> None:
        pass


def test_a_major_of_an_earlier_term_moves_neither_the_hint_nor_the_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """P1 published M1@0, S1@2, S2@4 and the major M2@6 (folding them), and was fenced before the
    followers had S2 and M2; P2 led, adopted P1's WAL past S1 into A, and died before its first Tail
    pass. P1 dropped M2 (never published by P2): its chain is M1 -> S1 -> A. Leading again, it took
    M2 as its latest major: A's manifest pointed replays at M2, and once the followers acked A the
    segments Tail deleted M1 and S1, the chain's own major and minor (an audit's proof)."""
    pid = new_partition_id()
    replica = PartitionReplica(TABLE, pid, 1, tmp_path)
    replica.append(versioned_rows(_rows([1, 2], "a"), Gtid(1, 0)), 0)
    m1 = replica.flush(1)
    replica.append(versioned_rows(_rows([3], "b"), Gtid(1, 2)), 2)
    s1 = replica.flush(1)
    assert m1 is not None and s1 is not None and m1.entry.is_major
    a = replica.write_adopted([versioned_rows(_rows([4], "c"), Gtid(1, 3))], WalRange(pid, 1, 4, 6), 2)
    w_m1 = to_wire(m1, table="events", partition_id=pid, topics=TOPICS, latest_major_offset=None)
    w_s1 = to_wire(s1, table="events", partition_id=pid, topics=TOPICS, latest_major_offset=0)
    s2_id, m2_id = new_segment_id(), new_segment_id()
    w_s2 = dataclasses.replace(w_s1, segment_id=s2_id, base_segment_id=s1.segment_id)
    w_m2 = dataclasses.replace(
        w_m1,
        segment_id=m2_id,
        base_segment_id=s2_id,
        included_segment_ids=(m1.segment_id, s1.segment_id, s2_id),
        is_major=True,
        latest_major_offset=0,
    )
    earlier = [ChannelManifest(0, w_m1), ChannelManifest(2, w_s1), ChannelManifest(4, w_s2), ChannelManifest(6, w_m2)]
    producer = _Producer()
    monkeypatch.setattr(publish, "read_manifests", lambda *_a, **_k: list(earlier))
    monkeypatch.setattr(transaction.clients, "producer", lambda *_a, **_k: producer)
    publisher = publish.SegmentPublisher(replica, KafkaSettings("localhost:1"), topics=TOPICS, peers=lambda: [1, 2, 3])
    publisher._claim()
    assert publisher.publish_pending() == 1
    hint = ManifestRecord.from_bytes(producer.values[publisher.manifest_offsets[a.segment_id]]).latest_major_offset

    wal, segments = TOPICS.wal(pid, 1), TOPICS.segments(pid, 1)
    end = producer.next_offset

    def read_indexes(_admin: Any, queries: Any, **_k: Any) -> dict[str, ChannelIndexes]:
        acked = {wal: 6, segments: end}  # both followers in sync, past A
        return {
            q.topic: ChannelIndexes(q.topic, 0, acked[q.topic] + 1, tuple((g, acked[q.topic]) for g in q.ack_groups))
            for q in queries
            if q.topic in acked
        }

    deleted: dict[str, int] = {}
    monkeypatch.setattr(tail, "read_indexes", read_indexes)
    monkeypatch.setattr(
        tail, "_delete_records", lambda _a, targets, _p: deleted.update((t.topic, t.offset) for t in targets)
    )
    monkeypatch.setattr(publish, "collect_on_leader", lambda *_a, **_k: [])
    publisher._tail_admin = object()  # type: ignore[assignment]
    publisher._next_truncate = 0.0
    publisher._maybe_truncate()
    publisher._close()
    replica.close()
    assert deleted.get(segments, 0) <= 0  # M1, the chain's latest major, stays on the channel
    assert hint == 0  # M1, not M2


class _Message:
    def __init__(self, offset: int, value: bytes) -> None:
        self._offset, self._value = offset, value

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def headers(self) -> list[tuple[str, bytes]]:
        return [(KIND_HEADER, KIND_MANIFEST)]

    def error(self) -> None:
        return None


class _Channel:
    """Manifests (no chunks) at their offsets; ``poll`` answers the assigned offset or the next one."""

    def __init__(self, manifests: dict[int, bytes]) -> None:
        self.manifests = manifests
        self.at = 0

    def assign(self, tps: list[Any]) -> None:
        self.at = tps[0].offset

    def poll(self, _t: float) -> _Message | None:
        later = [o for o in sorted(self.manifests) if o >= self.at]
        if not later:
            return None
        self.at = later[0] + 1
        return _Message(later[0], self.manifests[later[0]])

    def close(self) -> None:
        pass


def test_a_bootstrap_follows_the_newest_manifest_not_an_earlier_terms_major(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M1@0, then the earlier term's M2@2, then the current chain's minors, whose manifests name M1
    (at 4) or no major at all (at 6, a chain whose major is gone): the newest one decides."""
    pid = new_partition_id()
    replica = PartitionReplica(TABLE, pid, 1, tmp_path)
    replica.append(versioned_rows(_rows([1], "a"), Gtid(1, 0)), 0)
    m1 = replica.flush(1)
    replica.append(versioned_rows(_rows([2], "b"), Gtid(1, 2)), 2)
    s1 = replica.flush(1)
    assert m1 is not None and s1 is not None
    major = to_wire(m1, table="events", partition_id=pid, topics=TOPICS, latest_major_offset=None, chunk_bytes=10**9)
    minor = to_wire(s1, table="events", partition_id=pid, topics=TOPICS, latest_major_offset=0, chunk_bytes=10**9)
    channel = {0: major.to_bytes(), 2: dataclasses.replace(major, segment_id=new_segment_id()).to_bytes()}
    channel[4] = minor.to_bytes()
    consumer = _Channel(channel)
    monkeypatch.setattr(bootstrap.clients, "consumer", lambda *_a, **_k: consumer)
    kafka = KafkaSettings("localhost:1")
    assert bootstrap.find_latest_major(kafka, "seg", tail=0, end=6) == 0
    channel[6] = dataclasses.replace(minor, segment_id=new_segment_id(), latest_major_offset=None).to_bytes()
    assert bootstrap.find_latest_major(kafka, "seg", tail=0, end=8) is None
    replica.close()
