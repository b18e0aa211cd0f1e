"""What the monitor asks Kafka, one batched request per question (KMinion / kafka-consumer-groups style).

- log start and end of every channel (``AdminClient.list_offsets``: earliest / latest): the Tail
  and Append indexes of a WAL channel;
- committed offsets of consumer groups (``list_consumer_group_offsets``): Ack, Consume and
  accepted-by-leader indexes; and how many live members each group has (``describe_consumer_groups``);
- topic ids (``describe_topics``) and the cluster id (metadata), to notice a topic recreated under
  a group or a different cluster;
- the first *data* record at or after a committed offset, read ``read_committed`` with a consumer
  that never commits: its timestamp gives the lag in seconds, its size the bytes estimate, and
  finding none (only transaction markers up to the end) means the lag is zero.

Every library error becomes :class:`~shoal.errors.KafkaOperationError` naming what was asked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from shoal.errors import KafkaOperationError

log = logging.getLogger(__name__)

TP = tuple[str, int]


@dataclass(frozen=True)
class RecordInfo:
    """The first data record at or after an offset."""

    offset: int
    timestamp_ms: int
    size_bytes: int


class KafkaOffsets:
    """Lazy admin client + one reader consumer; ``close()`` releases them."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        request_timeout_s: float = 10.0,
        fetch_timeout_s: float = 3.0,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.request_timeout_s = request_timeout_s
        self.fetch_timeout_s = fetch_timeout_s
        self._extra = dict(extra or {})
        self._admin: AdminClient | None = None
        self._reader: Any = None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, **self._extra})
        return self._admin

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._admin = None

    def __enter__(self) -> KafkaOffsets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- cluster and topics ---------------------------------------------------------------------

    def cluster_and_topics(self) -> tuple[str | None, dict[str, int]]:
        """(cluster id, {topic: partition count}) of every topic without an error."""
        try:
            md = self.admin.list_topics(timeout=self.request_timeout_s)
        except KafkaException as exc:
            raise KafkaOperationError(f"cannot list the topics of {self.bootstrap_servers}: {exc}") from exc
        topics = {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}
        return md.cluster_id, topics

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        """{topic: topic id} (a topic deleted meanwhile is left out)."""
        names = sorted(set(topics))
        if not names:
            return {}
        futures = self.admin.describe_topics(TopicCollection(names), request_timeout=self.request_timeout_s)
        out: dict[str, str] = {}
        for name, fut in futures.items():
            try:
                out[name] = str(fut.result(timeout=self.request_timeout_s).topic_id)
            except KafkaException as exc:
                if _code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                raise KafkaOperationError(f"cannot describe topic {name}: {exc}") from exc
        return out

    def log_bounds(self, tps: Iterable[TP]) -> dict[TP, tuple[int, int]]:
        """{(topic, partition): (log start, log end)}; partitions that vanished meanwhile are left out."""
        keys = sorted(set(tps))
        if not keys:
            return {}
        starts = self._list_offsets(keys, OffsetSpec.earliest())
        ends = self._list_offsets(keys, OffsetSpec.latest())
        return {k: (starts[k], ends[k]) for k in keys if k in starts and k in ends}

    def _list_offsets(self, keys: Sequence[TP], spec: Any) -> dict[TP, int]:
        request = {TopicPartition(t, p): spec for t, p in keys}
        futures = self.admin.list_offsets(request, request_timeout=self.request_timeout_s)
        out: dict[TP, int] = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = int(fut.result(timeout=self.request_timeout_s).offset)
            except KafkaException as exc:
                if _code(exc) in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_ID):
                    continue
                raise KafkaOperationError(f"cannot list offsets of {tp.topic}[{tp.partition}]: {exc}") from exc
        return out

    # -- groups ---------------------------------------------------------------------------------

    def committed(self, requests: Mapping[str, Iterable[TP]]) -> dict[str, dict[TP, int | None]]:
        """{group: {(topic, partition): committed offset or None}} (one request per group, all in flight)."""
        pending = []
        for group, tps in requests.items():
            parts = [TopicPartition(t, p) for t, p in sorted(set(tps))]
            if not parts:
                continue
            futures = self.admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, parts)], request_timeout=self.request_timeout_s
            )
            pending.append((group, futures[group]))
        return {group: self._offsets_result(group, fut) for group, fut in pending}

    def all_committed(self, groups: Iterable[str]) -> dict[str, dict[TP, int | None]]:
        """Every committed offset of each group (for groups whose topics are not known in advance)."""
        pending = []
        for group in sorted(set(groups)):
            futures = self.admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=self.request_timeout_s
            )
            pending.append((group, futures[group]))
        return {group: self._offsets_result(group, fut) for group, fut in pending}

    def _offsets_result(self, group: str, fut: Any) -> dict[TP, int | None]:
        try:
            res = fut.result(timeout=self.request_timeout_s)
        except KafkaException as exc:
            raise KafkaOperationError(f"cannot read the committed offsets of group {group}: {exc}") from exc
        out: dict[TP, int | None] = {}
        for tp in res.topic_partitions or []:
            if tp.error is not None and tp.error.code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART,):
                raise KafkaOperationError(f"group {group} on {tp.topic}[{tp.partition}]: {tp.error}")
            out[(tp.topic, tp.partition)] = int(tp.offset) if tp.offset >= 0 else None
        return out

    def members(self, groups: Iterable[str]) -> dict[str, int]:
        """{group: live members} (0 for an empty, dead or unknown group)."""
        names = sorted(set(groups))
        if not names:
            return {}
        futures = self.admin.describe_consumer_groups(names, request_timeout=self.request_timeout_s)
        out: dict[str, int] = {}
        for name, fut in futures.items():
            try:
                out[name] = len(fut.result(timeout=self.request_timeout_s).members or [])
            except KafkaException as exc:
                log.debug("describe group %s: %s", name, exc)
                out[name] = 0
        return out

    def groups_with_prefix(self, prefix: str) -> list[str]:
        try:
            res = self.admin.list_consumer_groups(request_timeout=self.request_timeout_s).result(
                timeout=self.request_timeout_s
            )
        except KafkaException as exc:
            raise KafkaOperationError(f"cannot list consumer groups: {exc}") from exc
        return sorted(g.group_id for g in (res.valid or []) if g.group_id.startswith(prefix))

    # -- records --------------------------------------------------------------------------------

    def _consumer(self) -> Any:
        if self._reader is None:
            from confluent_kafka import Consumer

            self._reader = Consumer(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    "group.id": "shoal-monitor-reader",  # assign() only, never commits
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "isolation.level": "read_committed",
                    "fetch.max.bytes": 8 * 1024 * 1024,
                    "fetch.wait.max.ms": 20,  # an end-of-partition answer must not wait for data
                    "max.partition.fetch.bytes": 1024 * 1024,
                    **self._extra,
                }
            )
        return self._reader

    def first_records(self, requests: Iterable[tuple[str, int, int]]) -> dict[tuple[str, int, int], RecordInfo | None]:
        """For each (topic, partition, offset): the first committed data record at or after ``offset``,
        or None when there is none before the end (only transaction markers, or nothing).
        Requests that time out are left out (unknown)."""
        todo = sorted(set(requests))
        out: dict[tuple[str, int, int], RecordInfo | None] = {}
        while todo:
            round_: dict[TP, int] = {}
            rest = []
            for t, p, o in todo:
                if (t, p) in round_:
                    rest.append((t, p, o))
                else:
                    round_[(t, p)] = o
            out.update(self._read_round(round_))
            todo = rest
        return out

    def _read_round(self, wanted: dict[TP, int]) -> dict[tuple[str, int, int], RecordInfo | None]:
        consumer = self._consumer()
        found: dict[tuple[str, int, int], RecordInfo | None] = {}
        try:
            consumer.assign([TopicPartition(t, p, o) for (t, p), o in wanted.items()])
            deadline = time.monotonic() + self.fetch_timeout_s
            while len(found) < len(wanted) and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                key = (msg.topic(), msg.partition())
                if key not in wanted:
                    continue
                req = (key[0], key[1], wanted[key])
                if req in found:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        found[req] = None
                        continue
                    if err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                        continue
                    raise KafkaOperationError(f"reading {key[0]}[{key[1]}] at {wanted[key]}: {err}")
                offset = int(msg.offset() or 0)
                if offset < wanted[key]:
                    continue
                _kind, ts = msg.timestamp()
                found[req] = RecordInfo(offset, int(ts), len(msg.value() or b"") + len(msg.key() or b""))
        except KafkaException as exc:
            raise KafkaOperationError(f"cannot read records of {sorted(wanted)}: {exc}") from exc
        finally:
            try:
                consumer.unassign()
            except KafkaException:
                log.debug("unassign failed", exc_info=True)
        return found

    # -- test and tool helpers ------------------------------------------------------------------

    def delete_records(self, topic: str, before_offset: int, partition: int = 0) -> int:
        """Delete the records of ``topic[partition]`` below ``before_offset``; return the new log start."""
        futures = self.admin.delete_records(
            [TopicPartition(topic, partition, before_offset)], request_timeout=self.request_timeout_s
        )
        try:
            (fut,) = futures.values()
            return int(fut.result(timeout=self.request_timeout_s).low_watermark)
        except KafkaException as exc:
            raise KafkaOperationError(
                f"cannot delete records of {topic}[{partition}] below {before_offset}: {exc}"
            ) from exc


def _code(exc: KafkaException) -> int | None:
    arg = exc.args[0] if exc.args else None
    return arg.code() if isinstance(arg, KafkaError) else None
