"""Topic administration over confluent-kafka's AdminClient (errors classified as KafkaOperationError).

:func:`create_topic` applies the :class:`~shoal.kafka.settings.TopicPolicy` (replication factor,
``min.insync.replicas``, and the log segment size of topics without time retention) to every topic
shoal creates; :func:`topic_health` and
:func:`warn_under_replicated` check existing topics against it (DESIGN.md section 1).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from shoal.errors import KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.errors import classify, error_code
from shoal.kafka.settings import KafkaSettings, TopicPolicy
from shoal.worker import Deadline

log = logging.getLogger(__name__)

FIX_REPLICATION_COMMAND = "shoal admin fix-replication --wait"
"""The command that raises shoal's topics to the topic policy (named by every warning)."""

TRUNCATED_BY_TAIL: Mapping[str, str] = {"retention.ms": "-1", "retention.bytes": "-1"}
"""Config of a topic whose records shoal deletes itself, with ``delete_records`` below its Ack
indexes (ingest, WAL and segments channels: storage_node.replication.tail): never by time or size,
which could delete what a replica or leader that is down has not taken yet."""


def live_brokers(admin: AdminClient, timeout_s: float = 10.0) -> int:
    """How many brokers the cluster metadata lists (the live ones)."""
    try:
        return len(admin.list_topics(timeout=timeout_s).brokers)
    except KafkaException as exc:
        raise classify(exc, "cannot list the brokers") from exc


def create_topic(
    admin: AdminClient,
    name: str,
    *,
    policy: TopicPolicy,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    repair: bool = False,
) -> None:
    """Create a topic with the replication ``policy`` decides for the live brokers (and its
    ``min.insync.replicas``) and wait until every partition has a leader. An existing topic is not
    an error; one below the policy gets a loud warning, once per process (:func:`warn_under_replicated`):
    every process checks the topics it uses when it starts using them. With ``repair`` (the storage
    nodes, which own the topics), an existing topic whose ``config`` differs is set right, once per
    process (:func:`ensure_topic_config`)."""
    try:
        md = admin.list_topics(timeout=min(10.0, timeout_s))  # all topics: never auto-creates one
    except KafkaException as exc:
        raise classify(exc, "cannot list the brokers") from exc
    known = md.topics.get(name)
    if known is not None and known.error is None and known.partitions:
        # No CreateTopics for a topic that exists: it needs the controller, which a broker loss
        # can leave unavailable for a while, while the topic itself can be read and written.
        _use_existing(admin, name, policy, timeout_s, config if repair else None)
        return
    rf = policy.replication_factor_for(len(md.brokers))
    wanted = dict(config or {})
    topic_config = {
        "min.insync.replicas": str(policy.min_insync_replicas_for(rf)),
        **policy.retention_config(wanted),
        **wanted,
    }
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=rf, config=topic_config)],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    existed = False
    try:
        futures[name].result(timeout=timeout_s)
    except KafkaException as exc:
        if error_code(exc) != KafkaError.TOPIC_ALREADY_EXISTS:
            raise classify(exc, f"cannot create topic {name!r}") from exc
        existed = True
    except TimeoutError as exc:  # the future's own bound, not librdkafka's request timeout
        raise KafkaOperationError(f"cannot create topic {name!r}: no answer within {timeout_s}s") from exc
    finally:
        admin.poll(0)  # emit librdkafka's log lines
    if existed:
        _use_existing(admin, name, policy, timeout_s, config if repair else None)
    else:
        wait_for_topic(admin, name, timeout_s=timeout_s)


def _use_existing(
    admin: AdminClient, name: str, policy: TopicPolicy, timeout_s: float, config: Mapping[str, str] | None = None
) -> None:
    """Wait for a leader of every partition of an existing topic; warn once if it is below the policy;
    once per process, set the ``config`` the caller asked for where the topic has another value."""
    wait_for_topic(admin, name, timeout_s=timeout_s)
    if name not in _checked:
        _checked.add(name)
        warn_under_replicated(admin, [name], policy, who="shoal", timeout_s=timeout_s)
    if config and name not in _config_checked:
        _config_checked.add(name)
        ensure_topic_config(admin, name, config, timeout_s=timeout_s)


def ensure_topic_config(admin: AdminClient, name: str, config: Mapping[str, str], *, timeout_s: float = 10.0) -> bool:
    """Set the keys of ``config`` that the existing topic ``name`` has with another value; True if it
    has them all now. A topic shoal truncates itself (:data:`TRUNCATED_BY_TAIL`) that a broker's time
    retention also deletes would lose records no one has read yet, so a topic created without it (by
    another tool, or by an older shoal) is set right on first use. A cluster that refuses (no
    ALTER_CONFIGS right) gets a loud warning naming the command that fixes it."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    try:
        current = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(timeout=timeout_s)
        wrong = {k: v for k, v in config.items() if k not in current or str(current[k].value) != str(v)}
        if not wrong:
            return True
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in wrong.items()]
        fix = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=entries)
        admin.incremental_alter_configs([fix], request_timeout=timeout_s)[fix].result(timeout=timeout_s)
    except (KafkaException, TimeoutError) as exc:
        settings = ",".join(f"{k}={v}" for k, v in config.items())
        log.warning(
            "shoal: TOPIC CONFIG WRONG: topic %s should have %s and could not be checked or set (%s); "
            "fix: kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config %s",
            name,
            settings,
            exc,
            name,
            settings,
        )
        return False
    log.warning("shoal: topic %s had %s; set to %s", name, {k: current[k].value for k in wrong if k in current}, wrong)
    return True


DELETING_CONFIGS = (("retention.ms", "-1"), ("retention.bytes", "-1"))
"""The settings with which Kafka never deletes records of a topic shoal truncates itself."""


def time_retained(admin: AdminClient, topics: Iterable[str], *, timeout_s: float = 10.0) -> dict[str, str]:
    """The topics of ``topics`` (those that exist) that Kafka deletes records of by time or size:
    topic -> the settings that do (``retention.ms=604800000``). One DescribeConfigs request."""
    from confluent_kafka.admin import ConfigResource

    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in sorted(set(topics))]
    out: dict[str, str] = {}
    if not resources:
        return out
    try:
        futures = admin.describe_configs(resources, request_timeout=timeout_s)
        for resource, future in futures.items():
            try:
                current = future.result(timeout=timeout_s)
            except KafkaException as exc:
                if error_code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue  # not created (yet), or deleted since
                raise
            deleting = [
                f"{k}={current[k].value}"
                for k, keep in DELETING_CONFIGS
                if k in current and str(current[k].value) != keep
            ]
            if deleting:
                out[resource.name] = ", ".join(deleting)
    except KafkaException as exc:
        raise classify(exc, "cannot read the topics' retention settings") from exc
    except TimeoutError as exc:
        raise KafkaOperationError(f"cannot read the topics' retention settings within {timeout_s}s") from exc
    return out


def deletion_settings(admin: AdminClient, topic: str, *, timeout_s: float = 10.0) -> dict[str, int]:
    """``retention.ms`` and ``retention.bytes`` of ``topic`` (those its config holds as integers);
    KafkaOperationError when they cannot be read. One DescribeConfigs request."""
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        current = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(timeout=timeout_s)
    except KafkaException as exc:
        raise classify(exc, f"cannot read the retention settings of {topic}") from exc
    except TimeoutError as exc:
        raise KafkaOperationError(f"cannot read the retention settings of {topic} within {timeout_s}s") from exc
    out: dict[str, int] = {}
    for name in ("retention.ms", "retention.bytes"):
        value = current[name].value if name in current else None
        if isinstance(value, str) and value.lstrip("-").isdigit():
            out[name] = int(value)
    return out


_checked: set[str] = set()
"""Existing topics this process has checked against the policy (one warning per topic, not per use)."""
_config_checked: set[str] = set()
"""Existing topics whose config this process has checked (:func:`ensure_topic_config`)."""


def wait_for_topic(admin: AdminClient, name: str, *, timeout_s: float = 30.0) -> int:
    """Wait until the topic's metadata shows every partition with a leader; return the partition count.

    CreateTopics returns before every broker's metadata cache has the topic, so a producer or a
    describe right after it can otherwise see an unknown topic.
    """
    deadline = Deadline(timeout_s)
    last_error = "not in metadata yet"
    while True:
        try:
            md = admin.list_topics(name, timeout=min(5.0, timeout_s)).topics.get(name)
        except KafkaException as exc:
            md, last_error = None, str(exc)
        if md is not None and md.error is None and md.partitions and all(p.leader >= 0 for p in md.partitions.values()):
            return len(md.partitions)
        if md is not None and md.error is not None:
            last_error = str(md.error)
        if not deadline.sleep(0.2):
            raise KafkaOperationError(f"topic {name!r} did not become available within {timeout_s}s: {last_error}")


def delete_topics(admin: AdminClient, names: list[str], timeout_s: float = 30.0) -> None:
    if not names:
        return
    for name, fut in admin.delete_topics(names, operation_timeout=timeout_s, request_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s)
        except KafkaException as exc:
            if error_code(exc) != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise classify(exc, f"cannot delete topic {name!r}") from exc
        except TimeoutError as exc:
            raise KafkaOperationError(f"cannot delete topic {name!r}: no answer within {timeout_s}s") from exc
    admin.poll(0)


def delete_records(admin: AdminClient, targets: list[TopicPartition], what: str, timeout_s: float = 30.0) -> None:
    """``delete_records``: move the start of each of ``targets``' partitions to its offset (a Tail).
    KafkaOperationError when a broker refuses or does not answer in ``timeout_s``."""
    if not targets:
        return
    try:
        for _tp, fut in admin.delete_records(targets, operation_timeout=timeout_s, request_timeout=timeout_s).items():
            fut.result(timeout=timeout_s)
    except KafkaException as exc:
        raise classify(exc, f"delete_records on {what}") from exc
    except TimeoutError as exc:
        raise KafkaOperationError(f"delete_records on {what} timed out") from exc


def log_start_and_end(
    settings: KafkaSettings, topic: str, partition: int = 0, timeout_s: float = 10.0
) -> tuple[int, int]:
    """(log start offset, log end offset) of one topic partition: the Tail and Append indexes."""
    consumer = clients.consumer(settings, group_id="shoal-watermarks")
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
    except KafkaException as exc:
        raise classify(exc, f"cannot read offsets of {topic}[{partition}]") from exc
    finally:
        consumer.close()
    return int(low), int(high)


@dataclass(frozen=True)
class TopicHealth:
    """One topic measured against the topic policy: its smallest replica count, partitions without
    a leader and with fewer in-sync replicas than replicas."""

    topic: str
    exists: bool
    replication_factor: int
    wanted_replication_factor: int
    leaderless_partitions: tuple[int, ...] = ()
    under_replicated_partitions: tuple[int, ...] = ()

    @property
    def below_policy(self) -> bool:
        return self.exists and self.replication_factor < self.wanted_replication_factor

    @property
    def problems(self) -> list[str]:
        """One line per problem (empty: healthy, or not created yet)."""
        out: list[str] = []
        if self.below_policy:
            out.append(
                f"topic {self.topic} has replication factor {self.replication_factor}, below the policy's "
                f"{self.wanted_replication_factor} (fix: {FIX_REPLICATION_COMMAND})"
            )
        if self.leaderless_partitions:
            out.append(f"topic {self.topic} has no leader for partition(s) {list(self.leaderless_partitions)}")
        if self.under_replicated_partitions:
            out.append(
                f"topic {self.topic} is under-replicated (in-sync < replicas) in partition(s) "
                f"{list(self.under_replicated_partitions)}"
            )
        return out


def topic_health(
    admin: AdminClient, topics: Iterable[str], policy: TopicPolicy, timeout_s: float = 10.0
) -> list[TopicHealth]:
    """The health of ``topics`` (from one cluster metadata request), measured against ``policy``."""
    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise classify(exc, "cannot read the cluster metadata") from exc
    wanted = policy.replication_factor_for(len(md.brokers))
    out: list[TopicHealth] = []
    for name in topics:
        tmd = md.topics.get(name)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            out.append(TopicHealth(name, False, 0, wanted))
            continue
        parts = tmd.partitions.values()
        out.append(
            TopicHealth(
                name,
                True,
                min(len(p.replicas) for p in parts),
                wanted,
                tuple(sorted(p.id for p in parts if p.leader < 0)),
                tuple(sorted(p.id for p in parts if p.leader >= 0 and len(p.isrs) < len(p.replicas))),
            )
        )
    return out


def shoal_topics(admin: AdminClient, topic_prefix: str, timeout_s: float = 10.0) -> list[str]:
    """Every topic named under ``topic_prefix`` (the topics shoal created), sorted."""
    try:
        names = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        raise classify(exc, "cannot list topics") from exc
    return sorted(name for name in names if name.startswith(f"{topic_prefix}."))


def warn_under_replicated(
    admin: AdminClient, topics: Iterable[str], policy: TopicPolicy, *, who: str, timeout_s: float = 10.0
) -> list[TopicHealth]:
    """Check ``topics`` against ``policy`` and log one loud warning per topic below it, naming the
    topic and the command that fixes it; return the topics below it. A cluster that cannot be asked
    is logged and skipped (the caller's own requests report that)."""
    try:
        below = [h for h in topic_health(admin, topics, policy, timeout_s) if h.below_policy]
    except KafkaOperationError as exc:
        log.warning("%s: cannot check topic replication: %s", who, exc)
        return []
    for health in below:
        log.warning(
            "%s: REPLICATION BELOW POLICY: topic %s has replication factor %d, the policy wants %d; "
            "losing one broker can lose or block it. Fix: %s",
            who,
            health.topic,
            health.replication_factor,
            health.wanted_replication_factor,
            FIX_REPLICATION_COMMAND,
        )
    return below
