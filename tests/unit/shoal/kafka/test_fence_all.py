"""``fence_all``: every id fenced once, several at a time; the first failure (a fatal one first) raised
after all fences ended. The fence itself runs against real Kafka in the sink's integration tests."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError

import shoal.kafka.transaction as transaction
from shoal.errors import KafkaOperationError
from shoal.kafka.settings import KafkaSettings

KAFKA = KafkaSettings("127.0.0.1:1")


class Fences:
    def __init__(self, failures: dict[str, KafkaOperationError] | None = None) -> None:
        self.failures = failures or {}
        self.done: list[str] = []
        self.running = self.most = 0
        self.lock = threading.Lock()

    def __call__(self, settings: Any, txn_id: str, *, what: str, call_timeout_s: float) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.02)
        with self.lock:
            self.running -= 1
            self.done.append(txn_id)
        if txn_id in self.failures:
            raise self.failures[txn_id]


def test_every_id_is_fenced_once_several_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    fences = Fences()
    monkeypatch.setattr(transaction, "fence", fences)
    ids = [f"t.{i}" for i in range(20)] + ["t.3"]
    transaction.fence_all(KAFKA, ids, what="task", parallelism=4)
    assert sorted(fences.done) == sorted(set(ids)) and 1 < fences.most <= 4


def test_the_first_failure_is_raised_after_every_fence_ended_a_fatal_one_first(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = KafkaOperationError("t.1: coordinator not available", KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE))
    fatal = KafkaOperationError(
        "t.5: not authorized", KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, fatal=True)
    )
    fences = Fences({"t.1": slow, "t.5": fatal})
    monkeypatch.setattr(transaction, "fence", fences)
    with pytest.raises(KafkaOperationError) as raised:
        transaction.fence_all(KAFKA, [f"t.{i}" for i in range(8)], what="task", parallelism=3)
    assert raised.value is fatal and len(fences.done) == 8
    fences = Fences({"t.1": slow})
    monkeypatch.setattr(transaction, "fence", fences)
    with pytest.raises(KafkaOperationError) as raised:
        transaction.fence_all(KAFKA, [f"t.{i}" for i in range(8)], what="task", parallelism=3)
    assert raised.value is slow and not raised.value.fatal
