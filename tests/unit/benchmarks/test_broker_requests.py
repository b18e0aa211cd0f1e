"""bench.broker_requests' pure parts: the request logger's lines, windows, the data share; and the
brokers' log4j2 configuration that writes those lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import broker_requests as br
from shoal_app.runtime import kafka


def _line(at_ms: int, api: str, *, client: str = "rdkafka", listener: str = "PLAINTEXT", local: float = 1.0) -> str:
    doc = {
        "isForwarded": False,
        "requestHeader": {"requestApiKey": 0, "clientId": client, "requestApiKeyName": api},
        "request": {},
        "response": {},
        "totalTimeMs": local + 1,
        "localTimeMs": local,
        "sendTimeMs": 0.5,
        "listener": listener,
    }
    return f"{at_ms} Completed request:{json.dumps(doc)}\n"


def test_lines_are_read_and_fetches_split_into_replica_and_consumer() -> None:
    r = br.parse_line(_line(1_700_000_000_123, "FETCH", client="broker-2-fetcher-0", local=2.5))
    assert r == br.Request(1_700_000_000_123, "FETCH (replica)", "PLAINTEXT", 2.5, 0.5)
    c = br.parse_line(_line(1_700_000_000_124, "FETCH", client="rdkafka"))
    assert c is not None and c.api == "FETCH (consumer)"


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "[2026] INFO started (kafka.server)",
        "1700000000000 Completed request:{not json",
        "1700000000000 Completed request:{}",
    ],
)
def test_other_lines_are_skipped(garbage: str) -> None:
    assert br.parse_line(garbage) is None


def test_profile_counts_only_the_windows_and_leaves_out_the_controller_listener() -> None:
    lines = [
        _line(999, "PRODUCE", local=100.0),  # before the window
        _line(1_000, "PRODUCE", local=4.0),
        _line(1_500, "FETCH", client="broker-1-fetcher-0", local=3.0),
        _line(1_600, "METADATA", local=1.0),
        _line(1_700, "FETCH", listener="CONTROLLER", local=50.0),  # KRaft
        _line(2_001, "METADATA", local=100.0),  # after it
        _line(5_000, "END_TXN", local=2.0),  # a second window
    ]
    loads = br.profile(lines, [(1.0, 2.0), (5.0, 6.0)])
    assert {k: (v.requests, v.local_ms) for k, v in loads.items()} == {
        "PRODUCE": (1, 4.0),
        "FETCH (replica)": (1, 3.0),
        "METADATA": (1, 1.0),
        "END_TXN": (1, 2.0),
    }
    s = br.summary(loads, 2.0)
    assert s["requests"] == 4 and s["handler_ms"] == 10.0
    assert s["data_share"] == pytest.approx(0.7)
    assert list(s["apis"]) == ["PRODUCE", "FETCH (replica)", "END_TXN", "METADATA"]  # by handler time
    assert s["apis"]["PRODUCE"]["per_s"] == 0.5
    assert "Produce+Fetch 70%" in br.describe("shoal", s)


def test_read_profile_adds_up_every_broker(tmp_path: Path) -> None:
    for broker, api in ((1, "PRODUCE"), (2, "PRODUCE"), (3, "OFFSET_COMMIT")):
        logs = tmp_path / f"kafka-{broker}" / "logs"
        logs.mkdir(parents=True)
        (logs / kafka.REQUEST_LOG_NAME).write_text(_line(10_000, api, local=1.0), encoding="utf-8")
    s = br.read_profile(tmp_path, [(9.0, 11.0)])
    assert s["apis"]["PRODUCE"]["requests"] == 2 and s["apis"]["OFFSET_COMMIT"]["requests"] == 1
    assert s["data_share"] == pytest.approx(2 / 3)
    assert br.summary({}, 0.0)["data_share"] is None and "0 requests/s" in br.describe("idle", br.summary({}, 0.0))


def test_the_request_logger_is_configured_only_when_asked() -> None:
    assert "kafka.request.logger" not in kafka.log4j2_properties()
    text = kafka.log4j2_properties(request_log=True)
    assert "logger.req.name = kafka.request.logger" in text and "logger.req.level = DEBUG" in text
    assert f"/{kafka.REQUEST_LOG_NAME}" in text and "%d{UNIX_MILLIS} %m%n" in text
    assert text.startswith(kafka.log4j2_properties())  # the usual loggers stay as they are
