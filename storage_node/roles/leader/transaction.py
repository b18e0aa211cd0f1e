"""The leader's WAL channel as a :class:`~shoal.kafka.transaction.TransactionalChannel` (DESIGN.md section 4).

``transactional.id`` is the channel topic, so ``open()`` by a new incarnation fences an old one and
aborts whatever it left open. The channel classifies every Kafka error once
(:func:`shoal.kafka.errors.classify`: fenced, fatal, retriable) and bounds every blocking call on
its one helper thread, so a call librdkafka never returns from (``send_offsets_to_transaction``
after a broker restart) raises instead of wedging the leader. :func:`leader_error` says what such
an error means for the role.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaError, Message

from shoal.errors import KafkaOperationError
from shoal.kafka.errors import WedgedCallError, ends_producer
from shoal.kafka.transaction import TransactionalChannel
from storage_node.config import LeaderConfig
from storage_node.errors import FencedError, WedgedProducerError


def wal_channel(config: LeaderConfig, wal_topic: str) -> TransactionalChannel:
    """The (not yet opened) transactional channel of a leader's WAL topic."""
    return TransactionalChannel(
        config.kafka,
        wal_topic,
        call_timeout_s=config.transaction_call_timeout_s,
        **{
            "linger.ms": 5,
            "message.max.bytes": config.wal_max_message_bytes,
            "transaction.timeout.ms": config.transaction_timeout_ms,
        },
    )


def leader_error(error: KafkaOperationError, channel: str) -> FencedError | WedgedProducerError | None:
    """What a classified channel error ends the role with: FencedError when a newer incarnation took
    the channel (or librdkafka says the producer is fatally broken), WedgedProducerError when a call
    did not return within its bound; None when the transaction can be retried."""
    if isinstance(error, WedgedCallError):
        return WedgedProducerError(channel, str(error))
    if ends_producer(error):
        return FencedError(channel, str(error))
    return None


def message_offset(msg: Message) -> int:
    offset = msg.offset()
    return -1 if offset is None else int(offset)


def delivery_recorder(offsets: dict[int, int], index: int) -> Callable[[KafkaError | None, Message], None]:
    """A delivery callback storing the offset of message ``index`` in ``offsets`` (-1 if it failed)."""

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        offsets[index] = -1 if err is not None else message_offset(msg)

    return on_delivery
