"""The monitor lists a group's partitions with the AdminClient rarely, and reads its offsets through
consumers in between (librdkafka 2.16 can crash on the AdminClient request during a coordinator
change). The Kafka calls are replaced; what is checked is which call answers each poll."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

import monitor.kafka_offsets as ko

TP1, TP2 = ("ingest-a", 0), ("ingest-b", 1)


class Calls:
    def __init__(self) -> None:
        self.listed: list[list[str]] = []
        self.read: list[dict[str, set[tuple[str, int]]]] = []
        self.offsets: dict[str, dict[tuple[str, int], int | None]] = {"g1": {TP1: 5, TP2: 7}, "g2": {}}

    def all_committed_offsets(self, _admin: Any, groups: Iterable[str], **_: Any) -> dict[str, Any]:
        self.listed.append(sorted(groups))
        return {g: dict(self.offsets.get(g, {})) for g in groups}

    def committed_offsets(self, _admin: Any, requests: Mapping[str, Iterable[Any]], **_: Any) -> dict[str, Any]:
        self.read.append({g: set(tps) for g, tps in requests.items()})
        return {g: {tp: self.offsets.get(g, {}).get(tp) for tp in tps} for g, tps in requests.items()}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    c = Calls()
    monkeypatch.setattr(ko, "all_committed_offsets", c.all_committed_offsets)
    monkeypatch.setattr(ko, "committed_offsets", c.committed_offsets)
    monkeypatch.setattr(ko.KafkaOffsets, "admin", property(lambda self: object()))
    return c


def test_partitions_are_listed_once_then_read_through_consumers(calls: Calls, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(ko.time, "monotonic", lambda: clock[0])
    k = ko.KafkaOffsets("b:9092", group_topics_refresh_s=120)
    assert k.all_committed(["g1", "g2"]) == {"g1": {TP1: 5, TP2: 7}, "g2": {}}
    assert calls.listed == [["g1", "g2"]] and calls.read == []

    calls.offsets["g1"][TP1] = 6
    clock[0] += 5
    assert k.all_committed(["g1", "g2"]) == {"g1": {TP1: 6, TP2: 7}, "g2": {}}
    # g1 read through consumers; g2 had no offsets yet, so it is listed again
    assert calls.read == [{"g1": {TP1, TP2}}] and calls.listed[-1] == ["g2"]

    calls.offsets["g1"][("ingest-c", 0)] = 1  # the query reads a new topic: seen at the next listing
    clock[0] += 120
    assert k.all_committed(["g1"])["g1"] == {TP1: 6, TP2: 7, ("ingest-c", 0): 1}
    assert calls.listed[-1] == ["g1"]


def test_no_groups_no_calls(calls: Calls) -> None:
    assert ko.KafkaOffsets("b:9092").all_committed([]) == {}
    assert calls.listed == [] and calls.read == []
