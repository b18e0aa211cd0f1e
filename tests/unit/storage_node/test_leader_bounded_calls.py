"""The leader's WAL channel: every transactional call bounded, and what an error means for the role.

The bound itself (one helper thread per channel, WedgedCallError past it) is the core's
TransactionalChannel, tested in tests/unit/shoal/kafka; here: how the leader reads its errors.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from shoal.errors import ConfigError, KafkaOperationError
from shoal.kafka.errors import ProducerFencedError, WedgedCallError
from shoal.kafka.settings import KafkaSettings
from storage_node.config import LeaderConfig
from storage_node.errors import FencedError, WedgedProducerError
from storage_node.roles.leader.transaction import leader_error, wal_channel

TOPIC = "shoal.wal.p1.1"


def test_a_wedged_call_ends_the_role_as_wedged() -> None:
    error = leader_error(WedgedCallError("send_offsets_to_transaction did not return within 35.0s"), TOPIC)
    assert isinstance(error, WedgedProducerError) and error.channel == TOPIC
    assert "send_offsets_to_transaction did not return within" in str(error)
    assert issubclass(WedgedProducerError, WedgedCallError) and issubclass(WedgedProducerError, KafkaOperationError)


def test_a_fenced_or_fatal_producer_ends_the_role_as_fenced() -> None:
    fenced = leader_error(ProducerFencedError("fenced", KafkaError(KafkaError.PRODUCER_FENCED)), TOPIC)
    assert isinstance(fenced, FencedError) and fenced.channel == TOPIC
    fatal = leader_error(KafkaOperationError("fatal", KafkaError(KafkaError._FATAL, fatal=True)), TOPIC)
    assert isinstance(fatal, FencedError)


def test_a_retriable_error_is_retried() -> None:
    assert (
        leader_error(KafkaOperationError("timed out", KafkaError(KafkaError._TIMED_OUT, retriable=True)), TOPIC) is None
    )


def test_the_channel_is_bounded_by_the_configured_timeout() -> None:
    config = LeaderConfig(KafkaSettings("127.0.0.1:9092"), transaction_call_timeout_s=12)
    channel = wal_channel(config, TOPIC)
    assert channel.transactional_id == TOPIC and channel.call_timeout_s == 12


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="transaction_call_timeout_s"):
        LeaderConfig(KafkaSettings("127.0.0.1:9092"), transaction_call_timeout_s=0)
