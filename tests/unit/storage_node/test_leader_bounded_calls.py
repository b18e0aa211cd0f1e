"""The bound on transactional calls that librdkafka may never return from (#5456)."""

from __future__ import annotations

import threading

import pytest

from shoal.errors import ConfigError, KafkaOperationError
from storage_node.config import LeaderConfig
from storage_node.errors import WedgedProducerError
from storage_node.roles.leader.transaction import run_bounded


def test_a_call_that_returns_is_transparent() -> None:
    seen: list[int] = []
    run_bounded(lambda: seen.append(1), "commit_transaction", 5.0)
    assert seen == [1]


def test_the_calls_own_exception_reaches_the_caller() -> None:
    def boom() -> None:
        raise KeyError("fenced")

    with pytest.raises(KeyError, match="fenced"):
        run_bounded(boom, "commit_transaction", 5.0)


def test_a_call_that_never_returns_is_abandoned_as_wedged() -> None:
    release = threading.Event()
    try:
        with pytest.raises(WedgedProducerError, match="send_offsets_to_transaction did not return within"):
            run_bounded(release.wait, "send_offsets_to_transaction", 0.2)
    finally:
        release.set()
    assert issubclass(WedgedProducerError, KafkaOperationError)


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="transaction_call_timeout_s"):
        LeaderConfig("127.0.0.1:9092", transaction_call_timeout_s=0)
