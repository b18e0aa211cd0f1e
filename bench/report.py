"""The README's performance table, generated from one ``make bench`` run's JSON files.

``make bench`` writes one ``<name>.json`` per benchmark (each script's ``--output json``, whose
top-level ``ratio`` is its one number against its baseline) into a directory; this prints a
markdown table of them, with the goals of the performance issue where there is one.

    python -m bench.report build/bench            # markdown on stdout

A benchmark whose file holds no JSON object (it failed) keeps its line, marked ``failed``, and the
command exits 1 after printing the table, so ``make bench`` fails when any benchmark did.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Goal:
    label: str
    what: str
    at_least: float | None = None
    at_most: float | None = None

    def text(self) -> str:
        if self.at_least is not None:
            return f">= {self.at_least:g}"
        if self.at_most is not None:
            return f"<= {self.at_most:g}"
        return "-"

    def met(self, ratio: float | None) -> str:
        if ratio is None or (self.at_least is None and self.at_most is None):
            return ""
        if self.at_least is not None:
            return "yes" if ratio >= self.at_least else "no"
        assert self.at_most is not None
        return "yes" if ratio <= self.at_most else "no"


# node_memory's bound: the issue asks that a node's RSS stay bounded under load (reported in the
# row's details: the slope over the last third of the load). Its ratio bounds what a steady load
# adds on top of the fixed cost of leading the partitions: at make bench's 5,000 rows/s and the
# default 10 s flush age the memtables hold ~6 MiB of Arrow data (a flush's merge about 3x that,
# see `memory`), so half the idle RSS (1.5x) leaves room for Kafka client queues and allocator slack.
GOALS: dict[str, Goal] = {
    "replicated": Goal("P1", "RF 3 replicated write MB/s / raw acks=all produce + 3 consumers", at_least=0.5),
    "latency_stages": Goal("P4", "write -> accepted p50 / write -> acks=all delivered p50, one batch at a time"),
    "spark_sink": Goal("P5", "Spark sink rows/s / Spark to Parquet rows/s", at_least=0.5),
    "compaction_small": Goal("P6", "compaction MB/s / plain pyarrow MB/s, small minors", at_least=0.3),
    "compaction_large": Goal("P6", "compaction MB/s / plain pyarrow MB/s, larger minors", at_least=0.7),
    "replication": Goal("P3", "follower with fresh reads CPU/row / leader CPU/row", at_most=0.2),
    "memory": Goal("mem", "memtable RSS growth / Arrow size of its rows", at_most=2.0),
    "node_memory": Goal("mem", "node peak RSS under load / idle RSS, leading 50 partitions", at_most=1.5),
    "major_check": Goal("mem", "a leader's major check: Arrow peak in key ranges / all at once"),
    "write_path": Goal("-", "write path RF 1 MB/s / raw produce + consume"),
    "fast_forward": Goal("-", "row-based apply time / fast-forward time"),
    "split": Goal("-", "re-insert time / split time"),
    "bootstrap": Goal("-", "WAL replay time / bootstrap time"),
    # an evaluation, not a goal of the issue: the figures behind docs/wal-by-reference.md
    "kafka_bytes": Goal("-", "Kafka bytes/row at RF 3, WAL records by reference / today"),
}
ORDER = tuple(GOALS)


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def _latency_rows(doc: dict[str, Any]) -> list[str]:
    """P4 lines of the replicated benchmark (p50/p99 in ms)."""
    lat = doc.get("latency") or {}
    if not lat:
        return []
    s, r = lat["shoal"], lat["raw"]["produce_consume"]
    acc, vis = s["accepted"], s["visible_every_replica"]
    rate = f"{lat['rate_rows_s']:,.0f} rows/s"
    ratios = doc.get("latency_ratios") or {}
    return [
        f"| P4 | write -> accepted (`sync()`) p99 / raw produce->consume p99, at {rate} | <= 2 | "
        f"{_fmt(ratios.get('p99_accepted_over_raw'))} | "
        f"p50/p99 ms: shoal {_fmt(acc['p50_ms'], 0)}/{_fmt(acc['p99_ms'], 0)}, "
        f"raw {_fmt(r['p50_ms'], 0)}/{_fmt(r['p99_ms'], 0)} |",
        f"| P4 | write -> visible on every replica's scan p99 / raw p99, at {rate} | - | "
        f"{_fmt(ratios.get('p99_visible_over_raw'))} | "
        f"p50/p99 ms: {_fmt(vis['p50_ms'], 0)}/{_fmt(vis['p99_ms'], 0)} |",
    ]


def _detail(name: str, doc: dict[str, Any]) -> str:
    """One short cell of what was measured (sizes, seconds)."""
    s = doc.get("settings") or {}
    res = doc.get("results") or []
    if name in ("replicated", "write_path") and len(res) >= 2:
        shoal, raw = res[0], res[1]

        def runs(r: dict[str, Any]) -> str:
            times = r.get("runs s") or []
            return f"; runs {'/'.join(_fmt(t, 1) for t in times)} s" if len(times) > 1 else ""

        medians = " (median runs)" if len(shoal.get("runs s") or []) > 1 else ""
        return (
            f"{s.get('rows', 0):,} rows{medians}: shoal {_fmt(shoal.get('MB/s'), 1)} MB/s "
            f"({_fmt(shoal.get('seconds'), 1)} s{runs(shoal)}), "
            f"raw {_fmt(raw.get('MB/s'), 1)} MB/s ({_fmt(raw.get('seconds'), 1)} s{runs(raw)})"
        )
    if name == "latency_stages" and res:
        return f"{s.get('rows_per_batch', 0):,}-row batches, ms p50/p99: " + ", ".join(
            f"{r.get('stage')} {_fmt(r.get('p50_ms'), 0)}/{_fmt(r.get('p99_ms'), 0)}" for r in res
        )
    if name == "spark_sink" and len(res) >= 2:
        return f"{s.get('rows', 0):,} rows: sink {_fmt(res[0]['seconds'], 1)} s, Parquet {_fmt(res[1]['seconds'], 1)} s"
    if name.startswith("compaction") and len(res) >= 2:
        runs = f" (medians of {s['repeat']} runs)" if s.get("repeat") else ""
        path = f", {s['path']}" if s.get("path") else ""
        return (
            f"{_fmt(res[0]['input MB'], 1)} MB in {res[0]['segments']} segments{path}: service "
            f"{_fmt(res[0]['seconds'], 2)} s, pyarrow {_fmt(res[1]['seconds'], 2)} s{runs}"
        )
    if name == "replication":
        cpu = {r["role"]: r["CPU us/row"] for r in doc.get("cpu_per_row") or []}
        return ", ".join(f"{k} {_fmt(v)} us/row" for k, v in cpu.items())
    if name == "split":
        return f"{doc.get('rows', 0):,} rows"
    if name == "bootstrap":
        return f"{s.get('rows', 0):,} rows"
    if name == "kafka_bytes":
        return "; ".join(_kafka_bytes_phase(ph) for ph in doc.get("phases") or [])
    if name == "memory" and res:
        r = res[0]
        return (
            f"{r.get('rows', 0):,} rows: Arrow {_fmt(r.get('arrow MiB'), 0)} MiB, "
            f"RSS +{_fmt(r.get('RSS growth MiB'), 0)} MiB, "
            f"+{_fmt(r.get('peak with merge MiB'), 0)} MiB with a flush's merge"
        )
    if name == "node_memory" and res:
        r = res[0]
        bounded = {True: "bounded", False: "NOT bounded"}.get(r.get("bounded"), "bounded: -")
        return (
            f"{s.get('partitions', 0)} partitions at {s.get('rate_rows_s', 0):,} rows/s: "
            f"RSS {_fmt(r.get('RSS no table MiB'), 0)} MiB without a table, "
            f"idle {_fmt(r.get('RSS idle MiB'), 0)} MiB ({_fmt(r.get('per partition MiB'), 1)} MiB/partition), "
            f"peak {_fmt(r.get('RSS peak load MiB'), 0)} MiB, final {_fmt(r.get('RSS final load MiB'), 0)} MiB; "
            f"{bounded} (last third {_fmt(r.get('last third slope MiB/min'), 1)} MiB/min)"
            + (f"; SIGTERM to exit {_fmt(r.get('stop s'), 1)} s" if r.get("stop s") is not None else "")
        )
    if name == "major_check" and len(res) >= 2:
        whole, ranges = res[:2]
        return (
            f"{whole.get('rows of all files', 0):,} rows of segments ({s.get('key_type')} key): all at once "
            f"{_fmt(whole.get('seconds'))} s, Arrow {_fmt(whole.get('Arrow peak MiB'), 0)} MiB, "
            f"RSS +{_fmt(whole.get('peak RSS growth MiB'), 0)} MiB; in {ranges.get('passes')} key range(s) "
            f"{_fmt(ranges.get('seconds'))} s, Arrow {_fmt(ranges.get('Arrow peak MiB'), 0)} MiB, "
            f"RSS +{_fmt(ranges.get('peak RSS growth MiB'), 0)} MiB"
        )
    if name == "fast_forward" and res:
        return f"{res[-1].get('rows', 0):,}-row segment"
    return ""


def _kafka_bytes_phase(phase: dict[str, Any]) -> str:
    """Bytes per row (all replicas) of one ``kafka_bytes`` phase: today by kind, then by reference."""
    kinds = {k["kind"]: k for k in phase.get("kinds") or []}
    total = kinds.pop("total", {})
    parts = ", ".join(f"{name} {_fmt(k.get('bytes/row'), 0)}" for name, k in kinds.items())
    return (
        f"writes of {phase.get('batch_rows', 0):,} rows: {_fmt(total.get('bytes/row'), 0)} B/row today "
        f"({parts}), {_fmt(total.get('by-ref bytes/row'), 0)} by reference"
    )


def markdown(docs: dict[str, dict[str, Any]], failed: Mapping[str, str] | None = None) -> str:
    """The table: one line per benchmark (goal, measured ratio, whether met, details), P4 under P1;
    a benchmark in ``failed`` ({name: why}) gets its line with ``failed`` as its measure."""
    lines = [
        "| goal | ratio (measured / baseline) | target | measured | details |",
        "|---|---|---|---|---|",
    ]
    failed = dict(failed or {})
    names = [n for n in ORDER if n in docs or n in failed] + sorted(n for n in {*docs, *failed} if n not in GOALS)
    for name in names:
        goal = GOALS.get(name, Goal("-", name))
        if name not in docs:
            lines.append(f"| {goal.label} | {goal.what} (`{name}`) | {goal.text()} | failed | {failed[name]} |")
            continue
        doc = docs[name]
        ratio = doc.get("ratio")
        met = goal.met(ratio)
        measured = _fmt(ratio) + (f" ({met})" if met else "")
        what = f"{goal.what} (`{name}`)"
        lines.append(f"| {goal.label} | {what} | {goal.text()} | {measured} | {_detail(name, doc)} |")
        if name == "replicated":
            lines += _latency_rows(doc)
    return "\n".join(lines) + "\n"


def load(directory: Path) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(every ``<name>.json`` in ``directory`` that holds a JSON object, {name: why not} for the rest).

    ``make bench`` ignores a failing benchmark so that the others still run; its file is then empty
    (or cut short), and the report must say so rather than drop its row."""
    docs: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            text = path.read_text()
        except OSError as exc:
            failed[path.stem] = f"unreadable: {exc.strerror or exc}"
            continue
        if not text.strip():
            failed[path.stem] = "no result: the benchmark failed before writing its JSON (see its output)"
            continue
        try:
            doc = json.loads(text)
        except ValueError as exc:
            failed[path.stem] = f"no result: its JSON is cut short or malformed ({exc})"
            continue
        if isinstance(doc, dict):
            docs[path.stem] = doc
        else:
            failed[path.stem] = f"no result: its JSON is a {type(doc).__name__}, not an object"
    return docs, failed


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory", type=Path, help="where `make bench` wrote the JSON files")
    args = p.parse_args(argv)
    docs, failed = load(args.directory)
    if not docs and not failed:
        raise SystemExit(f"no benchmark JSON in {args.directory}")
    sys.stdout.write(markdown(docs, failed))
    for name, why in failed.items():
        print(f"bench.report: {name}: {why}", file=sys.stderr)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
