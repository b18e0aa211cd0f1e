"""The topic policy: every topic shoal creates gets its replication from one place (DESIGN.md section 1)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pytest

from shoal.errors import ConfigError
from shoal.kafka.admin import FIX_REPLICATION_COMMAND, create_topic, topic_health, warn_under_replicated
from shoal.kafka.settings import ConnectionSettings, TopicPolicy


@pytest.mark.parametrize(("brokers", "rf", "isr"), [(1, 1, 1), (2, 2, 2), (3, 3, 2), (5, 3, 2), (0, 1, 1)])
def test_policy_follows_the_live_brokers(brokers: int, rf: int, isr: int) -> None:
    policy = TopicPolicy()
    assert policy.replication_factor_for(brokers) == rf
    assert policy.min_insync_replicas_for(rf) == isr


def test_configured_policy_wins_and_min_isr_is_capped() -> None:
    policy = TopicPolicy(replication_factor=2, min_insync_replicas=2)
    assert policy.replication_factor_for(5) == 2
    assert TopicPolicy(min_insync_replicas=3).min_insync_replicas_for(2) == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"replication_factor": 0},
        {"min_insync_replicas": -1},
        {"replication_factor": True},
        {"replication_factor": 1, "min_insync_replicas": 2},
    ],
)
def test_invalid_policy_is_a_config_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        TopicPolicy(**kwargs)


def test_policy_is_resolved_with_the_connection_settings() -> None:
    env = {"SHOAL_TOPIC_REPLICATION_FACTOR": "2", "SHOAL_TOPIC_MIN_INSYNC_REPLICAS": "1"}
    resolved = ConnectionSettings.resolve({}, env, None)
    assert resolved.kafka.topics == TopicPolicy(2, 1)
    assert ConnectionSettings.resolve({"topic_replication_factor": 3}, env, None).kafka.topics == TopicPolicy(3, 1)
    assert ConnectionSettings.resolve({}, {}, None).kafka.topics == TopicPolicy()
    with pytest.raises(ConfigError, match="SHOAL_TOPIC_REPLICATION_FACTOR"):
        ConnectionSettings.resolve({}, {"SHOAL_TOPIC_REPLICATION_FACTOR": "three"}, None)


@dataclass
class _Partition:
    id: int
    leader: int
    replicas: list[int]
    isrs: list[int]


@dataclass
class _Topic:
    partitions: dict[int, _Partition]
    error: Any = None


@dataclass
class _Metadata:
    brokers: dict[int, object]
    topics: dict[str, _Topic]


class _Future:
    def result(self, timeout: float | None = None) -> None:
        return None


@dataclass
class FakeAdmin:
    """The AdminClient calls the topic policy makes: list_topics and create_topics."""

    brokers: int
    topics: dict[str, _Topic] = field(default_factory=dict)
    created: list[Any] = field(default_factory=list)

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> _Metadata:
        return _Metadata({i: object() for i in range(self.brokers)}, self.topics)

    def create_topics(self, new: list[Any], **_: Any) -> dict[str, _Future]:
        for t in new:
            self.created.append(t)
            reps = list(range(t.replication_factor))
            self.topics[t.topic] = _Topic({0: _Partition(0, 0, reps, reps)})
        return {t.topic: _Future() for t in new}

    def poll(self, timeout: float) -> int:
        return 0


def test_create_topic_applies_the_policy() -> None:
    admin = FakeAdmin(brokers=3)
    create_topic(admin, "shoal.x", policy=TopicPolicy(), config={"retention.ms": "-1"})  # type: ignore[arg-type]
    new = admin.created[0]
    assert new.replication_factor == 3
    # a topic truncated by shoal's Tail (no time retention) gets the policy's log segment size
    assert new.config == {"min.insync.replicas": "2", "retention.ms": "-1", "segment.bytes": str(64 * 1024 * 1024)}
    single = FakeAdmin(brokers=1)
    create_topic(single, "shoal.y", policy=TopicPolicy())  # type: ignore[arg-type]
    assert single.created[0].replication_factor == 1
    assert single.created[0].config == {"min.insync.replicas": "1"}


def test_topic_health_and_the_loud_warning(caplog: pytest.LogCaptureFixture) -> None:
    admin = FakeAdmin(brokers=3)
    admin.topics["shoal.metadata"] = _Topic({0: _Partition(0, 1, [1], [1])})
    admin.topics["shoal.ok"] = _Topic({0: _Partition(0, 1, [0, 1, 2], [0, 1, 2])})
    admin.topics["shoal.lost"] = _Topic({0: _Partition(0, -1, [0, 1, 2], [0]), 1: _Partition(1, 2, [0, 1, 2], [2])})
    health = {
        h.topic: h
        for h in topic_health(admin, ["shoal.metadata", "shoal.ok", "shoal.lost", "shoal.none"], TopicPolicy())
    }  # type: ignore[arg-type]
    assert health["shoal.metadata"].below_policy and "below the policy" in health["shoal.metadata"].problems[0]
    assert health["shoal.ok"].problems == []
    assert health["shoal.lost"].leaderless_partitions == (0,)
    assert health["shoal.lost"].under_replicated_partitions == (1,)
    assert not health["shoal.none"].exists and health["shoal.none"].problems == []
    with caplog.at_level(logging.WARNING):
        below = warn_under_replicated(admin, ["shoal.metadata", "shoal.ok"], TopicPolicy(), who="test")  # type: ignore[arg-type]
    assert [h.topic for h in below] == ["shoal.metadata"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "shoal.metadata" in warnings[0] and FIX_REPLICATION_COMMAND in warnings[0]
