"""What a partition's leader has not accepted yet: the last record of its ingest topic past its
leader group's committed offset (DESIGN.md section 8).

A split parent's straggler forwarder commits that group as it moves records to the children, so
a writer that routes by a newer partition map waits on it before writing a key again directly to
a child (``producer.Producer._order_across_splits``, ``spark_jobs.sink.retired_backlog``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from shoal.errors import KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.errors import classify
from shoal.kafka.indexes import committed_offsets, log_bounds, stable_ends
from shoal.kafka.readers import READ_CONFIG
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames

MAX_SPLIT_HOPS = 8
"""How many times a writer reads the backlog of split partitions again after waiting on it (a row a
parent forwarded to a child that split too waits on that child's topic, and so on): a bound, in
case other writers keep writing to a retired partition by an old partition map."""

CHECK_GROUP_SUFFIX = ".sink-check"
"""The label (``assign()`` only, never committed) of the consumer that reads an ingest topic's last
record: ``<leader group>.sink-check``, which the writer roles may describe (``shoal.security.acls``)."""


def unaccepted_ends(
    kafka: KafkaSettings, admin: AdminClient, topics: TopicNames, partition_ids: Iterable[str], timeout_s: float
) -> dict[str, tuple[str, int]]:
    """{ingest topic: (partition id, offset of its last record)} for each of ``partition_ids`` whose
    ingest topic holds a record its leader group has not committed past; a partition without an
    ingest topic is left out.

    A group without an offset (the partition accepted nothing, or Kafka expired the offset after
    ``offsets.retention.minutes``) counts from the log start: a straggler forwarder then starts
    there and deletes what it forwarded (``storage_node.roles.forward``)."""
    try:
        existing = set(admin.list_topics(timeout=timeout_s).topics)
    except KafkaException as exc:
        raise classify(exc, "cannot list the ingest topics") from exc
    pids = [pid for pid in dict.fromkeys(partition_ids) if topics.ingest(pid) in existing]
    if not pids:
        return {}
    tps = [(topics.ingest(pid), 0) for pid in pids]
    ends = stable_ends(admin, tps, timeout_s=timeout_s)
    groups = {topics.leader_group(pid): [(topics.ingest(pid), 0)] for pid in pids}
    done = committed_offsets(admin, groups, timeout_s=timeout_s, stable=False)
    starts = log_bounds(admin, tps, timeout_s=timeout_s)
    out: dict[str, tuple[str, int]] = {}
    for pid in pids:
        topic = topics.ingest(pid)
        accepted = done.get(topics.leader_group(pid), {}).get((topic, 0))
        start = max(accepted or 0, starts.get((topic, 0), (0, 0))[0])
        end = ends.get((topic, 0), 0)
        if start < end:
            last = _last_record(kafka, topic, topics.leader_group(pid) + CHECK_GROUP_SUFFIX, start, end, timeout_s)
            if last is not None:
                out[topic] = (pid, last)
    return out


def _last_record(kafka: KafkaSettings, topic: str, label: str, start: int, end: int, timeout_s: float) -> int | None:
    """The offset of the last record in ``[start, end)`` of ``topic`` (transaction markers are never
    records), None when there is none."""
    consumer = clients.consumer(kafka, group_id=label, **READ_CONFIG)
    try:
        consumer.assign([TopicPartition(topic, 0, start)])
        last = None
        deadline = time.monotonic() + timeout_s
        while True:
            if time.monotonic() > deadline:
                raise KafkaOperationError(f"{topic}: could not read up to offset {end} in {timeout_s:.0f}s")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return last
                if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                    # the forwarder deleted what it forwarded (accepted) after ``start`` was read:
                    # go on from the new log start
                    try:
                        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s)
                    except KafkaException as exc:
                        raise KafkaOperationError(f"{topic}: {exc}") from exc
                    if low >= end:
                        return last
                    consumer.assign([TopicPartition(topic, 0, low)])
                    continue
                raise KafkaOperationError(f"{topic}: {err}", err)
            last = int(msg.offset() or 0)
            if last >= end - 1:
                return last
    finally:
        consumer.close()
