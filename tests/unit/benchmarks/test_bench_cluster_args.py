"""Every benchmark that starts a node cluster reaches the start with the settings it needs.

``make bench`` ignores a failing benchmark (the report tables the others), so a benchmark broken
before its cluster starts would only show as a missing row: ``latency_stages`` and ``kafka_bytes``
once failed so, on an option only ``bench.replicated`` parses. Here the cluster start is replaced
by a stop that records its arguments; nothing is started."""

from __future__ import annotations

import importlib
import signal
from collections.abc import Iterator
from typing import Any

import pytest


class Started(Exception):
    """Raised where the benchmark would start its cluster."""


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    from bench import common

    calls: list[dict[str, Any]] = []

    def node_cluster(_say: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        raise Started

    monkeypatch.setattr(common, "node_cluster", node_cluster)
    handler = signal.getsignal(signal.SIGTERM)  # the benchmarks make SIGTERM unwind
    try:
        yield calls
    finally:
        signal.signal(signal.SIGTERM, handler)


@pytest.mark.parametrize(
    ("module", "brokers", "nodes"),
    [
        ("bench.replicated", 3, 3),
        ("bench.latency_stages", 3, 3),
        ("bench.kafka_bytes", 3, 3),
        ("bench.node_memory", 1, 1),
    ],
)
def test_reaches_its_cluster_start(started: list[dict[str, Any]], module: str, brokers: int, nodes: int) -> None:
    main = importlib.import_module(module).main
    with pytest.raises(Started):
        main(["--output", "json"])
    (kwargs,) = started
    assert (kwargs["brokers"], kwargs["nodes"], kwargs.get("kafka_request_log", False)) == (brokers, nodes, False)


def test_replicated_asks_for_the_request_log_only_when_told(started: list[dict[str, Any]]) -> None:
    from bench import replicated

    with pytest.raises(Started):
        replicated.main(["--output", "json", "--broker-requests"])
    assert started[0]["kafka_request_log"] is True
