"""Replication of shoal's own topics against the topic policy (DESIGN.md section 1).

``shoal status`` and ``shoal offsets`` report topics below the policy, without a leader or with
fewer in-sync replicas than replicas (:func:`topic_problems`); ``shoal admin fix-replication``
raises them to the policy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from shoal.errors import KafkaOperationError
from shoal.kafka import clients, reassign
from shoal.kafka.admin import TopicHealth, live_brokers, shoal_topics, topic_health
from shoal.kafka.settings import KafkaSettings
from shoal_app.cli.models import ReplicationFix, TopicFix


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


def fix_replication(
    kafka: KafkaSettings,
    topic_prefix: str,
    cache_dir: Path,
    *,
    wait: bool,
    timeout_s: float,
    progress: Callable[[str], None],
) -> ReplicationFix:
    """Raise every topic under ``topic_prefix`` to the topic policy of ``kafka``: reassign the
    partitions with too few replicas (Kafka's tool, :mod:`shoal.kafka.reassign`), and with ``wait``
    wait until the new replicas are in sync and set ``min.insync.replicas``. Without ``wait`` the
    moves are started and ``min.insync.replicas`` is left for a later run (once in sync)."""
    admin = clients.admin(kafka)
    try:
        topics = shoal_topics(admin, topic_prefix)
    except KafkaOperationError as exc:
        raise type(exc)(f"{exc} (Kafka at {kafka.bootstrap_servers})", exc.kafka_error) from exc
    planned = reassign.plan(admin, topics, kafka.topics)
    moves = [m for t in planned for m in t.moves]
    results: dict[str, TopicFix] = {}
    for t in planned:
        results[t.topic] = TopicFix(
            topic=t.topic,
            replication_factor_before=t.replication_factor,
            replication_factor=t.replication_factor,
            min_insync_replicas_before=t.min_insync_replicas,
            min_insync_replicas=t.min_insync_replicas,
            status="ok",
        )
    if moves:
        progress(f"reassigning {len(moves)} partition(s) of {len({m.topic for m in moves})} topic(s)")
        reassign.execute(kafka, cache_dir, moves)
    still = reassign.pending(admin, moves) if moves else []
    if wait and still:
        progress(f"waiting up to {timeout_s:.0f}s for the new replicas to catch up")
        reassign.wait_until_replicated(admin, moves, timeout_s)
        still = []
    moving = {m.topic for m in still}
    isr: dict[str, int] = {}
    for t in planned:
        fix = results[t.topic]
        if t.topic in moving:
            results[t.topic] = fix.model_copy(update={"status": "reassigning"})
            continue
        update: dict[str, object] = {
            "replication_factor": t.wanted_replication_factor if t.moves else t.replication_factor
        }
        if t.moves:
            update["status"] = "raised"
        if t.min_insync_replicas != t.wanted_min_insync_replicas:
            isr[t.topic] = t.wanted_min_insync_replicas
            update["min_insync_replicas"] = t.wanted_min_insync_replicas
            update["status"] = "raised"
        if t.below_policy:
            update["status"] = "below_policy"
        results[t.topic] = fix.model_copy(update=update)
    if isr:
        progress(f"setting min.insync.replicas of {len(isr)} topic(s)")
        reassign.set_min_insync_replicas(admin, isr)
    wanted = kafka.topics.replication_factor_for(live_brokers(admin))
    return ReplicationFix(
        replication_factor=wanted,
        min_insync_replicas=kafka.topics.min_insync_replicas_for(wanted),
        complete=not moving and not any(t.below_policy for t in planned),
        topics=[results[t.topic] for t in planned],
    )
