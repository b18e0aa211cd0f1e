"""Kafka errors, classified with librdkafka's own ``KafkaError`` (fencing: DESIGN.md sections 3, 7).

:func:`classify` turns a ``KafkaException`` into a :class:`KafkaOperationError` that carries the
``KafkaError`` (``.fatal``, ``.retriable``, ``.txn_requires_abort``, ``.code``), or into
:class:`ProducerFencedError` when a newer producer with the same ``transactional.id`` took over.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from shoal.errors import KafkaOperationError

__all__ = [
    "FENCED_CODES",
    "KafkaOperationError",
    "ProducerFencedError",
    "WedgedCallError",
    "classify",
    "error_code",
]


class ProducerFencedError(KafkaOperationError):
    """A newer incarnation of this transactional id fenced the producer: it commits nothing more."""


class WedgedCallError(KafkaOperationError):
    """A call did not return within its bound; its client is abandoned.

    librdkafka's ``send_offsets_to_transaction`` can ignore its own timeout after a broker restart
    (confluentinc/librdkafka#5456, #5511) and block forever. The owner re-opens: the new producer's
    ``init_transactions`` fences the stuck one.
    """


FENCED_CODES: frozenset[int] = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)
"""Codes that mean "another producer owns this transactional id now" (or we may not use it)."""


def error_code(exc: BaseException) -> int | None:
    """The librdkafka error code of a ``KafkaException`` (None for anything else)."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return int(err.code()) if isinstance(err, KafkaError) else None


def classify(exc: KafkaException, what: str) -> KafkaOperationError:
    """``exc`` as a KafkaOperationError saying ``what`` failed; ProducerFencedError when fenced."""
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    cls = ProducerFencedError if err is not None and err.code() in FENCED_CODES else KafkaOperationError
    error = cls(f"{what}: {err if err is not None else exc}", err)
    error.__cause__ = exc
    return error
