"""The leader's transactional producer on its WAL channel (DESIGN.md section 4).

``transactional.id`` is the channel topic, so ``init_transactions`` by a new incarnation fences an
old one and aborts whatever it left open. A fenced producer is unusable: :func:`raise_if_fenced`
turns Kafka's fence codes (or any fatal error) into :class:`~storage_node.errors.FencedError`.
``send_offsets_to_transaction``, ``commit_transaction`` and ``abort_transaction`` run bounded
(:func:`run_bounded`): librdkafka can fail to honour its own timeout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from shoal.errors import KafkaOperationError
from storage_node.config import LeaderConfig
from storage_node.errors import FencedError, WedgedProducerError

FENCED_CODES = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


def claim_channel(config: LeaderConfig, wal_topic: str) -> Producer:
    """A transactional producer for ``wal_topic`` that fenced every older incarnation."""
    producer = Producer(
        {
            "bootstrap.servers": config.bootstrap_servers,
            **dict(config.kafka_config),
            "transactional.id": wal_topic,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.max.bytes": config.wal_max_message_bytes,
            "transaction.timeout.ms": config.transaction_timeout_ms,
        }
    )
    try:
        producer.init_transactions(30)  # fences any older incarnation, aborts its open transaction
    except KafkaException as exc:
        raise KafkaOperationError(f"cannot claim WAL channel {wal_topic}: {exc}") from exc
    return producer


def fenced(exc: KafkaException, channel: str) -> FencedError | None:
    """The FencedError ``exc`` means on ``channel`` (a fence code or a fatal error), else None."""
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError) and (err.code() in FENCED_CODES or err.fatal()):
        return FencedError(channel, str(err))
    return None


def run_bounded(call: Callable[[], object], what: str, timeout_s: float) -> None:
    """Run ``call`` on a daemon thread; re-raise its exception; WedgedProducerError if it is still
    running after ``timeout_s`` (the thread is left behind: it holds only the abandoned producer)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True, name=f"txn-{what}")
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        raise WedgedProducerError(what, timeout_s)
    if outcome[0] is not None:
        raise outcome[0]


def message_offset(msg: Message) -> int:
    offset = msg.offset()
    return -1 if offset is None else int(offset)


def delivery_recorder(offsets: dict[int, int], index: int) -> Callable[[KafkaError | None, Message], None]:
    """A delivery callback storing the offset of message ``index`` in ``offsets`` (-1 if it failed)."""

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        offsets[index] = -1 if err is not None else message_offset(msg)

    return on_delivery
