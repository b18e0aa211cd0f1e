"""The split forwarder refuses a straggler the parent's leader would refuse, to the deadletter topic,
in the transaction that moves the parent's leader group past it (DESIGN.md section 8).

It forwarded such a message whole to the low child, whose leader refused it later: a producer's
``sync()``, which reads the deadletter topic once the parent's group is past its message, found it
empty and returned success for rows no leader would ever accept (an audit's proof)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import TopicPartition

import storage_node.roles.forward as forward
from metadata.keyspace import UNBOUNDED, KeyRange, Keyspace
from metadata.metadata_file import PartitionEntry, RetiredPartition
from metadata.table import Column, ColumnType, TableDefinition
from producer.refusals import refusal_of
from shoal.errors import KafkaOperationError
from shoal.ids import new_partition_id
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames
from shoal.wire.arrow_ipc import encode_batch
from shoal.wire.ingest import PRODUCER_HEADER, TABLE_HEADER, ingest_schema

TABLE = TableDefinition("t", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1)
MAX_INGEST = 64 * 1024
PRODUCER_ID = "0123456789abcdef0123456789abcdef"


def _message(keys: list[int], value_bytes: int = 1) -> bytes:
    values = [os.urandom(value_bytes).hex() for _ in keys]  # incompressible
    rows = pa.table(
        {"k": pa.array(keys, pa.uint64()), "v": values, "_shoal_deleted": [False] * len(keys)},
        schema=ingest_schema(TABLE.arrow_schema()),
    )
    return encode_batch(rows)


class _Msg:
    def __init__(self, topic: str, offset: int, value: bytes) -> None:
        self._topic, self._offset, self._value = topic, offset, value

    def error(self) -> None:
        return None

    def value(self) -> bytes:
        return self._value

    def offset(self) -> int:
        return self._offset

    def partition(self) -> int:
        return 0

    def topic(self) -> str:
        return self._topic

    def headers(self) -> list[tuple[str, bytes]]:
        return [(TABLE_HEADER, b"t"), (PRODUCER_HEADER, PRODUCER_ID.encode())]


class _Txn:
    def __init__(self, log: list[tuple[str, Any]]) -> None:
        self.log = log

    def produce(self, topic: str, value: bytes | None, **kw: Any) -> None:
        self.log.append(("produce", (topic, value, kw.get("headers"))))

    def flush(self, timeout: float) -> int:
        return 0

    def send_offsets(self, offsets: list[TopicPartition], _meta: Any) -> None:
        self.log.append(("offsets", [(tp.topic, tp.offset) for tp in offsets]))


class _IdleChannel:
    """The forwarder's transactional channel, opened and closed; no transaction in these tests."""

    def __init__(self, *_a: Any, **_kw: Any) -> None:
        pass

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass


def _forward_once(
    monkeypatch: pytest.MonkeyPatch, messages: list[tuple[int, bytes]]
) -> tuple[forward.StragglerForwarder, list[tuple[str, Any]], TopicNames, str, str, str]:
    """One forwarding of ``messages`` ((offset, value) on the parent's topic, committed offset 7):
    (the forwarder, what it did, topics, low child, high child, the parent's ingest topic)."""
    topics = TopicNames("p")
    low, high = new_partition_id(), new_partition_id()
    split = Keyspace.UINT64.encode(100)
    parent = RetiredPartition(
        PartitionEntry(
            b"", new_partition_id(), splitting=True, split_point=split,
            split_partition_id_low=low, split_partition_id_high=high,
        ),
        KeyRange(UNBOUNDED, UNBOUNDED),
    )  # fmt: skip
    parent_topic = topics.ingest(parent.partition_id)
    log: list[tuple[str, Any]] = []
    fw = forward.StragglerForwarder(
        kafka=KafkaSettings("127.0.0.1:1"), topics=topics, table=TABLE, parent=parent, max_ingest_bytes=MAX_INGEST
    )

    class _Channel(_IdleChannel):
        @contextlib.contextmanager
        def transaction(self) -> Iterator[_Txn]:
            yield _Txn(log)
            log.append(("commit", None))

    class _Consumer:
        def assign(self, _tps: Any) -> None:
            pass

        def consume(self, _n: int, _timeout: float) -> list[_Msg]:
            fw.stopping.set()  # one batch, then the loop ends
            return [_Msg(parent_topic, offset, value) for offset, value in messages]

        def consumer_group_metadata(self) -> None:
            return None

        def close(self) -> None:
            pass

    monkeypatch.setattr(forward, "TransactionalChannel", _Channel)
    monkeypatch.setattr(forward.clients, "consumer", lambda *_a, **_kw: _Consumer())
    monkeypatch.setattr(forward, "committed_offset", lambda *_a: 7)
    monkeypatch.setattr(forward.clients, "admin", lambda *_a, **_kw: None)
    monkeypatch.setattr(
        forward, "delete_records", lambda _admin, tps, _what: log.append(("delete", [(t.topic, t.offset) for t in tps]))
    )
    fw._forward()
    return fw, log, topics, low, high, parent_topic


def test_a_straggler_the_parent_would_refuse_goes_to_the_deadletter_in_the_forwarding_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    oversized = _message(list(range(20)), 4000)
    assert len(oversized) > MAX_INGEST
    fw, log, topics, low, high, parent_topic = _forward_once(monkeypatch, [(7, oversized), (8, _message([5, 150]))])

    produced = [args for kind, args in log if kind == "produce"]
    assert [t for t, _, _ in produced] == [topics.deadletter, topics.ingest(low), topics.ingest(high)]
    refusal = refusal_of(produced[0][2], PRODUCER_ID)  # what the producer's sync() reads
    assert refusal is not None and refusal.topic == parent_topic and refusal.offset == 7
    assert refusal.reason == "oversized"
    # the refusal and the forwarded rows commit with the parent's group past both messages; what the
    # parent's leader accepted, then what was forwarded, is deleted from the parent's topic: a forwarder
    # that finds the group's offset expired one day starts after it (forwarded again, an old row would
    # be accepted with a new GTID over newer writes)
    assert log[0] == ("delete", [(parent_topic, 7)])
    assert log[-3:] == [("offsets", [(parent_topic, 9)]), ("commit", None), ("delete", [(parent_topic, 9)])]
    assert fw.stats.forwarded_messages == 2 and fw.stats.refused_messages == 1


def test_a_straggler_with_a_row_no_message_to_a_child_can_hold_goes_to_the_deadletter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Forwarded whole to the low child, its leader refused it (a key out of its range) after the
    parent's group had moved past it: the producer's ``sync()`` had reported its rows accepted."""
    import storage_node.replication.split as split

    monkeypatch.setattr(split, "_pieces", lambda _rows, _limit: None)  # a row re-encoded alone does not fit
    fw, log, topics, _low, _high, parent_topic = _forward_once(monkeypatch, [(7, _message([5, 150]))])
    produced = [args for kind, args in log if kind == "produce"]
    assert [t for t, _, _ in produced] == [topics.deadletter]
    refusal = refusal_of(produced[0][2], PRODUCER_ID)
    assert refusal is not None and refusal.offset == 7 and refusal.reason == "oversized"
    assert ("offsets", [(parent_topic, 8)]) in log and fw.stats.refused_messages == 1


def test_a_failed_delete_of_the_parents_accepted_records_is_tried_again_while_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The delete below the committed offset fails once (a broker timing out) and no straggler comes:
    it is tried again on an idle poll, not only after a forwarding that may never come (once the
    group's offset expired, a forwarder would start below it and forward those rows again)."""
    topics = TopicNames("p")
    parent = RetiredPartition(
        PartitionEntry(
            b"", new_partition_id(), splitting=True, split_point=Keyspace.UINT64.encode(100),
            split_partition_id_low=new_partition_id(), split_partition_id_high=new_partition_id(),
        ),
        KeyRange(UNBOUNDED, UNBOUNDED),
    )  # fmt: skip
    fw = forward.StragglerForwarder(
        kafka=KafkaSettings("127.0.0.1:1"),
        topics=topics,
        table=TABLE,
        parent=parent,
        max_ingest_bytes=MAX_INGEST,
        restart_pause_s=0.0,
    )
    deletes: list[int] = []
    polls = [0]

    def delete(_admin: Any, tps: list[TopicPartition], _what: str) -> None:
        deletes.append(tps[0].offset)
        if len(deletes) == 1:
            raise KafkaOperationError("delete_records timed out")

    class _Consumer:
        def assign(self, _tps: Any) -> None:
            pass

        def consume(self, _n: int, _timeout: float) -> list[_Msg]:
            polls[0] += 1
            if polls[0] >= 3:
                fw.stopping.set()
            return []  # no straggler

        def close(self) -> None:
            pass

    monkeypatch.setattr(forward, "TransactionalChannel", _IdleChannel)
    monkeypatch.setattr(forward.clients, "consumer", lambda *_a, **_kw: _Consumer())
    monkeypatch.setattr(forward.clients, "admin", lambda *_a, **_kw: None)
    monkeypatch.setattr(forward, "committed_offset", lambda *_a: 7)
    monkeypatch.setattr(forward, "delete_records", delete)
    fw._forward()
    assert deletes == [7, 7] and fw.stats.truncations == 1
