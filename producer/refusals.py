"""Which of this producer's messages a leader refused (DESIGN.md section 4.2): read from the deadletter topic.

A leader re-validates every ingest message and sends the ones it refuses to the deadletter topic,
in the same Kafka transaction that commits its ingest offset. The committed offset that ``sync()``
polls therefore moves past a refused message too: without this module, ``sync()`` would report a
refused message as accepted, and its rows would be lost with nothing said. The shoal producer
validates as the leaders do, so this happens only when they disagree: a node configured with a
smaller ``max_ingest_bytes`` than the producer's ``max_message_bytes``, or a table whose definition
changed under a producer.

Each message carries a :data:`~shoal.wire.ingest.PRODUCER_HEADER` (a random id per producer); a
leader copies it onto the deadletter record, and a split parent's forwarder keeps it on the pieces
it sends to the children, so a child's refusal is found too. :class:`DeadletterWatch` notes the
deadletter topic's end before the producer's first message, and each :meth:`DeadletterWatch.read`
reads on from there up to the end the topic has after the acceptance, with
``isolation.level=read_committed``. The offset commit and the deadletter record are in one
transaction, so a refused message seen as accepted has its record below that end. The end is the
high watermark (an admin ``ListOffsets`` read uncommitted): a read-committed consumer's own
watermark query answers the last stable offset, which stays below the record until the
transaction's marker reaches the deadletter partition, and Kafka writes that marker and the one
that makes the offset commit visible in no set order. The read-committed consumer then waits for
the marker before it returns the record.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import threading
import time
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from producer.errors import Refusal, RefusalsLostError
from shoal.errors import KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.admin import deletion_settings
from shoal.kafka.errors import classify
from shoal.kafka.indexes import IndexQuery, close_offset_readers, read_indexes
from shoal.kafka.readers import READ_CONFIG
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames
from shoal.wire.ingest import PRODUCER_HEADER, PRODUCER_ID_PATTERN

log = logging.getLogger(__name__)

_POLL_S = 0.2
_OFFSET = re.compile(r"[0-9]{1,19}")
"""A Kafka offset as a leader writes it (``int()`` alone takes other digits, and refuses more than 4300)."""


def new_producer_id() -> str:
    """A random id for one producer (32 hex digits), sent as :data:`PRODUCER_HEADER`."""
    return secrets.token_hex(16)


class RefusalReader(Protocol):
    """What :class:`~producer.Producer` needs: note the start once, then read what is new."""

    def start(self, timeout_s: float) -> None: ...

    def read(self, timeout_s: float, *, unchecked_since: float | None = 0.0) -> list[Refusal]: ...

    def close(self) -> None: ...


def refusal_of(
    headers: Sequence[tuple[str, str | bytes | None]] | None, producer_id: str | AbstractSet[str]
) -> Refusal | None:
    """The :class:`Refusal` a deadletter record's ``headers`` describe, if the refused message was
    ``producer_id``'s (one of them, given a set)."""
    fields: dict[str, str] = {}
    for name, value in headers or ():
        if value is None:
            continue
        fields[name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    ids = {producer_id} if isinstance(producer_id, str) else producer_id
    if fields.get(PRODUCER_HEADER) not in ids:
        return None
    offset = fields.get("shoal.source.offset", "")
    return Refusal(
        table=fields.get("shoal.table", ""),
        partition_id=fields.get("shoal.partition_id", ""),
        topic=fields.get("shoal.source.topic", ""),
        offset=int(offset) if _OFFSET.fullmatch(offset) else None,
        reason=fields.get("shoal.reason", ""),
        detail=fields.get("shoal.detail", ""),
    )


class DeadletterWatch:
    """Reads the deadletter topic (one partition, as the leaders create it) for the refusals of
    ``producer_id`` (or of each of a set of producers).

    Thread-safe: reads are serialized, and each refusal is returned by one :meth:`read` only.
    """

    def __init__(self, settings: KafkaSettings, topics: TopicNames, producer_id: str | AbstractSet[str]) -> None:
        ids = frozenset({producer_id} if isinstance(producer_id, str) else producer_id)
        for one in ids:
            if not isinstance(one, str) or not PRODUCER_ID_PATTERN.fullmatch(one):
                raise ValueError(f"not a producer id: {one!r:.60}")
        self.settings, self.producer_ids = settings, ids
        self.topic, self.group = topics.deadletter, topics.refusals_group
        self._lock = threading.Lock()
        self._consumer: Any = None
        self._admin: Any = None
        self._exists = False
        self._position: int | None = None

    def _client(self) -> Any:
        if self._consumer is None:
            self._consumer = clients.consumer(
                self.settings,
                group_id=self.group,  # a label: assign() only, never commits
                **READ_CONFIG,
            )
        return self._consumer

    def _end(self, timeout_s: float) -> tuple[int, int]:
        """(log start, high watermark) of the deadletter topic; (0, 0) while it does not exist (the
        leaders create it: no leader has refused anything yet)."""
        if self._admin is None:
            self._admin = clients.admin(self.settings)
        if not self._exists:
            try:  # all topics: a metadata request naming the topic could create it
                self._exists = self.topic in self._admin.list_topics(timeout=timeout_s).topics
            except KafkaException as exc:
                raise classify(exc, f"cannot list topics to find the deadletter topic {self.topic}") from exc
            if not self._exists:
                return 0, 0
        try:
            found = read_indexes(self._admin, [IndexQuery(self.topic)], timeout_s=timeout_s).get(self.topic)
        except KafkaOperationError:
            # The next call asks with a new client: one whose metadata stayed stuck on a killed broker
            # answered no offset (-1001) for minutes in a CI run of the broker-kill fault test.
            close_offset_readers(self._admin)
            self._admin = None
            raise
        return (0, 0) if found is None else (found.tail, found.append)

    def start(self, timeout_s: float, *, at: int | None = None) -> None:
        """Note where the deadletter topic ends now: call before this producer's first message.
        ``at``: read from that offset instead (where other producers' checks started, noted by
        their :attr:`position`)."""
        with self._lock:
            if self._position is None:
                if at is not None and (isinstance(at, bool) or not isinstance(at, int) or at < 0):
                    raise ValueError(f"not a deadletter offset: {at!r:.40}")
                self._position = self._end(timeout_s)[1] if at is None else at

    @property
    def position(self) -> int | None:
        """Where the next :meth:`read` starts (None before :meth:`start`)."""
        with self._lock:
            return self._position

    def read(self, timeout_s: float, *, unchecked_since: float | None = 0.0) -> list[Refusal]:
        """The refusals recorded since the previous read (or :meth:`start`), up to the topic's current end.

        ``unchecked_since``: the wall-clock time of the oldest message this read is to check (None:
        there is none, 0.0: unknown). KafkaOperationError if the end cannot be read or the read makes
        no progress for ``timeout_s``; RefusalsLostError if records it had not read yet were deleted
        (the topic's retention) and may have held a refusal of such a message: not when the topic
        deletes by time alone and keeps records longer than that message's age (the deleted records
        are older: other producers').
        """
        with self._lock:
            if self._position is None:
                return []
            low, high = self._end(timeout_s)
            if self._position >= high:
                return []
            if self._position < low:  # reported once: the next read goes on from the log start
                gone, self._position = self._position, low
                if unchecked_since is not None and not self._kept_since(unchecked_since, timeout_s):
                    raise RefusalsLostError(self.topic, gone, low - 1)
                log.info(
                    "deadletter topic %s: offsets %d..%d deleted by retention were read by no check of "
                    "these producers; they predate every message to check",
                    self.topic,
                    gone,
                    low - 1,
                )
            consumer = self._client()
            consumer.assign([TopicPartition(self.topic, 0, self._position)])
            found: list[Refusal] = []
            deadline = time.monotonic() + timeout_s
            position = self._position
            try:
                while position < high:
                    if time.monotonic() > deadline:
                        raise KafkaOperationError(
                            f"deadletter topic {self.topic}: no progress reading from offset {position} to {high} "
                            f"in {timeout_s}s (a transaction is open on it?)"
                        )
                    msg = consumer.poll(_POLL_S)
                    if msg is None:
                        continue
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            # the end a read-committed consumer may reach: past the last stable offset
                            position = max(position, int(msg.offset() or 0))
                            continue
                        raise KafkaOperationError(f"deadletter topic {self.topic}: {err}", err)
                    position = int(msg.offset() or 0) + 1
                    refusal = refusal_of(msg.headers(), self.producer_ids)
                    if refusal is not None:
                        found.append(refusal)
            finally:
                with contextlib.suppress(KafkaException, RuntimeError):
                    consumer.unassign()
            self._position = position
            return found

    def _kept_since(self, since: float, timeout_s: float) -> bool:
        """Whether every record the topic got since ``since`` (wall clock) is still there: it deletes
        by time alone (``retention.bytes=-1``), after more than that long (with a minute's margin
        for clocks). False when its settings cannot be read."""
        try:
            settings = deletion_settings(self._admin, self.topic, timeout_s=timeout_s)
        except KafkaOperationError as exc:
            log.warning("deadletter topic %s: cannot read its retention: %s", self.topic, exc)
            return False
        retention_ms, retention_bytes = settings.get("retention.ms", -1), settings.get("retention.bytes", -1)
        if retention_bytes != -1:
            return False
        return retention_ms < 0 or (time.time() - since + 60.0) * 1000.0 < retention_ms

    def close(self) -> None:
        with self._lock:
            if self._admin is not None:
                close_offset_readers(self._admin)
                self._admin = None
            if self._consumer is not None:
                with contextlib.suppress(KafkaException, RuntimeError):
                    self._consumer.close()
                self._consumer = None
