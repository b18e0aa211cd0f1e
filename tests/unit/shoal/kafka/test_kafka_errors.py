"""classify(): librdkafka's own KafkaError decides fenced, fatal, retriable and txn_requires_abort."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from shoal import errors as shoal_errors
from shoal.kafka.errors import (
    FENCED_CODES,
    KafkaOperationError,
    ProducerFencedError,
    WedgedCallError,
    classify,
)
from shoal.kafka.transaction import BoundedCaller


def test_same_class_from_both_homes() -> None:
    assert shoal_errors.KafkaOperationError is KafkaOperationError
    assert issubclass(ProducerFencedError, shoal_errors.ShoalError)


@pytest.mark.parametrize("code", sorted(FENCED_CODES))
def test_fenced_codes_classify_as_fenced(code: int) -> None:
    exc = KafkaException(KafkaError(code, "fenced", fatal=True))
    error = classify(exc, "commit")
    assert isinstance(error, ProducerFencedError)
    assert error.code == code and error.fatal and error.kafka_error is exc.args[0]
    assert error.__cause__ is exc and str(error).startswith("commit: ")


def test_flags_come_from_the_kafka_error() -> None:
    error = classify(KafkaException(KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True)), "send offsets")
    assert type(error) is KafkaOperationError
    assert error.retriable and not error.fatal and not error.txn_requires_abort
    error = classify(KafkaException(KafkaError(KafkaError._STATE, "abort me", txn_requires_abort=True)), "commit")
    assert error.txn_requires_abort and not error.retriable and error.code == KafkaError._STATE


def test_without_a_kafka_error() -> None:
    error = KafkaOperationError("plain")
    assert error.kafka_error is None and error.code is None
    assert not (error.fatal or error.retriable or error.txn_requires_abort)
    assert type(classify(KafkaException("text only"), "x")) is KafkaOperationError


def test_bounded_caller_runs_calls_on_one_thread_and_bounds_them() -> None:
    caller = BoundedCaller("test-bounded")
    names = {caller.call("a", lambda: __import__("threading").current_thread().name, 5) for _ in range(3)}
    assert names == {"test-bounded"}
    with pytest.raises(ValueError):
        caller.call("raises", lambda: (_ for _ in ()).throw(ValueError("boom")), 5)
    with pytest.raises(WedgedCallError, match="did not return within"):
        caller.call("sleeps", lambda: time.sleep(2), 0.2)
    assert caller.wedged
    with pytest.raises(WedgedCallError):
        caller.call("again", lambda: None, 1)


def test_transient_codes_without_the_flag_classify_as_retriable() -> None:
    """librdkafka's plain APIs (watermarks, list_offsets) report NOT_LEADER_FOR_PARTITION unflagged."""
    error = classify(KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION)), "read offsets")
    assert error.retriable and not error.fatal and error.code == KafkaError.NOT_LEADER_FOR_PARTITION
    assert not classify(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), "x").retriable
