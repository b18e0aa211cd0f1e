"""Topic administration over confluent-kafka's AdminClient (errors classified as KafkaOperationError)."""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from shoal.errors import KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.errors import classify, error_code
from shoal.kafka.settings import KafkaSettings
from shoal.worker import Deadline


def create_topic(
    admin: AdminClient,
    name: str,
    *,
    partitions: int = 1,
    replication_factor: int = -1,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Create a topic and wait until every partition has a leader; an existing topic is not an error."""
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=dict(config or {}))],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    try:
        futures[name].result(timeout=timeout_s)
    except KafkaException as exc:
        if error_code(exc) != KafkaError.TOPIC_ALREADY_EXISTS:
            raise classify(exc, f"cannot create topic {name!r}") from exc
    finally:
        admin.poll(0)  # emit librdkafka's log lines
    wait_for_topic(admin, name, timeout_s=timeout_s)


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
    admin.poll(0)


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
