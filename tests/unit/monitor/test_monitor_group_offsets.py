"""The monitor finds the partitions of groups known only by prefix (Spark queries, compaction
intakes) by asking their committed offset on every partition of the cluster, rarely, and reads only
the partitions found in between. Every read goes through consumers (``committed_offsets``), never an
AdminClient request routed to a group coordinator: librdkafka 2.16 aborts the process when one meets
a coordinator change. The Kafka calls are replaced; what is checked is what each poll asks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

import monitor.kafka_offsets as ko

TP1, TP2 = ("ingest-a", 0), ("ingest-b", 1)
TOPICS = {"ingest-a": 1, "ingest-b": 2, "__consumer_offsets": 50}
EVERY = {("ingest-a", 0), ("ingest-b", 0), ("ingest-b", 1)}


class Calls:
    def __init__(self) -> None:
        self.read: list[dict[str, set[tuple[str, int]]]] = []
        self.stable: list[bool] = []
        self.offsets: dict[str, dict[tuple[str, int], int | None]] = {"g1": {TP1: 5, TP2: 7}, "g2": {}}

    def committed_offsets(
        self, _admin: Any, requests: Mapping[str, Iterable[Any]], *, stable: bool = True, **_: Any
    ) -> dict[str, Any]:
        self.read.append({g: set(tps) for g, tps in requests.items()})
        self.stable.append(stable)
        return {g: {tp: self.offsets.get(g, {}).get(tp) for tp in tps} for g, tps in requests.items()}


class NoCoordinatorRequests:
    """An admin client on which a coordinator-routed request fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the monitor called AdminClient.{name}")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    c = Calls()
    monkeypatch.setattr(ko, "committed_offsets", c.committed_offsets)
    monkeypatch.setattr(ko.KafkaOffsets, "admin", property(lambda self: NoCoordinatorRequests()))
    return c


def test_partitions_are_found_on_every_partition_then_read_alone(calls: Calls, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(ko.time, "monotonic", lambda: clock[0])
    k = ko.KafkaOffsets("b:9092", group_topics_refresh_s=120)
    assert k.all_committed(["g1", "g2"], TOPICS) == {"g1": {TP1: 5, TP2: 7}, "g2": {}}
    # every partition of the cluster but Kafka's internal topics, both groups in one call
    assert calls.read == [{"g1": EVERY, "g2": EVERY}]

    calls.offsets["g1"][TP1] = 6
    clock[0] += 5
    assert k.all_committed(["g1", "g2"], TOPICS) == {"g1": {TP1: 6, TP2: 7}, "g2": {}}
    # g2 had no offsets yet, so every partition is asked again; g1 only on its own
    assert calls.read[1:] == [{"g2": EVERY}, {"g1": {TP1, TP2}}]

    calls.offsets["g1"][("ingest-c", 0)] = 1  # the query reads a new topic: found at the next refresh
    clock[0] += 120
    topics = {**TOPICS, "ingest-c": 1}
    assert k.all_committed(["g1"], topics)["g1"] == {TP1: 6, TP2: 7, ("ingest-c", 0): 1}
    assert calls.read[-1] == {"g1": EVERY | {("ingest-c", 0)}}
    # observers never wait for a transaction's pending offsets
    assert calls.stable and not any(calls.stable)


def test_no_groups_or_no_topics(calls: Calls) -> None:
    assert ko.KafkaOffsets("b:9092").all_committed([], TOPICS) == {}
    assert ko.KafkaOffsets("b:9092").all_committed(["g1"], {"__consumer_offsets": 50}) == {"g1": {}}
    assert calls.read == []
