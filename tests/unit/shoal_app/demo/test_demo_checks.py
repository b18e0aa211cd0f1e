"""The full demo's pure parts: split points, the content check, lag figures, config and data-dir guards."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from shoal.errors import ConfigError
from shoal_app.demo.events import check_content, event_id_at, event_json, split_points, table_definition
from shoal_app.demo.full import FullDemoConfig
from shoal_app.demo.observe import lag_from_snapshot
from shoal_app.demo.processes import DEMO_MARKER, DemoError, check_data_dir


def _rows(ids: list[int]) -> pa.Table:
    """What a scan returns for the events ``ids``, built from their JSON (as the ingest job parses it)."""
    records = [json.loads(event_json(i, 1_700_000_000_000)) for i in ids]
    schema = table_definition("demo_events", 3).arrow_schema()
    return pa.Table.from_pylist(records, schema=schema)


def test_split_points_cut_the_ids_into_equal_ranges() -> None:
    assert split_points(20_000, 4) == [5000, 10000, 15000]
    assert split_points(10, 2) == [5]
    with pytest.raises(ConfigError, match="at least one event per partition"):
        split_points(3, 4)


@pytest.mark.parametrize(("events", "partitions"), [(20_000, 4), (10, 3), (7, 7), (101, 4)])
def test_event_ids_interleave_the_partitions_and_cover_every_id_once(events: int, partitions: int) -> None:
    ids = [event_id_at(i, events, partitions) for i in range(events)]
    assert sorted(ids) == list(range(events))
    points = split_points(events, partitions)
    first = ids[:partitions]  # the first events already reach every partition
    assert len({sum(1 for p in points if i >= p) for i in first}) == partitions


def test_content_check_accepts_exactly_the_acknowledged_events() -> None:
    check = check_content(_rows(list(range(100))), list(range(100)))
    assert check.ok and check.rows == check.distinct_ids == check.acknowledged == 100


def test_content_check_finds_missing_duplicate_unexpected_and_altered_rows() -> None:
    missing = check_content(_rows([i for i in range(100) if i not in (7, 42)]), list(range(100)))
    assert not missing.ok and missing.missing == 2 and missing.missing_sample == (7, 42)

    duplicated = check_content(_rows([*range(100), 5]), list(range(100)))
    assert not duplicated.ok and duplicated.rows == 101 and duplicated.distinct_ids == 100

    unexpected = check_content(_rows([*range(100), 1000]), list(range(100)))
    assert not unexpected.ok and unexpected.unexpected == 1 and unexpected.missing == 0

    rows = _rows(list(range(100)))
    amounts = rows.column("amount").to_pylist()
    amounts[3] += 1.0
    altered = rows.set_column(rows.schema.get_field_index("amount"), "amount", pa.array(amounts, pa.float64()))
    wrong = check_content(altered, list(range(100)))
    assert not wrong.ok and wrong.wrong_content == 1 and wrong.missing == 0


def test_content_check_of_an_empty_table() -> None:
    check = check_content(_rows([]), [1, 2])
    assert not check.ok and check.missing == 2 and check.rows == 0
    assert check_content(_rows([]), []).ok


def test_lag_figures_from_a_monitor_snapshot() -> None:
    replica = {"server_id": "node-2", "placement_id": 2, "lag_records": 7}
    snap = {
        "status": "WARN",
        "tables": [
            {
                "partitions": [
                    {
                        "ingest": {"lag_records": 3},
                        "wal": [
                            {"exists": True, "is_leader_channel": True, "replicas": [replica]},
                            {"exists": True, "is_leader_channel": False, "replicas": [{**replica, "lag_records": 100}]},
                        ],
                        "segments": [
                            {
                                "exists": True,
                                "is_leader_channel": True,
                                "minors_awaiting_compaction": 4,
                                "replicas": [{"server_id": "node-3", "unacked_segments": 2}],
                            }
                        ],
                    }
                ]
            }
        ],
        "spark_queries": [{"query": "q", "lag_records": 11}],
        "problems": [{"where": "x", "status": "WARN", "reason": "y"}],
    }
    lag = lag_from_snapshot(snap)
    assert lag.status == "WARN" and lag.spark_lag_records == 11 and lag.ingest_lag_records == 3
    assert lag.wal_lag_records == {"node-2": 7}  # only the current leader's channel counts
    assert lag.unacked_segments == {"node-3": 2} and lag.minors_awaiting_compaction == 4 and lag.problems == 1
    assert lag_from_snapshot({"tables": []}).spark_lag_records is None


def test_config_refuses_bad_values(tmp_path: Path) -> None:
    FullDemoConfig(tmp_path, tmp_path)
    for bad in (
        {"kill_at": 1.0},
        {"partitions": 1},
        {"events": 2},
        {"rate_per_s": 0},
        {"nodes": 2},
        {"monitor_port": 70000},
    ):
        with pytest.raises(ConfigError):
            FullDemoConfig(tmp_path, tmp_path, **bad)


def test_data_dir_guard_never_takes_over_a_foreign_directory(tmp_path: Path) -> None:
    check_data_dir(tmp_path / "new")  # does not exist: fine
    empty = tmp_path / "empty"
    empty.mkdir()
    check_data_dir(empty)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me")
    with pytest.raises(DemoError, match="not made by `shoal demo`"):
        check_data_dir(foreign)
    assert (foreign / "precious.txt").read_text() == "keep me"
    (foreign / DEMO_MARKER).write_text("{}")
    check_data_dir(foreign)  # a previous demo's dir may be re-made
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(DemoError, match="not a directory"):
        check_data_dir(a_file)


def test_demo_stop_without_a_kept_demo_is_a_clear_error(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from shoal_app.cli.main import cli

    result = CliRunner().invoke(cli, ["demo", "--stop", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "holds no demo" in result.output and DEMO_MARKER in result.output


def test_demo_refuses_a_foreign_data_dir_before_starting_anything(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from shoal_app.cli.main import cli

    (tmp_path / "precious.txt").write_text("keep me")
    result = CliRunner().invoke(cli, ["demo", "--data-dir", str(tmp_path), "--output", "json"])
    assert result.exit_code == 2
    assert "not made by `shoal demo`" in result.output and str(tmp_path) in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt"]
