"""An out-of-sync replica rejoins the in-sync set only holding the leader's chain (DESIGN.md section 6,
Kafka's ISR rule): a first-time leader's own WAL channel is covered by none of its segments (its
chain holds the old leader's data, received and adopted), so a peer's WAL Ack of 0 "reached" the
own covered end and the peer was written back in sync at the leader's first Tail pass, then could be
elected without that data (an older value and a deleted row served as newest). The real publisher's
Tail pass; Kafka's indexes and ZooKeeper's in-sync record stood in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from metadata.in_sync import prefer_in_sync
from metadata.table import Column, ColumnType, TableDefinition
from shoal.ids import new_partition_id
from shoal.kafka.indexes import ChannelIndexes
from shoal.kafka.settings import KafkaSettings
from shoal.segments import WalRange
from shoal.topics import TopicNames
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import Gtid
from storage_node.config import ReplicaLagPolicy
from storage_node.replica import PartitionReplica, versioned_rows
from storage_node.replication import publish, tail
from storage_node.replication.tail import InSyncKeeper

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 3
)
TOPICS = TopicNames("t")
OLD_LEADER, LEADER, STALE = 1, 2, 3


def _rows(pairs: list[tuple[int, str | None]], deleted: bool = False) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([k for k, _ in pairs], pa.uint64()),
            "v": [v for _, v in pairs],
            "_shoal_deleted": [deleted] * len(pairs),
        },
        schema=ingest_schema(TABLE.arrow_schema()),
    )


class FakeStore:
    def __init__(self, out: set[int], live: set[int]) -> None:
        self.out, self.live = frozenset(out), frozenset(live)

    def alive(self) -> frozenset[int]:
        return self.live

    def out_of_sync(self) -> frozenset[int]:
        return self.out

    def mark(self, out_of_sync: Any) -> frozenset[int]:
        self.out = frozenset(out_of_sync)
        return self.out


@pytest.mark.parametrize(("segments_ack", "rejoins"), [(None, False), (15, False), (21, True)])
def test_a_first_time_leaders_tail_pass_rejoins_a_peer_only_once_it_holds_the_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, segments_ack: int | None, rejoins: bool
) -> None:
    pid = new_partition_id()
    leader = PartitionReplica(TABLE, pid, LEADER, tmp_path / "leader")
    # the old leader's data, received (its segments) and adopted (its WAL beyond them)
    leader.write_adopted(
        [versioned_rows(_rows([(7, "old"), (8, "alive")]), Gtid(1, 0))], WalRange(pid, OLD_LEADER, 0, 60), 1
    )
    leader.write_adopted(
        [
            versioned_rows(_rows([(7, "new")]), Gtid(1, 70)),
            versioned_rows(_rows([(8, None)], deleted=True), Gtid(1, 80)),
        ],
        WalRange(pid, OLD_LEADER, 60, 100),
        1,
    )
    leader.write_adopted([versioned_rows(_rows([(9, "y")]), Gtid(1, 120))], WalRange(pid, OLD_LEADER, 100, 130), 2)
    wal, segments = TOPICS.wal(pid, LEADER), TOPICS.segments(pid, LEADER)
    groups = [TOPICS.replica_group(pid, p) for p in (OLD_LEADER, STALE)]

    def read_indexes(_admin: Any, queries: Any, timeout_s: float = 10.0) -> dict[str, ChannelIndexes]:
        found = {}
        for q in queries:
            if q.topic == wal:  # a few writes accepted; the stale peer's follower committed its coverage (0)
                found[q.topic] = ChannelIndexes(q.topic, 0, 6, ((groups[0], None), (groups[1], 0)))
            elif q.topic == segments:  # the chain republished at offsets 0, 10, 20
                found[q.topic] = ChannelIndexes(q.topic, 0, 30, ((groups[0], 5), (groups[1], segments_ack)))
        return found

    monkeypatch.setattr(tail, "read_indexes", read_indexes)
    monkeypatch.setattr(tail, "_delete_records", lambda _a, _targets, _p: None)
    monkeypatch.setattr(publish, "collect_on_leader", lambda *_a, **_k: [])
    store = FakeStore(out={STALE}, live={LEADER, STALE})  # the old leader is dead
    keeper = InSyncKeeper(store, ReplicaLagPolicy(max_lag_s=30))
    publisher = publish.SegmentPublisher(
        leader, KafkaSettings("localhost:1"), topics=TOPICS, peers=lambda: [OLD_LEADER, STALE], sync=keeper
    )
    publisher.manifest_offsets = {e.segment_id: i * 10 for i, e in enumerate(leader.chain.since_latest_major())}
    publisher._tail_admin = object()  # type: ignore[assignment]
    publisher._next_truncate = 0.0
    publisher._maybe_truncate()
    assert (STALE not in store.out) is rejoins, store.out
    # the leader dies: the stale peer alone in line may lead only once it rejoined with the data
    assert prefer_in_sync([STALE], store.out, [OLD_LEADER, LEADER, STALE]) == ((STALE,) if rejoins else ())
