"""The benchmarks' JSON shape and ratio arithmetic (pure functions; no servers, no timing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import common, replicated
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
    (tmp_path / "broken.json").write_text("{not json")
    docs = load(tmp_path)
    assert set(docs) == {"replicated", "replication"}
    table = markdown(docs)
    lines = table.splitlines()
    assert lines[0].startswith("| goal |")
    assert "| P1 |" in lines[2] and "0.31 (no)" in lines[2]
    assert any("P4" in line and "3.00" in line for line in lines)
    assert any("| P3 |" in line and "0.10 (yes)" in line for line in lines)


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
