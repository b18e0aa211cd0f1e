"""A transaction left open holds every read_committed reader of a partition at its first offset
while their lag (data records they can read) is 0: the monitor says so once the last stable offset
has stayed at one offset below the log end long enough (``monitor.status.held_by_transaction``)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from monitor.history import History
from monitor.status import Sample, Status, evaluate
from tests.unit.monitor.collector_support import Clock, collector, healthy, replica_group, topology, wal


def held(stable: list[int | None], *, end: int = 50, step_s: float = 10.0) -> list[Sample]:
    """Caught-up samples (lag 0 by data records) with these last stable offsets."""
    return [Sample(1000.0 + i * step_s, 40, 0, end, 0, 1, lso) for i, lso in enumerate(stable)]


def verdict(window: list[Sample], open_s: float | None = 30.0) -> tuple[Status, str]:
    v = evaluate(window, window_samples=6, warn_samples=3, open_transaction_s=open_s)
    return v.status, v.reason


def test_a_last_stable_offset_stuck_below_the_log_end_is_a_warning() -> None:
    status, reason = verdict(held([40, 40, 40, 40]))
    assert status is Status.WARN
    assert "stays at 40 below the log end 50" in reason and "holds 10 offsets back" in reason
    assert "open for 30s" in reason


def test_one_that_moves_with_each_commit_is_ok() -> None:
    # steady transactional writes: below the log end at each poll, but never at the same offset
    assert verdict([Sample(1000.0 + i * 10, 40 + i, 0, 50 + i, 0, 1, 45 + i) for i in range(6)])[0] is Status.OK


def test_too_short_or_too_few_polls_is_ok() -> None:
    assert verdict(held([40, 40, 40, 40], step_s=5.0))[0] is Status.OK  # 15 s < 30 s
    assert verdict(held([40, 40], step_s=60.0))[0] is Status.OK  # 2 polls < 3
    assert verdict(held([45, 40, 40, 40]))[0] is Status.OK  # stuck for 3 polls but 20 s
    assert verdict(held([40, 40, 40, 50]))[0] is Status.OK  # committed or aborted by now


def test_not_judged_without_a_last_stable_offset_or_when_asked_not_to() -> None:
    assert verdict(held([None, None, None, None]))[0] is Status.OK
    assert verdict(held([40, 40, 40, 40]), open_s=None)[0] is Status.OK


def test_a_window_shorter_than_the_bound_never_warns() -> None:
    # a transaction of a few seconds under load, seen by a monitor polling twice a second, is no fault
    assert verdict(held([40] * 6, step_s=0.5))[0] is Status.OK


def test_a_worse_verdict_stays() -> None:
    # lag that never decreases with the offset stuck: STOP over a full window, whatever the transaction
    window = [Sample(1000.0 + i * 10, 40, 0, 50, 10, 0, 40) for i in range(6)]
    assert verdict(window)[0] is Status.STOP


def test_the_collector_warns_about_a_channel_held_by_an_open_transaction() -> None:
    kafka, clock = healthy(), Clock()
    kafka.stable[wal(1)] = 45  # the leader's transaction from offset 45 on never ends
    for p in (2, 3):  # read_committed readers: at most up to it
        kafka.acks[(replica_group(p), wal(1))] = 45
    col = collector(lambda: [topology()], kafka, clock, window=30, warn=3)
    statuses = []
    for _ in range(26):  # polls 10 s apart, open_transaction_warn_s: 240 s
        statuses.append(col.poll().status.value)
        clock.tick()
    assert statuses[:24] == ["OK"] * 24 and statuses[24:] == ["WARN", "WARN"], statuses
    snap = col.snapshot
    assert snap is not None
    (part,) = snap.tables[0].partitions
    (wal1,) = [c for c in part.wal if c.topic == wal(1)]
    assert {r.status for r in wal1.replicas} == {Status.WARN}
    assert all(r.lag_records == 0 for r in wal1.replicas)  # what read_committed readers can read
    assert any("wal#1" in p.where and "transaction open" in p.reason for p in snap.problems), snap.problems
    kafka.stable[wal(1)] = 50  # committed: the readers read on
    kafka.acks[(replica_group(2), wal(1))] = 50
    kafka.acks[(replica_group(3), wal(1))] = 50
    assert col.poll().status is Status.OK


def test_a_reader_past_the_last_stable_offset_reads_uncommitted_and_is_not_held() -> None:
    # Spark's Kafka source reads uncommitted records by default: an open transaction holds it not
    window = [Sample(1000.0 + i * 60, 48, 0, 50, 0, 1, 40) for i in range(6)]
    assert verdict(window)[0] is Status.OK


def test_a_poll_that_cannot_read_the_last_stable_offsets_keeps_its_lag_figures() -> None:
    from shoal.errors import KafkaOperationError

    kafka, clock = healthy(), Clock()

    def fails(_tps: object) -> dict[tuple[str, int], int]:
        raise KafkaOperationError("listing offsets timed out")

    kafka.stable_ends = fails  # type: ignore[method-assign]
    snap = collector(lambda: [topology()], kafka, clock).poll()
    assert snap.status is Status.OK


class _PreviousHistoryFile(BaseModel):
    """``HistoryFile`` as the release before the last stable offset was sampled had it."""

    version: int
    saved_at: float
    cluster_id: str | None
    topic_ids: dict[str, str]
    partitions: dict[str, dict[str, object]]
    series: dict[str, list[tuple[float, int | None, int, int, int, int]]]
    events: dict[str, list[tuple[float, str]]]


def test_the_history_file_keeps_the_last_stable_offset_and_reads_older_rows(tmp_path: Path) -> None:
    h = History(keep_samples=5, keep_s=1000)
    h.add("k", Sample(100.0, 1, 0, 5, 0, 1, 3))
    h.save(tmp_path, 100.0)
    back = History.load(tmp_path, keep_samples=5, keep_s=1000, now=100.0)
    assert back.series["k"][-1] == Sample(100.0, 1, 0, 5, 0, 1, 3)
    path = tmp_path / "monitor-history.json"
    saved = json.loads(path.read_text())
    assert saved["series"]["k"] == [[100.0, 1, 0, 5, 0, 1]] and saved["stable_ends"] == {"k": [3]}
    # the previous release's model (six-field rows, unknown keys ignored) reads it
    previous = _PreviousHistoryFile.model_validate(saved)
    assert previous.series["k"] == [(100.0, 1, 0, 5, 0, 1)]
    # a file without stable ends (an earlier release wrote it), and one with seven-field rows
    path.write_text(json.dumps({**saved, "stable_ends": {}}))
    assert History.load(tmp_path, keep_samples=5, keep_s=1000, now=100.0).series["k"][-1].stable_end is None
    path.write_text(json.dumps({**saved, "stable_ends": {"k": [3, 4]}}))  # not one per row: not used
    assert History.load(tmp_path, keep_samples=5, keep_s=1000, now=100.0).series["k"][-1].stable_end is None
    path.write_text(json.dumps({**saved, "series": {"k": [[100.0, 1, 0, 5, 0, 1, 3]]}, "stable_ends": {}}))
    assert History.load(tmp_path, keep_samples=5, keep_s=1000, now=100.0).series["k"][-1].stable_end == 3
