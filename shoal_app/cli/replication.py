"""Replication of shoal's own topics against the topic policy (DESIGN.md section 1).

``shoal status`` and ``shoal offsets`` report topics below the policy, without a leader or with
fewer in-sync replicas than replicas (:func:`topic_problems`); ``shoal admin fix-replication``
raises them to the policy.
"""

from __future__ import annotations

from shoal.errors import KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.admin import TopicHealth, shoal_topics, topic_health
from shoal.kafka.settings import KafkaSettings


def topic_health_of_prefix(kafka: KafkaSettings, topic_prefix: str, timeout_s: float = 10.0) -> list[TopicHealth]:
    """The health of every topic under ``topic_prefix``, measured against ``kafka.topics``."""
    admin = clients.admin(kafka)
    return topic_health(admin, shoal_topics(admin, topic_prefix, timeout_s), kafka.topics, timeout_s)


def topic_problems(kafka: KafkaSettings, topic_prefix: str, timeout_s: float = 10.0) -> list[TopicHealth]:
    """The topics under ``topic_prefix`` with a problem (an unreachable cluster: none, the caller's
    own checks report that)."""
    try:
        return [h for h in topic_health_of_prefix(kafka, topic_prefix, timeout_s) if h.problems]
    except KafkaOperationError:
        return []
