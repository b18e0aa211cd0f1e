"""Consumer groups are deleted from a child process (``shoal.kafka.groups``): librdkafka 2.16 can
abort a process on that coordinator-routed request, and a storage node must survive it."""

from __future__ import annotations

import os
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from shoal.kafka import clients
from shoal.kafka.admin import create_topic
from shoal.kafka.groups import delete_groups
from shoal.kafka.indexes import committed_offsets
from shoal.kafka.settings import KafkaSettings, TopicPolicy

pytestmark = pytest.mark.integration


def _abort(_settings: KafkaSettings, _groups: list[str], _timeout: float) -> dict[str, str | None]:
    os.abort()  # what librdkafka's failed assertion does


def test_groups_are_deleted_and_an_aborting_child_is_reported(cluster: Any, topic_prefix: str, group_id: str) -> None:
    settings = KafkaSettings(cluster.bootstrap_servers)
    admin = clients.admin(settings)
    topic = f"{topic_prefix}.groups"
    create_topic(admin, topic, policy=TopicPolicy())
    groups = [f"{group_id}-a", f"{group_id}-b"]
    for g in groups:
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": g, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        c.close()
    assert committed_offsets(admin, {g: [(topic, 0)] for g in groups}, stable=False) == {
        g: {(topic, 0): 3} for g in groups
    }

    # a child that aborts (as librdkafka's assertion does) is reported; the caller lives on
    died = delete_groups(settings, groups, timeout_s=10, work=_abort)
    assert set(died) == set(groups) and all(w is not None and "signal 6" in w for w in died.values()), died
    assert committed_offsets(admin, {groups[0]: [(topic, 0)]}, stable=False)[groups[0]] == {(topic, 0): 3}

    # the real deletion, and again on groups already gone: nothing left to delete is not a failure
    assert delete_groups(settings, [*groups, f"{group_id}-never"], timeout_s=10) == {
        **{g: None for g in groups},
        f"{group_id}-never": None,
    }
    assert committed_offsets(admin, {g: [(topic, 0)] for g in groups}, stable=False) == {
        g: {(topic, 0): None} for g in groups
    }
    assert delete_groups(settings, []) == {}
