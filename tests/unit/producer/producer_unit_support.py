"""Builders for the producer unit tests: tables, METADATA files and a fake Kafka producer."""

from __future__ import annotations

import itertools
from typing import Any

from metadata.keyspace import Keyspace
from metadata.metadata_file import MetadataFile, Placement
from metadata.operations import create_file
from metadata.table import Column, ColumnType, TableDefinition


def make_table(keyspace: Keyspace = Keyspace.UINT64, name: str = "events") -> TableDefinition:
    ktype = ColumnType.UINT64 if keyspace is Keyspace.UINT64 else ColumnType.STRING
    return TableDefinition(
        name,
        (
            Column("k", ktype, nullable=False),
            Column("ts", ColumnType.TIMESTAMP_MS, False),
            Column("v", ColumnType.STRING),
            Column("n", ColumnType.INT32),
            Column("b", ColumnType.BINARY),
            Column("score", ColumnType.FLOAT64),
        ),
        ("k", "ts"),
        "k",
        1,
    )


def make_file(keyspace: Keyspace = Keyspace.UINT64, split_points: tuple[bytes, ...] = ()) -> MetadataFile:
    ids = itertools.count(1)
    table = make_table(keyspace)
    return create_file(table, [(Placement("node-1", next(ids)),) for _ in range(len(split_points) + 1)], split_points)


class FakeMessage:
    def __init__(self, topic: str, offset: int) -> None:
        self._topic = topic
        self._offset = offset

    def topic(self) -> str:
        return self._topic

    def offset(self) -> int:
        return self._offset


class FakeError:
    def __init__(self, name: str) -> None:
        self._name = name

    def name(self) -> str:
        return self._name

    def __str__(self) -> str:
        return f"KafkaError{{{self._name}}}"


class FakeKafka:
    """Records produced messages; delivers them (callbacks) on poll/flush, failing topics in ``fail``."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._pending: list[tuple[str, Any]] = []
        self.offsets: dict[str, int] = {}
        self.fail: dict[str, str] = {}

    def produce(self, topic: str, value: bytes, headers: Any = None, on_delivery: Any = None) -> None:
        self.messages.append({"topic": topic, "value": value, "headers": headers})
        self._pending.append((topic, on_delivery))

    def _deliver(self) -> None:
        pending, self._pending = self._pending, []
        for topic, callback in pending:
            if topic in self.fail:
                callback(FakeError(self.fail[topic]), None)
                continue
            offset = self.offsets.get(topic, 0)
            self.offsets[topic] = offset + 1
            callback(None, FakeMessage(topic, offset))

    def poll(self, timeout: float = 0) -> int:
        self._deliver()
        return 0

    def flush(self, timeout: float = -1) -> int:
        self._deliver()
        return 0


class FakeRefusals:
    """A :class:`producer.refusals.RefusalReader` that returns the refusals queued in ``pending``."""

    def __init__(self) -> None:
        self.pending: list[Any] = []
        self.starts = 0
        self.reads = 0
        self.unchecked: list[float | None] = []
        self.closed = False

    def start(self, timeout_s: float) -> None:
        self.starts += 1

    def read(self, timeout_s: float, *, unchecked_since: float | None = 0.0) -> list[Any]:
        self.reads += 1
        self.unchecked.append(unchecked_since)
        out, self.pending = self.pending, []
        return out

    def close(self) -> None:
        self.closed = True
