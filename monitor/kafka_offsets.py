"""What the monitor asks Kafka, one batched request per question (KMinion / kafka-consumer-groups style).

- the indexes of every channel (:mod:`shoal.kafka.indexes`: log start and end by
  ``list_offsets``, committed offsets of the follower groups through consumers' ``committed``;
  the partitions of groups found by prefix, Spark queries' and compaction intakes', found by asking
  for the group's offset on every partition once per ``group_topics_refresh_s``; never an
  AdminClient request routed to a group coordinator, which librdkafka 2.16 can abort on):
  Tail, Append, Ack, Consume and accepted-by-leader; and whether each group has live members
  (its state in ``list_consumer_groups``);
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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

from shoal.errors import KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.errors import classify, error_code
from shoal.kafka.indexes import (
    TP,
    ChannelIndexes,
    IndexQuery,
    committed_offsets,
    log_bounds,
    read_indexes,
    stable_ends,
)
from shoal.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordInfo:
    """The first data record at or after an offset."""

    offset: int
    timestamp_ms: int
    size_bytes: int


_LIVE = frozenset(
    {ConsumerGroupState.STABLE, ConsumerGroupState.PREPARING_REBALANCING, ConsumerGroupState.COMPLETING_REBALANCING}
)
"""Group states with live members."""


class KafkaOffsets:
    """Lazy admin client + one reader consumer; ``close()`` releases them.

    The channel indexes (Tail, Append, Ack, Consume) come from :mod:`shoal.kafka.indexes`, the one
    reader the storage node uses too.
    """

    def __init__(
        self,
        kafka: KafkaSettings | str,
        *,
        request_timeout_s: float = 10.0,
        fetch_timeout_s: float = 3.0,
        group_topics_refresh_s: float = 120.0,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.kafka = KafkaSettings(kafka) if isinstance(kafka, str) else kafka
        self.request_timeout_s = request_timeout_s
        self.fetch_timeout_s = fetch_timeout_s
        self._extra = dict(extra or {})
        self.group_topics_refresh_s = group_topics_refresh_s
        self._admin: AdminClient | None = None
        self._reader: Any = None
        self._group_tps: dict[str, tuple[float, frozenset[TP]]] = {}
        self._listing: tuple[float, dict[str, ConsumerGroupState]] | None = None
        """{group: (when its partitions were listed, its partitions)} for :meth:`all_committed`."""

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka.bootstrap_servers

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = clients.admin(self.kafka, **self._extra)
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
        self.admin.poll(0)  # once per monitor poll: emit librdkafka's log lines
        try:
            md = self.admin.list_topics(timeout=self.request_timeout_s)
        except KafkaException as exc:
            raise classify(exc, f"cannot list the topics of {self.bootstrap_servers}") from exc
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
                if error_code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                raise classify(exc, f"cannot describe topic {name}") from exc
            except TimeoutError as exc:
                raise KafkaOperationError(f"cannot describe topic {name}: no answer in time") from exc
        return out

    # -- indexes --------------------------------------------------------------------------------

    def channel_indexes(self, queries: Iterable[IndexQuery]) -> dict[str, ChannelIndexes]:
        """{topic: ChannelIndexes} of every queried channel that exists (batched requests).

        The committed offsets are read without KIP-447's ``require_stable``: each group's last
        committed offset, never one a transaction still holds pending. An observer does not wait
        for the leaders' open transactions (under steady writes a leader group almost always has
        one, and each poll waited seconds for them)."""
        return read_indexes(self.admin, queries, timeout_s=self.request_timeout_s, stable=False)

    def log_bounds(self, tps: Iterable[TP]) -> dict[TP, tuple[int, int]]:
        """{(topic, partition): (log start, log end)}; partitions that vanished meanwhile are left out."""
        return log_bounds(self.admin, tps, timeout_s=self.request_timeout_s)

    def stable_ends(self, tps: Iterable[TP]) -> dict[TP, int]:
        """{(topic, partition): last stable offset} (below the log end while a transaction is open)."""
        return stable_ends(self.admin, tps, timeout_s=self.request_timeout_s)

    # -- groups ---------------------------------------------------------------------------------

    def committed(self, requests: Mapping[str, Iterable[TP]]) -> dict[str, dict[TP, int | None]]:
        """{group: {(topic, partition): committed offset or None}} (one request per group, all in flight)."""
        return committed_offsets(self.admin, requests, timeout_s=self.request_timeout_s)

    def all_committed(self, groups: Iterable[str], topics: Mapping[str, int]) -> dict[str, dict[TP, int | None]]:
        """Every committed offset of each group on ``topics`` ({topic: partition count}, the cluster's
        topics; Kafka's internal ``__`` topics are left out), for groups whose topics are not known in
        advance.

        Once per ``group_topics_refresh_s`` (and at every poll while a group has none yet) a group's
        committed offset is asked on every partition of ``topics``, keeping those it has; in between
        only those. All through consumers' ``committed`` (:func:`committed_offsets`), never an
        AdminClient request routed to a group coordinator (``list_consumer_group_offsets``,
        ``describe_consumer_groups``): librdkafka 2.16 aborts the process when such a request meets a
        coordinator change (``rd_kafka_admin_coord_request``'s ``eonce->refcnt > 0`` assertion,
        confluentinc/librdkafka#4605) or crashes in it (confluentinc/librdkafka#5040), and the
        monitor met that abort after broker kills. A consumer's fetch looks its coordinator up again
        and retries."""
        names = sorted(set(groups))
        if not names:
            return {}
        now, refresh, cached = time.monotonic(), self.group_topics_refresh_s, self._group_tps
        for g in [g for g, (at, _) in cached.items() if now - at > 10 * refresh]:
            del cached[g]  # a group no longer asked about (its partition or query is gone)
        # listed again: never listed, listed long ago, or no offsets yet
        stale = [g for g in names if g not in cached or not cached[g][1] or now - cached[g][0] >= refresh]
        out: dict[str, dict[TP, int | None]] = {}
        candidates = (
            frozenset((t, p) for t, n in topics.items() if not t.startswith("__") for p in range(n)) if stale else ()
        )
        if candidates:
            found = committed_offsets(
                self.admin, {g: candidates for g in stale}, timeout_s=self.request_timeout_s, stable=False
            )
            for g in stale:
                held: dict[TP, int | None] = {tp: off for tp, off in found.get(g, {}).items() if off is not None}
                cached[g] = (now, frozenset(held))
                out[g] = held
        known = {g: cached[g][1] for g in names if g not in out and g in cached and cached[g][1]}
        if known:
            out.update(committed_offsets(self.admin, known, timeout_s=self.request_timeout_s, stable=False))
        return {g: out.get(g, {}) for g in names}

    def members(self, groups: Iterable[str]) -> dict[str, int]:
        """{group: 1 if it has live members, else 0} (an empty, dead or unknown group: 0).

        From the groups' states in ListGroups (a group that is STABLE or rebalancing has members),
        not DescribeGroups: that request goes to the group's coordinator, and librdkafka 2.16 aborts
        the process on coordinator requests that meet a broker loss (``eonce->refcnt`` assertion,
        confluentinc/librdkafka#4605; fix proposed in #5397), which killed the monitor after broker
        kills. The exact member count is not needed: it only tells STALL from STOP."""
        names = sorted(set(groups))
        if not names:
            return {}
        try:
            states = self._group_states()
        except KafkaOperationError as exc:
            log.debug("list groups: %s", exc)
            states = {}
        return {name: int(states.get(name) in _LIVE) for name in names}

    def groups_with_prefix(self, prefix: str) -> list[str]:
        return sorted(g for g in self._group_states() if g.startswith(prefix))

    def _group_states(self) -> dict[str, ConsumerGroupState]:
        """{group: state} of every consumer group, listed at most once a second (one poll asks often)."""
        now = time.monotonic()
        if self._listing is not None and now - self._listing[0] < 1.0:
            return self._listing[1]
        try:
            res = self.admin.list_consumer_groups(request_timeout=self.request_timeout_s).result(
                timeout=self.request_timeout_s
            )
        except (KafkaException, TimeoutError) as exc:
            raise KafkaOperationError(f"cannot list consumer groups: {exc or 'no answer in time'}") from exc
        states = {g.group_id: g.state for g in (res.valid or [])}
        self._listing = (now, states)
        return states

    # -- records --------------------------------------------------------------------------------

    def _consumer(self) -> Any:
        if self._reader is None:
            reading: dict[str, Any] = {
                "enable.partition.eof": True,
                "fetch.max.bytes": 8 * 1024 * 1024,
                "fetch.wait.max.ms": 20,  # an end-of-partition answer must not wait for data
                "max.partition.fetch.bytes": 1024 * 1024,
                **self._extra,
            }
            # assign() only, never commits
            self._reader = clients.consumer(self.kafka, group_id="shoal-monitor-reader", **reading)
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
                    raise KafkaOperationError(f"reading {key[0]}[{key[1]}] at {wanted[key]}: {err}", err)
                offset = int(msg.offset() or 0)
                if offset < wanted[key]:
                    continue
                _kind, ts = msg.timestamp()
                found[req] = RecordInfo(offset, int(ts), len(msg.value() or b"") + len(msg.key() or b""))
        except KafkaException as exc:
            raise classify(exc, f"cannot read records of {sorted(wanted)}") from exc
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
            raise classify(exc, f"cannot delete records of {topic}[{partition}] below {before_offset}") from exc
        except TimeoutError as exc:
            raise KafkaOperationError(f"cannot delete records of {topic}[{partition}]: no answer in time") from exc
