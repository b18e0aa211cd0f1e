"""The segment publisher's transactional calls are bounded like the leader's (DESIGN.md section 4).

A producer whose ``commit_transaction`` never returns (librdkafka after a broker restart) must not
wedge the publisher: the call raises past its bound, the channel is abandoned, and the next pass
opens it again (a new producer whose ``init_transactions`` fences the stuck one) and publishes.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException

from metadata.table import Column, ColumnType, TableDefinition
from shoal.errors import KafkaOperationError
from shoal.ids import new_partition_id
from shoal.kafka.errors import FENCED_CODES, WedgedCallError, classify, ends_producer
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import Gtid
from storage_node.errors import FencedError
from storage_node.replica import PartitionReplica, versioned_rows
from storage_node.replication import publish
from storage_node.roles.leader.transaction import leader_error

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)


def _rows() -> pa.Table:
    return pa.table(
        {"k": pa.array([1, 2], pa.uint64()), "v": ["a", "b"], "_shoal_deleted": [False, False]},
        schema=ingest_schema(TABLE.arrow_schema()),
    )


class FakeMessage:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class FakeProducer:
    """A transactional producer; the first one's ``commit_transaction`` blocks until released."""

    made: list[FakeProducer] = []

    def __init__(self, wedge: bool) -> None:
        self.wedge = wedge
        self.released = threading.Event()
        self.pending: list[Any] = []
        self.next_offset = 0
        self.committed = 0

    def init_transactions(self, _timeout: float) -> None:
        pass

    def begin_transaction(self) -> None:
        pass

    def produce(self, _topic: str, _value: bytes, **kwargs: Any) -> None:
        self.pending.append(kwargs["on_delivery"])

    def flush(self, _timeout: float = 0) -> int:
        for cb in self.pending:
            cb(None, FakeMessage(self.next_offset))
            self.next_offset += 1
        self.pending = []
        return 0

    def poll(self, _timeout: float) -> int:
        return 0

    def commit_transaction(self, _timeout: float) -> None:
        if self.wedge:
            self.released.wait()  # never returns while the test runs
        self.committed += 1

    def abort_transaction(self, _timeout: float) -> None:
        pass


def test_a_wedged_commit_abandons_the_channel_and_the_next_pass_publishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def producer(_settings: object, **_kw: object) -> FakeProducer:
        made = FakeProducer(wedge=not FakeProducer.made)
        FakeProducer.made.append(made)
        return made

    FakeProducer.made = []
    monkeypatch.setattr(publish.clients, "producer", producer)
    monkeypatch.setattr("shoal.kafka.transaction.clients.producer", producer)
    monkeypatch.setattr(publish, "read_manifests", lambda *_a, **_k: [])
    monkeypatch.setattr("shoal.kafka.transaction.GUARD_GRACE_S", 0.1)

    replica = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    replica.append(versioned_rows(_rows(), Gtid(1, 0)), 0)
    assert replica.flush(1) is not None
    publisher = publish.SegmentPublisher(
        replica, KafkaSettings("localhost:1"), topics=TopicNames("t"), call_timeout_s=0.3
    )
    try:
        publisher._claim()
        began = time.monotonic()
        with pytest.raises(WedgedCallError):
            publisher.publish_pending()
        assert time.monotonic() - began < 10  # bounded, not wedged
        assert publisher._channel.abandoned and publisher.stats.published == 0
        assert publisher.publish_pending() == 1  # opened again with a new producer, then published
        assert len(FakeProducer.made) == 2 and FakeProducer.made[1].committed == 1
        assert publisher.stats.published == 1
    finally:
        FakeProducer.made[0].released.set()
        publisher._close()


CODES = sorted(
    {
        *FENCED_CODES,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError.NOT_COORDINATOR,
        KafkaError._FATAL,
    }
)


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("fatal", [False, True])
def test_the_leader_and_the_publisher_read_a_fence_the_same_way(
    code: int, fatal: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One classification (``classify`` + ``ends_producer``) for the WAL and the segments channel."""
    error = classify(KafkaException(KafkaError(code, "x", fatal=fatal)), "commit")
    leader_fenced = isinstance(leader_error(error, "w"), FencedError)

    class Failing(FakeProducer):
        def commit_transaction(self, _timeout: float) -> None:
            raise KafkaException(KafkaError(code, "x", fatal=fatal))

    monkeypatch.setattr("shoal.kafka.transaction.clients.producer", lambda *_a, **_k: Failing(wedge=False))
    monkeypatch.setattr(publish, "read_manifests", lambda *_a, **_k: [])
    replica = PartitionReplica(TABLE, new_partition_id(), 1, tmp_path)
    replica.append(versioned_rows(_rows(), Gtid(1, 0)), 0)
    assert replica.flush(1) is not None
    publisher = publish.SegmentPublisher(replica, KafkaSettings("localhost:1"), topics=TopicNames("t"))
    publisher._claim()
    with pytest.raises((KafkaOperationError, FencedError)) as raised:
        publisher.publish_pending()
    publisher._close()
    assert isinstance(raised.value, FencedError) == leader_fenced == ends_producer(error)
    assert leader_fenced == (code in FENCED_CODES or fatal)
