"""The benchmarks' JSON shape and ratio arithmetic (pure functions; no servers, no timing)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench import common, node_memory, replicated
from bench.report import load, markdown


def test_percentile_interpolates_and_handles_empty() -> None:
    assert replicated.percentile([], 50) is None
    assert replicated.percentile([3.0], 99) == 3.0
    assert replicated.percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert replicated.percentile(list(map(float, range(101))), 99) == pytest.approx(99.0)


def test_latency_summary_in_ms() -> None:
    s = replicated.latency_summary([0.010, 0.020, 0.030])
    assert s["n"] == 3 and s["p50_ms"] == pytest.approx(20.0)
    assert replicated.latency_summary([]) == {"n": 0, "p50_ms": None, "p99_ms": None}


def test_throughput_ratio_and_split() -> None:
    assert replicated.throughput_ratio(5.0, 10.0) == 0.5
    assert replicated.throughput_ratio(5.0, 0.0) is None
    assert replicated.split_evenly(10, 3) == [(0, 3), (3, 6), (6, 10)]


def test_the_median_run_is_picked_by_time_and_keeps_every_runs_seconds() -> None:
    runs = [{"seconds": 5.0, "MB/s": 1.0}, {"seconds": 3.0, "MB/s": 3.0}, {"seconds": 4.0, "MB/s": 2.0}]
    assert replicated.median_run(runs) == {"seconds": 4.0, "MB/s": 2.0, "runs s": [5.0, 3.0, 4.0]}
    assert replicated.median_run(runs[:2])["seconds"] == 3.0  # the lower of the middle two
    assert replicated.median_run(runs[:1]) == {"seconds": 5.0, "MB/s": 1.0, "runs s": [5.0]}


def test_the_warm_up_runs_the_measured_size_up_to_half_a_million_rows_unless_told() -> None:
    assert replicated.warmup_rows(200_000, None) == 200_000
    assert replicated.warmup_rows(2_000_000, None) == 500_000
    assert replicated.warmup_rows(2_000_000, 0) == 0
    assert replicated.warmup_rows(100, 7) == 7
    with pytest.raises(argparse.ArgumentTypeError):
        common.non_negative_int("-1")
    assert common.non_negative_int("1_000") == 1000


def _progress(**kw: object) -> replicated.PartitionProgress:
    base: dict[str, object] = {
        "ingest_end": 10,
        "accepted": 10,
        "wal_append": 8,
        "wal_covered": 7,
        "unacked_segments": (0, 0),
    }
    base.update(kw)
    return replicated.PartitionProgress(**base)  # type: ignore[arg-type]


def test_fully_replicated_needs_accepted_covered_and_acked() -> None:
    assert replicated.fully_replicated(_progress())
    assert not replicated.fully_replicated(_progress(accepted=9))
    assert not replicated.fully_replicated(_progress(accepted=None))
    assert not replicated.fully_replicated(_progress(wal_covered=6))  # a WAL record not in a segment yet
    assert not replicated.fully_replicated(_progress(wal_covered=None))
    assert not replicated.fully_replicated(_progress(unacked_segments=(0, 1)))
    assert replicated.fully_replicated(_progress(wal_append=0, wal_covered=None))  # channel adopted elsewhere
    assert replicated.fully_replicated(_progress(ingest_end=0, accepted=None, wal_append=0, wal_covered=None))


def test_durable_on_every_replica_needs_accepted_and_every_followers_wal_ack_at_the_end() -> None:
    ok = _progress(wal_covered=None, unacked_segments=(), wal_acks=(7, 8))  # 8: past the last commit marker
    assert replicated.durable_on_every_replica(ok)
    assert not replicated.durable_on_every_replica(_progress(accepted=9, wal_acks=(8, 8)))
    assert not replicated.durable_on_every_replica(_progress(wal_acks=(8, 6)))  # a record not in its segments yet
    assert not replicated.durable_on_every_replica(_progress(wal_acks=(8, None)))  # a replica that never acked
    assert not replicated.durable_on_every_replica(_progress(wal_acks=()))  # no replica read: nothing known
    assert replicated.durable_on_every_replica(_progress(wal_append=0, wal_acks=()))  # channel adopted elsewhere
    assert replicated._stages([ok, _progress(wal_acks=(8, 6))]) == {
        "accepted": True,
        "durable on every replica": False,
    }


def test_json_document_has_a_top_level_ratio() -> None:
    doc = common.json_document("t", {"rows": 1}, [{"a": 1}], ["n"], 0.25, "x / y")
    assert doc["ratio"] == 0.25 and doc["ratio_meaning"] == "x / y" and doc["results"] == [{"a": 1}]


def test_report_table_from_a_run(tmp_path: Path) -> None:
    replicated_doc = {
        "benchmark": "replicated",
        "ratio": 0.31,
        "settings": {"rows": 1000},
        "results": [{"MB/s": 3.1, "seconds": 2.0}, {"MB/s": 10.0, "seconds": 0.6}],
        "latency": {
            "rate_rows_s": 500.0,
            "shoal": {
                "accepted": {"n": 3, "p50_ms": 40.0, "p99_ms": 90.0},
                "visible_every_replica": {"n": 3, "p50_ms": 50.0, "p99_ms": 120.0},
                "errors": [],
            },
            "raw": {"produce_consume": {"n": 3, "p50_ms": 10.0, "p99_ms": 30.0}},
        },
        "latency_ratios": {"p99_accepted_over_raw": 3.0, "p99_visible_over_raw": 4.0},
    }
    (tmp_path / "replicated.json").write_text(json.dumps(replicated_doc))
    (tmp_path / "replication.json").write_text(json.dumps({"ratio": 0.1, "cpu_per_row": []}))
    docs, failed = load(tmp_path)
    assert set(docs) == {"replicated", "replication"} and failed == {}
    table = markdown(docs)
    lines = table.splitlines()
    assert lines[0].startswith("| goal |")
    assert "| P1 |" in lines[2] and "0.31 (no)" in lines[2]
    assert any("P4" in line and "3.00" in line for line in lines)
    assert any("| P3 |" in line and "0.10 (yes)" in line for line in lines)


def test_report_names_every_p1_run_when_the_medians_were_compared(tmp_path: Path) -> None:
    doc = {
        "benchmark": "replicated",
        "ratio": 0.4,
        "settings": {"rows": 1000, "repeat": 3},
        "results": [
            {"MB/s": 4.0, "seconds": 2.0, "runs s": [2.5, 2.0, 1.5]},
            {"MB/s": 10.0, "seconds": 0.8, "runs s": [0.8, 0.7, 0.9]},
        ],
    }
    (tmp_path / "replicated.json").write_text(json.dumps(doc))
    line = markdown(*load(tmp_path)).splitlines()[2]
    assert "1,000 rows (median runs): shoal 4.0 MB/s (2.0 s; runs 2.5/2.0/1.5 s)" in line
    assert "raw 10.0 MB/s (0.8 s; runs 0.8/0.7/0.9 s)" in line


def test_report_lists_kafka_bytes_per_phase_without_a_target() -> None:
    kinds = [
        {"kind": "ingest", "bytes/row": 180.0, "by-ref bytes/row": 180.0},
        {"kind": "wal", "bytes/row": 182.0, "by-ref bytes/row": 2.0},
        {"kind": "total", "bytes/row": 362.0, "by-ref bytes/row": 182.0},
    ]
    doc = {"ratio": 0.5, "phases": [{"batch_rows": 800, "kinds": kinds}]}
    line = markdown({"kafka_bytes": doc}).splitlines()[2]
    assert line.startswith("| - |") and "| 0.50 |" in line
    assert "writes of 800 rows: 362 B/row today (ingest 180, wal 182), 182 by reference" in line


def test_latency_batches_spread_over_the_key_space_with_unique_odd_keys() -> None:
    batches = [replicated.latency_rows(i, 50, 4, 8) for i in range(4)]
    keys = [k for b in batches for k in b.column("k").to_pylist()]
    assert len(set(keys)) == 200 and all(k % 2 == 1 for k in keys)
    first = batches[0].column("k").to_pylist()
    assert min(first) < 2**60 and max(first) > 2**63  # one batch reaches every partition


def test_slope_per_min_is_a_least_squares_fit() -> None:
    assert node_memory.slope_per_min([]) is None
    assert node_memory.slope_per_min([(1.0, 5.0)]) is None
    assert node_memory.slope_per_min([(1.0, 5.0), (1.0, 6.0)]) is None  # no time span
    assert node_memory.slope_per_min([(0.0, 10.0), (30.0, 11.0), (60.0, 12.0)]) == pytest.approx(2.0)
    sawtooth = [(float(t), 100.0 + (t % 10)) for t in range(60)]  # flushes: up and down, level overall
    assert abs(node_memory.slope_per_min(sawtooth) or 0.0) < 2.0


def _samples(phase: str, start: float, rss_mib: list[float]) -> list[node_memory.Sample]:
    return [node_memory.Sample(start + i, phase, int(v * node_memory.MIB), 40) for i, v in enumerate(rss_mib)]


def test_node_memory_summary_from_samples() -> None:
    load = [120.0 + i for i in range(10)] + [131.0] + [130.0] * 19  # grows, then level
    samples = (
        _samples("no table", 0, [100.0, 101.0, 100.0])
        + _samples("creating", 3, [110.0])
        + _samples("idle", 4, [150.0, 150.0, 152.0])
        + _samples("load", 7, load)
    )
    r = node_memory.summarize(samples, partitions=50, bound_mib_per_min=2.0)
    assert r["RSS no table MiB"] == pytest.approx(100.0) and r["RSS idle MiB"] == pytest.approx(150.0)
    assert r["per partition MiB"] == pytest.approx(1.0)
    assert r["RSS peak load MiB"] == pytest.approx(131.0) and r["RSS final load MiB"] == pytest.approx(130.0)
    assert r["bounded"] is True and r["last third slope MiB/min"] == pytest.approx(0.0)
    assert r["ratio"] == pytest.approx(131.0 / 150.0)
    leak = node_memory.summarize(
        samples[:7] + _samples("load", 7, [120.0 + i for i in range(30)]), partitions=50, bound_mib_per_min=2.0
    )
    assert leak["bounded"] is False and leak["last third slope MiB/min"] == pytest.approx(60.0)
    empty = node_memory.summarize(samples[:4], partitions=50, bound_mib_per_min=2.0)
    assert empty["RSS idle MiB"] is None and empty["bounded"] is None and empty["ratio"] is None


def test_report_tables_node_memory_against_its_goal(tmp_path: Path) -> None:
    doc = common.json_document(
        "node memory",
        {"partitions": 50, "rate_rows_s": 5000},
        [
            {
                "RSS no table MiB": 150.0,
                "RSS idle MiB": 400.0,
                "per partition MiB": 5.0,
                "RSS peak load MiB": 520.0,
                "RSS final load MiB": 500.0,
                "last third slope MiB/min": 0.4,
                "bounded": True,
            }
        ],
        ratio=1.3,
    )
    (tmp_path / "node_memory.json").write_text(json.dumps(doc))
    (tmp_path / "memory.json").write_text(json.dumps({"ratio": 0.9, "results": [{"rows": 10}]}))
    lines = markdown(*load(tmp_path)).splitlines()
    row = next(line for line in lines if "(`node_memory`)" in line)
    assert "1.30 (yes)" in row and "<= 1.5" in row
    assert "peak 520 MiB" in row and "5.0 MiB/partition" in row and "bounded (last third 0.4 MiB/min)" in row
    assert lines.index(row) == 1 + next(i for i, line in enumerate(lines) if "(`memory`)" in line)


def test_report_tables_the_latency_stages_in_order_without_a_target(tmp_path: Path) -> None:
    stages = [
        {"stage": "delivered", "n": 3, "p50_ms": 62.0, "p99_ms": 90.0},
        {"stage": "WAL produced", "n": 3, "p50_ms": 45.0, "p99_ms": 80.0},
        {"stage": "WAL committed", "n": 3, "p50_ms": 227.0, "p99_ms": 400.0},
        {"stage": "accepted", "n": 3, "p50_ms": 256.0, "p99_ms": 420.0},
    ]
    doc = common.json_document("stages", {"rows_per_batch": 1000}, stages, ratio=256.0 / 62.0)
    (tmp_path / "latency_stages.json").write_text(json.dumps(doc))
    row = next(line for line in markdown(*load(tmp_path)).splitlines() if "(`latency_stages`)" in line)
    assert row.startswith("| P4 |") and "| 4.13 |" in row
    assert (
        "1,000-row batches, ms p50/p99: delivered 62/90, WAL produced 45/80, WAL committed 227/400, accepted 256/420"
        in row
    )


def test_a_failed_benchmark_keeps_its_line_and_fails_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``make bench`` ignores a failing benchmark so the others run: its empty or cut JSON must
    show as a failed line, and ``bench.report`` exit 1 after printing the table."""
    from bench import report

    (tmp_path / "replication.json").write_text(json.dumps({"ratio": 0.1, "cpu_per_row": []}))
    (tmp_path / "latency_stages.json").write_text("")
    (tmp_path / "kafka_bytes.json").write_text('{"ratio": 0.6')
    (tmp_path / "odd.json").write_text("[1, 2]")
    docs, failed = load(tmp_path)
    assert set(docs) == {"replication"}
    assert set(failed) == {"latency_stages", "kafka_bytes", "odd"}
    assert "failed before writing its JSON" in failed["latency_stages"]
    lines = markdown(docs, failed).splitlines()
    assert any("(`latency_stages`)" in line and "| failed |" in line for line in lines)
    assert any("(`kafka_bytes`)" in line and "cut short or malformed" in line for line in lines)
    assert any("(`replication`)" in line and "0.10 (yes)" in line for line in lines)
    with pytest.raises(SystemExit) as exit_info:
        report.main([str(tmp_path)])
    assert exit_info.value.code == 1
    out, err = capsys.readouterr()
    assert "| failed |" in out and "bench.report: latency_stages:" in err
