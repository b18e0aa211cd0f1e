"""A reader's lag from crafted offsets (pure: the collector's one place that computes it)."""

from __future__ import annotations

from monitor.collector import Collector, _PollContext
from monitor.config import MonitorConfig
from monitor.kafka_offsets import RecordInfo
from monitor.status import Status

T = "shoal.wal." + "a" * 32 + ".1"


def _reader(collector: Collector, start: int, end: int, committed: int | None, records: dict, now: float) -> object:
    ctx = _PollContext(collector, now, {(T, 0): (start, end)}, {}, {}, records, {}, {})
    return collector._reader(ctx, key="k", label="k", where="k", topic=T, partition=0, group="g", committed=committed)


def test_a_first_record_past_the_listed_end_is_no_lag() -> None:
    """A read-committed reader skips an aborted transaction's records; a transaction committed after
    the log end was listed puts the first readable record past it. That is lag 0, never negative
    (a negative lag that does not shrink read as a stuck reader: WARN, then STOP)."""
    c = Collector(MonitorConfig(kafka="127.0.0.1:1", window_samples=4, warn_samples=2), lambda: [])
    c._avg_size[T] = 100.0
    for i in range(4):
        lag = _reader(c, 0, 6, 5, {(T, 0, 5): RecordInfo(8, 999_000, 100)}, 1000.0 + 10 * i)
        assert (lag.lag_records, lag.status) == (0, Status.OK), lag  # type: ignore[attr-defined]
        assert lag.lag_bytes_estimate == 0  # type: ignore[attr-defined]
    lag = _reader(c, 0, 10, 5, {(T, 0, 5): RecordInfo(7, 999_000, 100)}, 2000.0)
    assert lag.lag_records == 3  # type: ignore[attr-defined]
