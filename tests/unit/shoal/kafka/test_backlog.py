"""The last record of an ingest topic past its leader group's offset (``shoal.kafka.backlog``) while
the topic's straggler forwarder deletes what it forwarded: a read positioned below the new log start
goes on from there (those records were forwarded: accepted), it does not fail the write waiting."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

import shoal.kafka.backlog as backlog
from shoal.kafka.settings import KafkaSettings


class _Error:
    def __init__(self, code: int) -> None:
        self._code = code

    def code(self) -> int:
        return self._code


class _Msg:
    def __init__(self, offset: int, error: _Error | None = None) -> None:
        self._offset, self._error = offset, error

    def offset(self) -> int:
        return self._offset

    def error(self) -> _Error | None:
        return self._error


class _Consumer:
    """librdkafka with ``auto.offset.reset=error``: a position below the log start is an error."""

    def __init__(self, log_start: int, end: int) -> None:
        self.log_start, self.end, self.position = log_start, end, 0
        self.assigned: list[int] = []

    def assign(self, tps: list[TopicPartition]) -> None:
        self.position = tps[0].offset
        self.assigned.append(self.position)

    def poll(self, _timeout: float) -> _Msg:
        if self.position < self.log_start:
            return _Msg(self.position, _Error(KafkaError._AUTO_OFFSET_RESET))
        if self.position >= self.end:
            return _Msg(self.position, _Error(KafkaError._PARTITION_EOF))
        self.position += 1
        return _Msg(self.position - 1)

    def get_watermark_offsets(self, _tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return self.log_start, self.end

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("log_start", "last"), [(15, 19), (20, None)])
def test_a_read_below_a_log_start_the_forwarder_moved_goes_on_from_it(
    monkeypatch: pytest.MonkeyPatch, log_start: int, last: int | None
) -> None:
    consumer = _Consumer(log_start, 20)
    monkeypatch.setattr(backlog.clients, "consumer", lambda *_a, **_k: consumer)
    found = backlog._last_record(KafkaSettings("127.0.0.1:1"), "p.ingest.x", "g.sink-check", 10, 20, 5.0)
    assert found == last
    assert consumer.assigned == ([10, log_start] if log_start < 20 else [10])


def test_another_consumer_error_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class Failing(_Consumer):
        def poll(self, _timeout: float) -> Any:
            return _Msg(10, _Error(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    monkeypatch.setattr(backlog.clients, "consumer", lambda *_a, **_k: Failing(0, 20))
    with pytest.raises(backlog.KafkaOperationError):
        backlog._last_record(KafkaSettings("127.0.0.1:1"), "p.ingest.x", "g.sink-check", 10, 20, 5.0)
