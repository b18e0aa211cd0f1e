"""The topic policy on the session cluster: shoal's topics are created replicated as the cluster
allows, and a topic below the policy is reported loudly (DESIGN.md section 1)."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from metadata.store import KafkaFileStore, KafkaStoreConfig
from shoal.errors import KafkaOperationError
from shoal.kafka.admin import (
    FIX_REPLICATION_COMMAND,
    TRUNCATED_BY_TAIL,
    create_topic,
    deletion_settings,
    ensure_topic_config,
    live_brokers,
    time_retained,
    topic_health,
)
from shoal.kafka.settings import KafkaSettings, TopicPolicy
from shoal_app.testing.cluster import TestCluster

pytestmark = pytest.mark.integration


def _min_isr(admin: AdminClient, topic: str) -> int:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return int(admin.describe_configs([res])[res].result(30)["min.insync.replicas"].value)


def test_metadata_topic_follows_the_policy(cluster: TestCluster, kafka_admin: AdminClient, topic_prefix: str) -> None:
    brokers = live_brokers(kafka_admin)
    with KafkaFileStore(KafkaStoreConfig(KafkaSettings(cluster.bootstrap_servers), topic_prefix)) as store:
        store.ensure_topic()
    topic = f"{topic_prefix}.metadata"
    [health] = topic_health(kafka_admin, [topic], TopicPolicy())
    assert health.replication_factor == min(3, brokers) and not health.problems
    assert _min_isr(kafka_admin, topic) == min(2, health.replication_factor)


def test_existing_topic_below_the_policy_is_one_loud_warning(
    kafka_admin: AdminClient, topic_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic = f"{topic_prefix}.ingest.t.p"
    create_topic(kafka_admin, topic, policy=TopicPolicy())
    stricter = TopicPolicy(replication_factor=live_brokers(kafka_admin) + 1)
    with caplog.at_level(logging.WARNING, logger="shoal.kafka.admin"):
        for _ in range(3):  # every use of the topic checks it; the warning comes once
            create_topic(kafka_admin, topic, policy=stricter)
    warnings = [r.getMessage() for r in caplog.records if topic in r.getMessage()]
    assert len(warnings) == 1 and FIX_REPLICATION_COMMAND in warnings[0]
    [health] = topic_health(kafka_admin, [topic], stricter)
    assert health.below_policy and "below the policy" in health.problems[0]


def _retention(admin: AdminClient, topic: str) -> str:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return str(admin.describe_configs([res])[res].result(30)["retention.ms"].value)


def test_a_node_sets_an_existing_ingest_topic_to_no_time_retention(
    kafka_admin: AdminClient, topic_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An ingest topic made with the broker's time retention (by another tool, or a split before this
    fix) would delete rows no leader has taken yet: a node's use of it sets ``retention.ms=-1``; a
    producer's (no ``repair``) leaves it."""
    topic = f"{topic_prefix}.ingest.retention"
    create_topic(kafka_admin, topic, policy=TopicPolicy())
    assert _retention(kafka_admin, topic) != "-1"
    create_topic(kafka_admin, topic, policy=TopicPolicy(), config=TRUNCATED_BY_TAIL)
    assert _retention(kafka_admin, topic) != "-1"
    # what `shoal verify` asks: a topic that does not exist is left out, not an error
    retained = time_retained(kafka_admin, [topic, f"{topic_prefix}.ingest.never-made"])
    assert list(retained) == [topic] and retained[topic].startswith("retention.ms=")
    with caplog.at_level(logging.WARNING, logger="shoal.kafka.admin"):
        create_topic(kafka_admin, topic, policy=TopicPolicy(), config=TRUNCATED_BY_TAIL, repair=True)
    assert _retention(kafka_admin, topic) == "-1"
    assert any(topic in r.getMessage() and "set to" in r.getMessage() for r in caplog.records)
    assert ensure_topic_config(kafka_admin, topic, TRUNCATED_BY_TAIL)  # already right: nothing to do
    assert time_retained(kafka_admin, [topic]) == {}
    # what a producer's refusal check reads when deadletter records were deleted before it read them
    assert deletion_settings(kafka_admin, topic) == {"retention.ms": -1, "retention.bytes": -1}
    with pytest.raises(KafkaOperationError):
        deletion_settings(kafka_admin, f"{topic_prefix}.ingest.never-made")
