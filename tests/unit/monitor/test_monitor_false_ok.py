"""The monitor never says OK about what it cannot see: a dead elected leader on an idle partition,
polls that fail, a wall-clock step, and `shoal offsets` exits by the status it prints."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest

import shoal_app.cli.offsets as offsets_cli
from monitor.collector import Collector
from monitor.errors import HistoryFileError
from monitor.history import FILE_NAME, History
from monitor.status import Sample, Status
from monitor.web import MonitorService
from shoal.errors import KafkaOperationError
from shoal_app import schemas
from shoal_app.cli.main import cli
from tests.unit.monitor.collector_support import (
    INGEST,
    Clock,
    OffsetsTable,
    collector,
    healthy,
    replica_group,
    segments,
    topology,
    wal,
)


def _statuses(col: Collector, clock: Clock, polls: int) -> list[str]:
    out = []
    for _ in range(polls):
        out.append(col.poll().tables[0].partitions[0].status.value)
        clock.tick()
    return out


def test_an_idle_partition_whose_elected_leader_is_dead_is_not_ok() -> None:
    clock = Clock()
    col = collector(lambda: [topology(alive=False)], healthy(), clock)
    assert _statuses(col, clock, 4) == ["WARN", "STOP", "STOP", "STOP"]
    snap = col.snapshot
    assert snap is not None and snap.status is Status.STOP
    assert any("node-1#1 of epoch" in p.reason and "not alive" in p.reason for p in snap.problems), snap.problems


def test_an_election_seen_for_one_poll_is_a_warning_then_ok() -> None:
    clock = Clock()
    alive = [True, False, True, True]
    col = collector(lambda: [topology(alive=alive.pop(0))], healthy(), clock)
    assert _statuses(col, clock, 4) == ["OK", "WARN", "OK", "OK"]


def test_a_live_leader_and_no_leader_are_unchanged() -> None:
    clock = Clock()
    assert _statuses(collector(lambda: [topology()], healthy(), clock), clock, 3) == ["OK"] * 3
    assert (
        _statuses(collector(lambda: [topology(leader=None, alive=False)], healthy(), clock), clock, 2) == ["STOP"] * 2
    )


def _failing_service() -> tuple[MonitorService, OffsetsTable, Clock]:
    kafka, clock = healthy(), Clock()
    svc = MonitorService(collector(lambda: [topology()], kafka, clock))
    assert svc.poll_once()
    return svc, kafka, clock


def test_failed_polls_turn_health_snapshot_and_metrics_to_err() -> None:
    svc, kafka, clock = _failing_service()
    assert svc._health()[0] == 200
    kafka.fail = KafkaOperationError("cannot list the topics of kafka:9092: all brokers down")
    for _ in range(3):
        clock.tick()
        assert not svc.poll_once()
    code, _type, body = svc._health()
    assert code == 503 and b"all brokers down" in body
    code, _type, body = svc._snapshot()
    doc = json.loads(body)
    schemas.validate("monitor-snapshot", doc)
    assert code == 200 and doc["status"] == "ERR"
    assert [p["where"] for p in doc["problems"]] == ["monitor"] and "30 s old" in doc["problems"][0]["reason"]
    metrics = generate_latest(svc.registry).decode().splitlines()
    assert "shoal_monitor_status_code 5.0" in metrics and "shoal_monitor_up 0.0" in metrics
    assert "__INITIAL__" not in svc._page()[2].decode() and '"status": "ERR"' in svc._page()[2].decode()
    kafka.fail = None  # one good poll clears it
    assert svc.poll_once() and svc._health()[0] == 200
    assert json.loads(svc._snapshot()[2])["status"] == "OK"
    assert "shoal_monitor_up 1.0" in generate_latest(svc.registry).decode().splitlines()


def test_a_snapshot_older_than_three_intervals_is_unhealthy() -> None:
    svc, _kafka, clock = _failing_service()
    clock.tick(29)
    assert svc._health()[0] == 200
    clock.tick(2)
    code, _type, body = svc._health()
    assert code == 503 and b"31 s old" in body


def test_a_wall_clock_step_keeps_the_window() -> None:
    """Verdicts count polls: a clock step (NTP, a resumed VM) must not turn a stopped follower OK."""
    kafka, clock = healthy(), Clock()
    kafka.bounds[wal(1)] = (0, 80)
    kafka.acks[(replica_group(2), wal(1))] = 80  # node-3 stays at 50
    col = collector(lambda: [topology()], kafka, clock)
    assert _statuses(col, clock, 8)[-1] == "STOP"
    clock.tick(10 * 86400)
    assert _statuses(col, clock, 3) == ["STOP"] * 3


def test_a_series_no_poll_samples_is_forgotten_and_nan_never_blocks_pruning() -> None:
    hist = History(keep_samples=10, keep_s=100.0)
    hist.add("gone", Sample(0.0, 1, 0, 1, 0, 0))
    hist.add("nan", Sample(math.nan, 1, 0, 1, 0, 0))
    hist.add("live", Sample(0.0, 1, 0, 1, 0, 0))
    hist.add("live", Sample(1000.0, 1, 0, 1, 0, 0))
    hist.prune(1000.0)
    assert list(hist.series) == ["live"] and len(hist.series["live"]) == 2


def test_a_history_file_with_a_non_finite_timestamp_is_refused(tmp_path: Path) -> None:
    hist = History(keep_samples=10, keep_s=100.0)
    hist.add("k", Sample(1000.0, 1, 0, 1, 0, 0))
    hist.save(tmp_path, 1000.0)
    path = tmp_path / FILE_NAME
    path.write_text(path.read_text().replace("[1000.0,", "[NaN,"))
    with pytest.raises(HistoryFileError, match="malformed"):
        History.load(tmp_path, keep_samples=10, keep_s=100.0, now=1000.0)


def _offsets(kafka: OffsetsTable, polls_before: int, *args: str, leader_alive: bool = True) -> Any:
    clock = Clock()
    col = collector(lambda: [topology(alive=leader_alive)], kafka, clock, window=4, warn=2)
    for _ in range(polls_before):
        col.poll()
        clock.tick()

    @contextlib.contextmanager
    def opened(conn: Any, table: Any, **kw: Any) -> Iterator[Collector]:
        yield col

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(offsets_cli, "open_collector", opened)
        mp.setattr(offsets_cli, "topic_problems", lambda *a, **k: [])
        return CliRunner().invoke(cli, ["offsets", "t1", "-o", "json", *args])


def _truncated_past_an_ack() -> OffsetsTable:
    kafka = healthy()
    kafka.bounds[wal(1)] = (40, 50)
    kafka.acks[(replica_group(2), wal(1))] = 30
    return kafka


def _stuck_leader() -> OffsetsTable:
    kafka = healthy()
    kafka.bounds[INGEST] = (0, 120)
    return kafka


@pytest.mark.parametrize(
    ("kafka", "polls_before", "args", "alive", "status", "exit_code"),
    [
        (healthy, 0, (), True, "OK", 0),
        (_truncated_past_an_ack, 0, (), True, "ERR", 1),
        (_truncated_past_an_ack, 0, ("--fail-on", "never"), True, "ERR", 0),
        (_truncated_past_an_ack, 0, ("--fail-on", "ERR"), True, "ERR", 1),
        (_stuck_leader, 3, (), True, "STALL", 1),  # a live leader that accepts nothing is stuck
        (healthy, 0, (), False, "WARN", 0),
        (healthy, 0, ("--fail-on", "warn"), False, "WARN", 1),
    ],
)
def test_offsets_exits_by_the_status_it_prints(
    kafka: Any, polls_before: int, args: tuple[str, ...], alive: bool, status: str, exit_code: int
) -> None:
    result = _offsets(kafka(), polls_before, *args, leader_alive=alive)
    doc = json.loads(result.output)
    schemas.validate("monitor-snapshot", doc)
    assert (doc["status"], result.exit_code) == (status, exit_code), result.output


def test_offsets_refuses_an_unknown_threshold() -> None:
    result = _offsets(healthy(), 0, "--fail-on", "sometimes")
    assert result.exit_code == 2 and "sometimes" in result.output


def test_a_channel_deleted_after_the_topology_was_read_is_not_an_error() -> None:
    """UNLOAD_FINAL deletes a removed placement's channels after the METADATA without it: a poll
    that read the topology before that METADATA and the topics after the deletion reads the
    topology again instead of reporting the channels as deleted under the metadata."""
    kafka, clock = healthy(), Clock()
    for p in (2, 3):
        kafka.bounds[wal(p)] = (0, 0)
        kafka.bounds[segments(p)] = (0, 0)
    reads = [topology(), topology(), topology(placements=(1, 2))]
    col = collector(lambda: [reads.pop(0)], kafka, clock)
    assert col.poll().status is Status.OK
    del kafka.bounds[wal(3)], kafka.bounds[segments(3)]
    clock.tick()
    snap = col.poll()
    assert snap.status is Status.OK and reads == [], snap.problems
    # still listed by the metadata read after the topics: the deletion is an ERR
    reads += [topology(), topology()]
    clock.tick()
    snap = col.poll()
    assert snap.status is Status.ERR and reads == []
    assert any("was deleted while the metadata still lists it" in p.reason for p in snap.problems)


@pytest.mark.parametrize(("campaigning", "status"), [(frozenset({1, 2, 3}), "STALL"), (frozenset({1, 3}), "STOP")])
def test_a_stuck_follower_on_a_live_node_is_stall_and_one_whose_node_is_gone_is_stop(
    campaigning: frozenset[int], status: str
) -> None:
    """Followers commit with ``assign()``: Kafka lists no member for their groups, so a follower
    whose Ack stopped moving was always STOP. Its placement in the election line means its process
    is up: a full window of lag without a commit is then STALL (stuck), and STOP when it is not."""
    kafka = healthy()
    kafka.bounds[wal(1)] = (0, 80)
    kafka.acks[(replica_group(3), wal(1))] = 80
    clock = Clock()
    col = collector(lambda: [topology(campaigning=campaigning)], kafka, clock, window=4, warn=2)
    for _ in range(4):
        snap = col.poll()
        clock.tick()
    (part,) = snap.tables[0].partitions
    (wal1,) = [c for c in part.wal if c.topic == wal(1)]
    by_placement = {r.placement_id: r.status.value for r in wal1.replicas}
    assert by_placement == {2: status, 3: "OK"}, by_placement


def test_a_poll_that_hangs_turns_the_served_snapshot_to_err_once_healthz_does() -> None:
    """Only a poll that raised marked the snapshot ERR: one blocked in a ZooKeeper or Kafka call
    (no error) left the last OK on /api/snapshot, the page and shoal_monitor_status_code for ever,
    however far a replica fell behind meanwhile."""
    clock = Clock()
    svc = MonitorService(collector(lambda: [topology()], healthy(), clock))
    assert svc.poll_once()
    clock.tick(29)  # no poll finished since (the next one hangs)
    assert json.loads(svc._snapshot()[2])["status"] == "OK" and svc._health()[0] == 200
    clock.tick(2)
    doc = json.loads(svc._snapshot()[2])
    assert svc._health()[0] == 503 and doc["status"] == "ERR"
    assert any(p["where"] == "monitor" and "one is stuck" in p["reason"] for p in doc["problems"])
    assert "shoal_monitor_status_code 5.0" in generate_latest(svc.registry).decode().splitlines()


def test_a_history_directory_that_cannot_be_written_is_a_clear_error(tmp_path: Path) -> None:
    from monitor.errors import HistoryFileError
    from monitor.history import History

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(HistoryFileError, match="cannot write the monitor history"):
        History(keep_samples=10, keep_s=60.0).save(blocker / "history", 1.0)


def test_a_slow_healthy_poll_is_not_a_stuck_one() -> None:
    """Staleness counts from when the last poll finished: counted from its start (the snapshot's
    time), every snapshot of a poll longer than the limit was served as ERR on a healthy cluster."""
    clock = Clock()

    def slow_topology() -> list[Any]:
        clock.tick(32)  # the topology read of a big cluster
        return [topology()]

    svc = MonitorService(collector(slow_topology, healthy(), clock))
    assert svc.poll_once()
    doc = json.loads(svc._snapshot()[2])
    assert doc["status"] == "OK" and svc._health()[0] == 200, doc["problems"]
