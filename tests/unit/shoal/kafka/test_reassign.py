"""The reassignment plan given to Kafka's tool (shoal.kafka.reassign)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from shoal.kafka.reassign import PartitionMove, plan, reassignment_json, tool_properties
from shoal.kafka.settings import KafkaSettings, TopicPolicy


@dataclass
class _P:
    id: int
    replicas: list[int]
    leader: int = 0
    isrs: list[int] = field(default_factory=list)


@dataclass
class _T:
    partitions: dict[int, _P]
    error: Any = None


@dataclass
class _Md:
    brokers: dict[int, object]
    topics: dict[str, _T]


class _Admin:
    def __init__(self, topics: dict[str, _T], brokers: tuple[int, ...] = (1, 2, 3)) -> None:
        self.topics, self.brokers = topics, brokers

    def list_topics(self, timeout: float = 0) -> _Md:
        return _Md(dict.fromkeys(self.brokers, object()), self.topics)

    def describe_configs(self, resources: list[Any], request_timeout: float = 0) -> dict[Any, Any]:
        class _F:
            def result(self, timeout: float = 0) -> dict[str, Any]:
                return {}

        return {r: _F() for r in resources}


def test_plan_keeps_current_replicas_first_and_spreads_new_ones() -> None:
    admin = _Admin(
        {
            "shoal.metadata": _T({0: _P(0, [1])}),
            "shoal.ingest.a": _T({0: _P(0, [1])}),
            "shoal.ok": _T({0: _P(0, [1, 2, 3])}),
        }
    )
    planned = {
        t.topic: t for t in plan(admin, ["shoal.metadata", "shoal.ingest.a", "shoal.ok", "shoal.gone"], TopicPolicy())
    }  # type: ignore[arg-type]
    assert set(planned) == {"shoal.metadata", "shoal.ingest.a", "shoal.ok"}
    assert planned["shoal.ok"].moves == ()
    for name in ("shoal.metadata", "shoal.ingest.a"):
        [move] = planned[name].moves
        assert move.replicas[0] == 1 and sorted(move.replicas) == [1, 2, 3]
    assert planned["shoal.metadata"].wanted_min_insync_replicas == 2


def test_with_too_few_live_brokers_the_plan_stays_within_them_and_says_so() -> None:
    """An explicit replication factor 3 with one broker of three down: the move adds the live one,
    and min.insync.replicas is capped by the replicas the topic will have. Capped by the policy's
    3 instead, every acks=all write to the topic failed (an audit's proof)."""
    policy = TopicPolicy(replication_factor=3)
    planned = {
        t.topic: t for t in plan(_Admin({"shoal.wal.x.1": _T({0: _P(0, [1])})}, (1, 2)), ["shoal.wal.x.1"], policy)
    }  # type: ignore[arg-type]
    t = planned["shoal.wal.x.1"]
    [move] = t.moves
    assert sorted(move.replicas) == [1, 2] and t.wanted_replication_factor == 2 and t.below_policy
    assert t.wanted_min_insync_replicas <= 2
    alone = plan(_Admin({"shoal.wal.x.1": _T({0: _P(0, [1])})}, (1,)), ["shoal.wal.x.1"], policy)  # type: ignore[arg-type]
    assert alone[0].moves == () and alone[0].wanted_min_insync_replicas == 1 and alone[0].below_policy


def test_reassignment_json_and_tool_settings() -> None:
    doc = json.loads(reassignment_json([PartitionMove("t", 0, (1, 2, 3))]))
    assert doc == {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3]}]}
    assert tool_properties(KafkaSettings("h:1")) == {"security.protocol": "PLAINTEXT"}
    sasl = tool_properties(
        KafkaSettings("h:1", "SASL_SSL", "SCRAM-SHA-512", "u", 'p"w', ssl_ca_location="/ca.pem")  # type: ignore[arg-type]
    )
    assert sasl["sasl.jaas.config"].startswith("org.apache.kafka.common.security.scram.ScramLoginModule required")
    assert 'password="p\\"w";' in sasl["sasl.jaas.config"]
    assert (sasl["ssl.truststore.type"], sasl["ssl.truststore.location"]) == ("PEM", "/ca.pem")
