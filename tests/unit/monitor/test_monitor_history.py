"""The monitor's history: windows, leader changes, persistence across restarts, bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.errors import HistoryFileError
from monitor.history import FILE_NAME, History
from monitor.status import Sample


def test_round_trip_keeps_windows_events_ids_and_leaders(tmp_path: Path) -> None:
    h = History(keep_samples=5, keep_s=1000)
    for i in range(8):
        h.add("wal|t|g", Sample(100.0 + i, i, 0, i + 3, 3, 1))
    h.add_event("topic:t", 105.0, "recreated")
    h.topic_ids["t"] = "abc"
    h.cluster_id = "c1"
    assert h.note_leader("p", 1, "node-1") == 0
    assert h.note_leader("p", 2, "node-2") == 1
    h.save(tmp_path, 108.0)
    back = History.load(tmp_path, keep_samples=5, keep_s=1000, now=108.0)
    assert [s.committed for s in back.series["wal|t|g"]] == [3, 4, 5, 6, 7]
    assert back.series["wal|t|g"][-1] == Sample(107.0, 7, 0, 10, 3, 1)
    assert back.active_events("topic:t", 108.0, 10.0) == ["recreated"]
    assert back.topic_ids == {"t": "abc"} and back.cluster_id == "c1"
    assert back.partitions["p"].leader_changes == 1
    assert not list(tmp_path.glob(".monitor-history.*"))  # no temporary file left


def test_old_samples_are_dropped_on_load(tmp_path: Path) -> None:
    h = History(keep_samples=10, keep_s=50)
    h.add("k", Sample(0.0, 1, 0, 1, 0))
    h.add("k", Sample(90.0, 2, 0, 2, 0))
    h.save(tmp_path, 90.0)
    back = History.load(tmp_path, keep_samples=10, keep_s=50, now=100.0)
    assert [s.ts for s in back.series["k"]] == [90.0]


def test_missing_file_is_an_empty_history(tmp_path: Path) -> None:
    assert History.load(tmp_path, keep_samples=3, keep_s=10, now=0).series == {}


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "unreadable"),
        (json.dumps({"version": 99}), "not a version 1"),
        (json.dumps({"version": 1, "cluster_id": None}), "malformed"),
        (
            json.dumps(
                {
                    "version": 1,
                    "cluster_id": None,
                    "topic_ids": {},
                    "partitions": {},
                    "series": {"k": [[1, 2]]},
                    "events": {},
                }
            ),
            "malformed",
        ),
    ],
)
def test_bad_history_file_is_a_clear_error(tmp_path: Path, content: str, words: str) -> None:
    (tmp_path / FILE_NAME).write_text(content)
    with pytest.raises(HistoryFileError, match=words) as info:
        History.load(tmp_path, keep_samples=3, keep_s=10, now=0)
    assert str(tmp_path / FILE_NAME) in str(info.value)
    assert (tmp_path / FILE_NAME).read_text() == content  # left as it was


def test_epoch_going_down_is_not_counted_as_a_change() -> None:
    h = History(keep_samples=3, keep_s=10)
    h.note_leader("p", 3, "a")
    assert h.note_leader("p", 3, "a") == 0
    assert h.note_leader("p", 4, "b") == 1
    assert h.note_leader("p", 4, "b") == 1
