"""The leader's ingest read: the first message is awaited, the rest taken without waiting."""

from __future__ import annotations

from typing import Any

from storage_node.roles.leader.role import ingest_batch


class _Consumer:
    """Holds ``fetched`` messages; records how each call waited."""

    def __init__(self, fetched: list[str]) -> None:
        self.fetched = list(fetched)
        self.calls: list[tuple[str, int, float]] = []

    def poll(self, timeout: float) -> Any:
        self.calls.append(("poll", 1, timeout))
        return self.fetched.pop(0) if self.fetched else None

    def consume(self, n: int, timeout: float) -> list[Any]:
        self.calls.append(("consume", n, timeout))
        out, self.fetched = self.fetched[:n], self.fetched[n:]
        return out


def test_waits_for_the_first_message_only() -> None:
    consumer = _Consumer(["a", "b", "c"])
    assert ingest_batch(consumer, 200, 0.2) == ["a", "b", "c"]  # type: ignore[arg-type]
    assert consumer.calls == [("poll", 1, 0.2), ("consume", 199, 0)]


def test_idle_and_bounded() -> None:
    idle = _Consumer([])
    assert ingest_batch(idle, 200, 0.2) == []  # type: ignore[arg-type]
    assert idle.calls == [("poll", 1, 0.2)]
    busy = _Consumer(["a", "b", "c"])
    assert ingest_batch(busy, 2, 0.2) == ["a", "b"]  # type: ignore[arg-type]
    assert ingest_batch(busy, 1, 0.2) == ["c"]  # type: ignore[arg-type]
    assert busy.calls[-1] == ("poll", 1, 0.2)
