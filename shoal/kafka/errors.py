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
    "TRANSIENT_CODES",
    "ChannelTruncatedError",
    "KafkaOperationError",
    "ProducerFencedError",
    "WedgedCallError",
    "classify",
    "ends_producer",
    "error_code",
]


class ProducerFencedError(KafkaOperationError):
    """A newer incarnation of this transactional id fenced the producer: it commits nothing more."""


class ChannelTruncatedError(KafkaOperationError):
    """A read of channel ``topic`` found its position below the log start (the Tail moved under it)
    at ``offset``: what it read is a prefix of the channel, not the channel. Readers never jump to
    the end instead (``auto.offset.reset=error``); the caller reads again from the new Tail."""

    def __init__(self, what: str, topic: str, offset: int, kafka_error: KafkaError | None = None) -> None:
        super().__init__(f"{what} {topic}: the Tail moved past offset {offset} while it was read", kafka_error)
        self.topic = topic
        self.offset = offset


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


TRANSIENT_CODES: frozenset[int] = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._WAIT_COORD,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)
"""Codes that Kafka's protocol calls retriable (metadata not yet propagated, leader moving, coordinator
loading, broker unreachable) but that librdkafka's plain (non-``rd_kafka_error_t``) APIs such as
``get_watermark_offsets`` report without the ``retriable`` flag: :func:`classify` sets it."""


def kafka_error_of(exc: BaseException) -> KafkaError | None:
    """The ``KafkaError`` a ``KafkaException`` carries (None for anything else)."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return err if isinstance(err, KafkaError) else None


def error_code(exc: BaseException) -> int | None:
    """The librdkafka error code of a ``KafkaException`` (None for anything else)."""
    err = kafka_error_of(exc)
    return int(err.code()) if err is not None else None


def classify(exc: KafkaException, what: str) -> KafkaOperationError:
    """``exc`` as a KafkaOperationError saying ``what`` failed; ProducerFencedError when fenced."""
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if err is not None and not err.retriable() and not err.fatal() and err.code() in TRANSIENT_CODES:
        err = KafkaError(err.code(), err.str(), retriable=True, txn_requires_abort=err.txn_requires_abort())
    cls = ProducerFencedError if err is not None and err.code() in FENCED_CODES else KafkaOperationError
    error = cls(f"{what}: {err if err is not None else exc}", err)
    error.__cause__ = exc
    return error


def ends_producer(error: KafkaOperationError) -> bool:
    """Whether a classified error means the transactional producer commits nothing more: fenced (a
    code in :data:`FENCED_CODES`, i.e. :class:`ProducerFencedError`) or fatal. Every owner of a
    transactional channel (the leader's WAL, the publisher's segments channel) decides with this."""
    return isinstance(error, ProducerFencedError) or error.fatal
