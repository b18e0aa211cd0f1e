"""Errors of the producer, all under :class:`shoal.errors.ShoalError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shoal.errors import KafkaOperationError, SchemaError, ShoalError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from confluent_kafka import KafkaError

    from producer.refusals import Refusal


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


class ProducerClosedError(ProducerError):
    """The producer was used after ``close()``."""
