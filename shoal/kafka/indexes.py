"""The four LinDB indexes of a channel, read from Kafka (DESIGN.md section 3).

- **Append index**: the channel's log end offset (the next record's offset).
- **Tail index**: the channel's log start offset (moves with ``delete_records``).
- **Consume index** of a follower group: its consumer group's committed position on the channel.
- **Ack index** of a follower group: its replica group's committed offset on the channel.

Invariant (checked by :meth:`ChannelIndexes.check`): Tail <= Ack <= Append.

Both the storage node (one channel at a time, :func:`channel_indexes`) and the monitor (every
channel of the cluster per poll, :func:`read_indexes`) read them here: log bounds with batched admin
``list_offsets`` requests (earliest/latest), committed offsets through a consumer of each group
(:func:`committed_offsets` says why not the admin request), as KMinion and ``kafka-consumer-groups``
read them.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from shoal.errors import KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.errors import classify, error_code
from shoal.kafka.settings import KafkaSettings
from shoal.worker import Backoff, Deadline

TP = tuple[str, int]
"""(topic, partition)."""

_GONE = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_ID)
_LEADER_MOVED = (
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.OFFSET_NOT_AVAILABLE,
)


@dataclass(frozen=True)
class ChannelIndexes:
    """Tail and Append of one channel, and the Ack / Consume index of each follower group asked for."""

    topic: str
    tail: int
    append: int
    acks: tuple[tuple[str, int | None], ...] = ()
    """(group id, committed offset or None) per Ack group asked for, in the order asked."""
    consumes: tuple[tuple[str, int | None], ...] = ()
    """(group id, committed offset or None) per Consume group asked for, in the order asked."""

    def ack(self, group: str) -> int | None:
        return dict(self.acks).get(group)

    def consume(self, group: str) -> int | None:
        return dict(self.consumes).get(group)

    def check(self) -> list[str]:
        """Violations of Tail <= Ack <= Append (an empty list if none)."""
        problems = []
        for group, ack in self.acks:
            if ack is not None and not self.tail <= ack <= self.append:
                problems.append(f"{group}: ack {ack} outside [{self.tail}, {self.append}]")
        return problems


@dataclass(frozen=True)
class IndexQuery:
    """Which indexes of one channel to read: the groups whose Ack and Consume index are wanted."""

    topic: str
    ack_groups: tuple[str, ...] = ()
    consume_groups: tuple[str, ...] = ()


def channel_indexes(
    settings: KafkaSettings,
    topic: str,
    groups: Sequence[str] = (),
    *,
    timeout_s: float = 10.0,
    admin: AdminClient | None = None,
) -> ChannelIndexes:
    """Tail and Append of ``topic`` and the Ack index of each group in ``groups``.

    KafkaOperationError when the topic does not exist or Kafka does not answer.
    """
    client = admin if admin is not None else clients.admin(settings)
    try:
        found = read_indexes(client, [IndexQuery(topic, tuple(groups))], timeout_s=timeout_s)
    finally:
        if admin is None:  # its consumers are closed here, not by a garbage collection in some other thread
            close_offset_readers(client)
    if topic not in found:
        raise KafkaOperationError(f"cannot read offsets of {topic}: the topic does not exist")
    return found[topic]


def read_indexes(
    admin: AdminClient, queries: Iterable[IndexQuery], *, timeout_s: float = 10.0, stable: bool = True
) -> dict[str, ChannelIndexes]:
    """{topic: ChannelIndexes} of every queried channel (partition 0) in batched requests; a topic
    that does not exist is left out. ``stable`` as in :func:`committed_offsets`.

    Read in the order that keeps ``tail <= ack <= append`` true of a live channel: the log starts
    first (a Tail only moves up, so the one read is at or below the Tail when the acks are read),
    then the committed offsets, then the log ends (an Append only moves up, so it is at or above
    every ack read before it). Read the other way round, a follower that acks between the two
    reads looks like an Ack past the Append."""
    queries = list(queries)
    keys = sorted({(q.topic, 0) for q in queries})
    starts = _list_offsets(admin, keys, OffsetSpec.earliest(), timeout_s) if keys else {}
    requests: dict[str, set[TP]] = {}
    for q in queries:
        if (q.topic, 0) in starts:
            for group in q.ack_groups + q.consume_groups:
                requests.setdefault(group, set()).add((q.topic, 0))
    committed = committed_offsets(admin, requests, timeout_s=timeout_s, stable=stable)
    present = [k for k in keys if k in starts]
    ends = _list_offsets(admin, present, OffsetSpec.latest(), timeout_s) if present else {}
    out: dict[str, ChannelIndexes] = {}
    for q in queries:
        if (q.topic, 0) not in starts or (q.topic, 0) not in ends:
            continue
        tail, append = starts[(q.topic, 0)], ends[(q.topic, 0)]

        def of(group: str, topic: str = q.topic) -> tuple[str, int | None]:
            return group, committed.get(group, {}).get((topic, 0))

        out[q.topic] = ChannelIndexes(
            q.topic, tail, append, tuple(of(g) for g in q.ack_groups), tuple(of(g) for g in q.consume_groups)
        )
    return out


def log_bounds(admin: AdminClient, tps: Iterable[TP], *, timeout_s: float = 10.0) -> dict[TP, tuple[int, int]]:
    """{(topic, partition): (log start, log end)}; partitions that do not exist are left out."""
    keys = sorted(set(tps))
    if not keys:
        return {}
    starts = _list_offsets(admin, keys, OffsetSpec.earliest(), timeout_s)
    ends = _list_offsets(admin, keys, OffsetSpec.latest(), timeout_s)
    return {k: (starts[k], ends[k]) for k in keys if k in starts and k in ends}


def high_watermarks(admin: AdminClient, tps: Iterable[TP], *, timeout_s: float = 10.0) -> dict[TP, int]:
    """{(topic, partition): high watermark}: the log end every acknowledged write is below (records of
    open transactions included). A topic that does not exist is a KafkaOperationError, as in
    :func:`stable_ends`."""
    keys = sorted(set(tps))
    if not keys:
        return {}
    return _list_offsets(admin, keys, OffsetSpec.latest(), timeout_s, IsolationLevel.READ_UNCOMMITTED)


def stable_ends(admin: AdminClient, tps: Iterable[TP], *, timeout_s: float = 10.0) -> dict[TP, int]:
    """{(topic, partition): last stable offset}: the end a ``read_committed`` consumer reads up to,
    below the log end while a transaction is open on the partition (the first offset of the oldest
    open transaction). A topic that does not exist is a KafkaOperationError ("no leaders found"),
    like a partition without a leader."""
    keys = sorted(set(tps))
    if not keys:
        return {}
    return _list_offsets(admin, keys, OffsetSpec.latest(), timeout_s, IsolationLevel.READ_COMMITTED)


def _list_offsets(
    admin: AdminClient, keys: Sequence[TP], spec: Any, timeout_s: float, isolation: IsolationLevel | None = None
) -> dict[TP, int]:
    """{(topic, partition): offset} by ``spec``; a partition that does not exist is left out.

    A partition whose leader moved is asked again, after a metadata refresh, until ``timeout_s``
    has passed. librdkafka's admin ``ListOffsets`` sends the leader epoch of the client's metadata
    cache and does not refresh it on FENCED_LEADER_EPOCH: an admin client that lives across a
    leader change (a broker restarted, then a preferred-leader election) got that error on every
    call, forever, until its cache was refreshed by a metadata request (``list_topics``). While
    a leader moves, an answer may also come without an error and without an offset (-1001): that is
    no answer either, never an index of -1001. A new leader answers OFFSET_NOT_AVAILABLE until its
    high watermark has caught up (KIP-207): asked again too. Tested in
    ``tests/faults/test_broker_faults.py::test_kill_one_of_three_brokers_under_writes_loses_nothing``."""
    deadline = Deadline(timeout_s)
    backoff = Backoff(initial_s=0.2, maximum_s=2.0)
    out: dict[TP, int] = {}
    pending = list(keys)
    while True:
        moved: list[TP] = []
        why = ""
        futures = admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in pending},
            request_timeout=max(1.0, deadline.remaining()),
            **({} if isolation is None else {"isolation_level": isolation}),
        )
        for tp, fut in futures.items():
            key = (tp.topic, tp.partition)
            try:
                offset = int(fut.result(timeout=max(1.0, deadline.remaining())).offset)
            except concurrent.futures.TimeoutError as exc:
                raise KafkaOperationError(
                    f"listing offsets of {tp.topic}[{tp.partition}] timed out after {timeout_s:.0f}s"
                ) from exc
            except KafkaException as exc:
                code = error_code(exc)
                if code in _GONE:
                    continue
                if code not in _LEADER_MOVED or deadline.expired():
                    raise classify(exc, f"cannot list offsets of {tp.topic}[{tp.partition}]") from exc
                moved.append(key)
                why = str(exc)
                continue
            if offset < 0:
                moved.append(key)
                why = f"no offset in the answer ({offset})"
            else:
                out[key] = offset
        if not moved:
            return out
        if deadline.expired():
            t, p = moved[0]
            raise KafkaOperationError(f"cannot list offsets of {t}[{p}] in {timeout_s:.0f}s: {why}")
        _refresh_metadata(admin, {t for t, _ in moved}, deadline)
        deadline.sleep(backoff.next_delay())
        pending = moved


def _refresh_metadata(admin: AdminClient, topics: set[str], deadline: Deadline) -> None:
    """Refresh the client's metadata cache of ``topics`` (their partitions' leaders and leader epochs)."""
    try:
        if len(topics) == 1:
            admin.list_topics(next(iter(topics)), timeout=max(1.0, deadline.remaining()))
        else:
            admin.list_topics(timeout=max(1.0, deadline.remaining()))
    except KafkaException:
        pass  # the next ListOffsets answers (or times out) for itself


MAX_OFFSET_READERS = 128
"""Consumers kept per admin client for :func:`committed_offsets` (the least recently used one not
in use is closed). A table of 8 partitions at RF 3 has 104 groups to read (a leader group and, on
each of its 3 WAL and 3 segments channels, 2 follower groups); with fewer kept, every poll of every
channel made consumers again."""

MAX_CONCURRENT_READS = 16
"""Groups whose committed offsets :func:`committed_offsets` asks for at the same time."""


def committed_offsets(
    admin: AdminClient, requests: Mapping[str, Iterable[TP]], *, timeout_s: float = 10.0, stable: bool = True
) -> dict[str, dict[TP, int | None]]:
    """{group: {(topic, partition): committed offset or None}}.

    Read with ``Consumer.committed`` through one consumer of each group (kept on the admin client),
    not with the AdminClient's ``list_consumer_group_offsets``: librdkafka 2.16 crashes the process
    (SIGSEGV in ``rd_kafka_cgrp_op``, confluentinc/librdkafka#5040) when that request meets an error
    that asks for a new coordinator (NOT_COORDINATOR, a broker gone), which every broker loss can
    cause. A consumer's own fetch looks the coordinator up again and retries.

    ``stable=False`` reads through ``read_uncommitted`` consumers, whose fetch does not set
    KIP-447's ``require_stable``: the answer is the last committed offset even while a transaction
    holds newer pending offsets (never a pending one), instead of UNSTABLE_OFFSET_COMMIT retried
    with backoff. For waiting on a group that commits in transactions all the time, and for
    observers (the monitor, ``shoal offsets``), whose every poll otherwise waits for the leaders'
    open transactions.

    The groups are asked concurrently (up to :data:`MAX_CONCURRENT_READS`; each consumer's
    ``committed`` is a round trip to its group's coordinator): one after the other, a poll of the
    104 groups of an 8-partition table took seconds under load."""
    parts = {group: [TopicPartition(t, p) for t, p in sorted(set(tps))] for group, tps in requests.items() if set(tps)}
    settings = getattr(admin, "shoal_settings", None)
    if not isinstance(settings, KafkaSettings):
        raise TypeError("committed offsets are read through an admin client made by shoal.kafka.clients.admin")
    return _consumer_offsets(admin, settings, parts, timeout_s, stable)


_READERS_LOCK = threading.Lock()


@contextlib.contextmanager
def _borrowed_reader(admin: AdminClient, settings: KafkaSettings, group: str, stable: bool) -> Iterator[Any]:
    """The consumer of ``group`` kept on ``admin``, held in use while the block runs (threads may
    share an admin client; a reader in use is never the one closed to make room)."""
    key = (group, stable)
    with _READERS_LOCK:
        readers: dict[tuple[str, bool], Any] | None = getattr(admin, "shoal_offset_readers", None)
        if readers is None:
            readers = {}
            setattr(admin, "shoal_offset_readers", readers)  # noqa: B010
        in_use: collections.Counter[tuple[str, bool]] | None = getattr(admin, "shoal_offset_readers_in_use", None)
        if in_use is None:
            in_use = collections.Counter()
            setattr(admin, "shoal_offset_readers_in_use", in_use)  # noqa: B010
        reader = readers.pop(key, None)
        if reader is None:
            reader = clients.consumer(settings, group_id=group, read_committed=stable)
            idle = [k for k in readers if not in_use[k]]  # oldest first
            while len(readers) >= MAX_OFFSET_READERS and idle:
                readers.pop(idle.pop(0)).close()
        readers[key] = reader  # most recently used last
        in_use[key] += 1
    try:
        yield reader
    finally:
        with _READERS_LOCK:
            in_use[key] -= 1
            if in_use[key] <= 0:
                del in_use[key]


def close_offset_readers(admin: AdminClient) -> None:
    """Close the consumers :func:`committed_offsets` kept on ``admin``. An admin client made for one
    call must end with this: a consumer left to the garbage collector is destroyed (and may block in
    ``rd_kafka_destroy``) on whichever thread drops the last reference."""
    with _READERS_LOCK:
        readers: dict[tuple[str, bool], Any] = getattr(admin, "shoal_offset_readers", None) or {}
        closing = list(readers.values())
        readers.clear()
    for reader in closing:
        reader.close()


def _consumer_offsets(
    admin: AdminClient,
    settings: KafkaSettings,
    parts: Mapping[str, list[TopicPartition]],
    timeout_s: float,
    stable: bool = True,
) -> dict[str, dict[TP, int | None]]:
    """Each group's committed offsets through its consumer, groups asked concurrently; a retriable
    error is asked again with backoff until ``timeout_s`` has passed."""
    deadline = Deadline(timeout_s)

    def one(group: str, tps: list[TopicPartition]) -> dict[TP, int | None]:
        backoff = Backoff(initial_s=0.2, maximum_s=2.0)
        while True:
            try:
                with _borrowed_reader(admin, settings, group, stable) as reader:
                    answer = reader.committed(tps, timeout=max(1.0, deadline.remaining()))
            except KafkaException as exc:
                error = classify(exc, f"cannot read the committed offsets of group {group}")
                if not error.retriable or deadline.expired():
                    raise error from exc
                deadline.sleep(backoff.next_delay())
                continue
            got: dict[TP, int | None] = {}
            for tp in answer:
                if tp.error is not None and tp.error.code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART,):
                    raise classify(KafkaException(tp.error), f"group {group} on {tp.topic}[{tp.partition}]")
                got[(tp.topic, tp.partition)] = int(tp.offset) if tp.offset >= 0 else None
            return got

    if len(parts) <= 1:
        return {group: one(group, tps) for group, tps in parts.items()}
    workers = min(MAX_CONCURRENT_READS, len(parts))
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="shoal-committed") as pool:
        futures = {group: pool.submit(one, group, tps) for group, tps in parts.items()}
        return {group: fut.result() for group, fut in futures.items()}
