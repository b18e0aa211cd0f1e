"""Errors of the producer, all under :class:`shoal.errors.ShoalError`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from shoal.errors import KafkaOperationError, SchemaError, ShoalError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from confluent_kafka import KafkaError


@dataclass(frozen=True)
class Refusal:
    """One message of this producer that a leader refused, as its deadletter record names it."""

    table: str
    partition_id: str
    topic: str
    """The ingest topic the refusing leader read it from: a split parent's when its forwarder refused
    it, a child's when that child's leader refused a piece the forwarder routed to it."""
    offset: int | None
    reason: str
    """The leader's code: undecodable, schema_mismatch, oversized, wrong_table, key_out_of_range."""
    detail: str


class ProducerError(ShoalError):
    """Base of every error the producer raises on purpose."""


class RowValidationError(ProducerError, SchemaError):
    """Rows do not fit the table schema. Nothing of the call was sent.

    ``row`` is the 0-based index of the first bad row in the input (None when the problem is not
    about one row, e.g. an unknown column of a pyarrow table), ``column`` the column concerned.
    """

    def __init__(self, table: str, reason: str, *, row: int | None = None, column: str | None = None) -> None:
        self.table = table
        self.row = row
        self.column = column
        self.reason = reason
        where = []
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column!r}")
        super().__init__(f"table {table}: " + (", ".join(where) + ": " if where else "") + reason)


class RoutingError(ProducerError):
    """A row could not be routed to a partition (no usable partition map)."""


class DeliveryError(ProducerError, KafkaOperationError):
    """Kafka did not accept one or more batches (``reports`` lists the failed ones)."""

    def __init__(self, message: str, reports: list[object] | None = None) -> None:
        super().__init__(message)
        self.reports = list(reports or [])


class SendError(ProducerError, KafkaOperationError):
    """Kafka refused to take a message of a ``write``/``delete`` call (the producer's ``produce``
    raised, e.g. a fatal producer error); the call stopped there.

    The messages produced before it (``futures``, ``rows_sent`` rows) are on their way and may be
    delivered and accepted: ``sync()``/``flush()`` still wait for them. ``rows_unsent`` rows were
    not sent. ``kafka_error`` is librdkafka's error when there is one.
    """

    def __init__(
        self,
        message: str,
        *,
        table: str,
        futures: tuple[object, ...],
        rows_sent: int,
        rows_unsent: int,
        kafka_error: KafkaError | None = None,
    ) -> None:
        super().__init__(message, kafka_error)
        self.table = table
        self.futures = futures
        self.rows_sent = rows_sent
        self.rows_unsent = rows_unsent


class SyncTimeoutError(ProducerError, TimeoutError):
    """``sync()`` ran out of time before the leaders accepted everything written.

    ``lagging`` maps each ingest topic still behind to (committed offset or None, last produced offset).
    """

    def __init__(self, message: str, lagging: dict[str, tuple[int | None, int]]) -> None:
        super().__init__(message)
        self.lagging = dict(lagging)


class MessagesRefusedError(ProducerError):
    """``sync()`` found messages of this producer that a leader refused to the deadletter topic.

    Their rows are not stored. ``refusals`` lists them (:class:`producer.refusals.Refusal`: table,
    partition, ingest topic and offset, the leader's reason and detail). Everything else written
    before the ``sync()`` call was accepted. Each refusal is reported by one ``sync()`` only.
    """

    def __init__(self, refusals: Sequence[Refusal]) -> None:
        self.refusals = list(refusals)
        first = self.refusals[0]
        where = f"{first.topic}@{first.offset}" if first.offset is not None else first.topic
        super().__init__(
            f"{len(self.refusals)} message(s) refused by their partition leader, rows not stored; "
            f"first: table {first.table}, {where}: {first.reason}: {first.detail[:300]}"
        )


class RefusalsLostError(ProducerError):
    """``sync()`` cannot tell whether messages of this producer were refused: the deadletter
    topic's records ``first_offset``..``last_offset`` were deleted (its ``retention.ms``) before
    this producer read them. Messages written before the ``sync()`` call may have been refused
    (their rows not stored); scan for them, or write them again. The next ``sync()`` reads on
    from the topic's log start."""

    def __init__(self, topic: str, first_offset: int, last_offset: int) -> None:
        self.topic, self.first_offset, self.last_offset = topic, first_offset, last_offset
        super().__init__(
            f"deadletter topic {topic}: offsets {first_offset}..{last_offset} were deleted (retention) before "
            "this producer read them; refusals recorded there cannot be reported, so messages written before "
            "this sync() may have been refused"
        )


class ProducerClosedError(ProducerError):
    """The producer was used after ``close()``."""
