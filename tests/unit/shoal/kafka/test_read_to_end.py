"""``read_to_end``'s start: the log start when later, or, with ``exact_start``, ChannelTruncatedError."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from shoal.kafka import readers
from shoal.kafka.errors import ChannelTruncatedError
from shoal.kafka.settings import KafkaSettings


class _Eof:
    def code(self) -> int:
        return KafkaError._PARTITION_EOF


class _Msg:
    def __init__(self, offset: int, error: Any = None) -> None:
        self._offset, self._error = offset, error

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return b""

    def error(self) -> Any:
        return self._error


class _Consumer:
    """A channel whose log starts at 2 (the Tail truncated 0 and 1) and ends at 4."""

    def __init__(self) -> None:
        self.queue: list[_Msg] = []
        self.closed = False

    def get_watermark_offsets(self, _tp: Any, timeout: float | None = None) -> tuple[int, int]:
        return 2, 4

    def assign(self, tps: list[Any]) -> None:
        self.queue = [_Msg(o) for o in range(tps[0].offset, 4)] + [_Msg(4, _Eof())]

    def poll(self, _timeout: float) -> _Msg | None:
        return self.queue.pop(0) if self.queue else None

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch) -> _Consumer:
    made = _Consumer()
    monkeypatch.setattr(readers.clients, "consumer", lambda *_a, **_k: made)
    return made


def _read(start: int, **kw: Any) -> list[int]:
    settings = KafkaSettings("127.0.0.1:1")
    return [int(m.offset()) for m in readers.read_to_end(settings, "t", start, what="WAL channel", group_id="g", **kw)]


def test_a_read_below_the_log_start_begins_at_it(consumer: _Consumer) -> None:
    assert _read(0) == [2, 3] and consumer.closed


def test_an_exact_read_below_the_log_start_is_a_truncated_channel(consumer: _Consumer) -> None:
    """verify read Tail 0, then the Tail moved to 2: the rest of the channel is not the channel it
    judges by Tail 0 (a coverage check would miss records [0, 2) deleted before any segment)."""
    with pytest.raises(ChannelTruncatedError) as info:
        _read(0, exact_start=True)
    assert (info.value.topic, info.value.offset) == ("t", 0) and consumer.closed
    assert _read(2, exact_start=True) == [2, 3]
