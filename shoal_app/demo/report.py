"""How the full demo talks: numbered step headers and progress lines while it runs, a summary at the end.

Progress goes to stderr (so ``--output json`` leaves stdout to the one summary object); the
summary for people goes to stdout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from shoal_app.demo.observe import Lag

Echo = Callable[[str], None]


def _n(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


class Console:
    def __init__(self, echo: Echo, steps: int) -> None:
        self.echo = echo
        self.steps = steps
        self.started = time.monotonic()
        self._step = 0

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def step(self, title: str) -> None:
        self._step += 1
        self.echo(f"[{self._step}/{self.steps}] {title}")

    def info(self, text: str) -> None:
        self.echo(f"      {text}")

    def warn(self, text: str) -> None:
        self.echo(f"      !! {text}")

    def progress(
        self, generated: int, acked: int, in_shoal: int | None, per_node: dict[str, int | None], lag: Lag | None
    ) -> None:
        """Two lines: rows (generated, in shoal, held per node), then lag and what each replica has not acked."""
        nodes = ", ".join(f"{s} {_n(v)}" for s, v in per_node.items()) or "n/a"
        self.echo(
            f"      [{self.elapsed():5.0f}s] generated {generated:,} (acked by Kafka {acked:,}) | rows in shoal "
            f"{_n(in_shoal)} | rows held per node: {nodes}"
        )
        if lag is None:
            self.echo("              lag: n/a (the monitor has no snapshot yet)")
            return
        servers = sorted(set(lag.wal_lag_records) | set(lag.unacked_segments))
        behind = ", ".join(
            f"{s} {lag.wal_lag_records.get(s, 0):,} WAL records / {lag.unacked_segments.get(s, 0)} segments"
            for s in servers
        )
        self.echo(
            f"              lag: spark ingest {_n(lag.spark_lag_records)} records, leaders' ingest "
            f"{lag.ingest_lag_records:,} | not yet acked: {behind or 'nothing'} | monitor status {lag.status}"
        )


def summary_lines(s: dict[str, Any]) -> list[str]:
    """The end-of-demo summary for people."""
    gen, ing, fo, rs, comp, ver, content = (
        s["generator"],
        s["ingest"],
        s["failover"],
        s["restart"],
        s["compaction"],
        s["verify"],
        s["content"],
    )
    out = [f"shoal demo {'PASSED' if s['ok'] else 'FAILED'} in {s['seconds']:.0f}s  (data dir {s['data_dir']})"]
    out.append(
        f"  cluster       {s['cluster']['brokers']} Kafka brokers, {s['cluster']['nodes']} storage nodes, "
        f"table {s['table']}: {s['partitions']} partitions x RF {s['replication_factor']}"
    )
    out.append(
        f"  generated     {gen['produced']:,} events to topic {s['source_topic']}, {gen['acknowledged']:,} "
        f"acknowledged, {gen['failed']} failed"
    )
    out.append(
        f"  ingested      {_n(ing.get('rows_in_shoal'))} rows in shoal by Spark query {ing.get('query')} "
        f"({ing.get('deadletter_records', 0)} records in deadletter)"
    )
    if fo.get("happened"):
        for p in fo["partitions"]:
            out.append(
                f"  failover      partition {p['partition_id'][:12]}: {p['old_leader']} (epoch {p['old_epoch']}, "
                f"killed -9) -> {p['new_leader']} (epoch {p['new_epoch']}) in {fo['seconds']:.1f}s"
            )
    else:
        out.append(f"  failover      DID NOT HAPPEN ({fo.get('error', 'no leader change seen')})")
    if rs.get("pid"):
        out.append(
            f"  restarted     {rs['server_id']} as pid {rs['pid']} (same command line: {rs['same_command_line']}),"
            f" registered in {rs['seconds']:.1f}s"
        )
    else:
        out.append(f"  restarted     NO ({rs.get('error', '?')})")
    out.append(
        f"  compaction    {comp.get('committed', 0)} major(s) committed of {len(comp.get('majors', []))} computed"
        + (f" ({comp['error']})" if comp.get("error") else "")
    )
    out.append(
        f"  verify        {'every replica agrees' if ver.get('ok') else 'MISMATCH or error'} "
        f"(shoal verify exit {ver.get('exit_code')}, {ver.get('attempts', 0)} attempt(s))"
    )
    for p in ver.get("partitions", []):
        rows = ", ".join(f"{r['server_id']} {_n(r.get('row_count'))}" for r in p["replicas"])
        out.append(
            f"                partition {p['partition_id'][:12]}: {'agree' if p['agree'] else 'DIFFER'}, "
            f"WAL chains {'ok' if p['wal_chains_ok'] else 'BROKEN'}; rows {rows}"
        )
    out.append(
        f"  content       {content.get('rows', 0):,} rows for {content.get('acknowledged', 0):,} acknowledged "
        f"events: missing {content.get('missing', '?')}, unexpected {content.get('unexpected', '?')}, "
        f"wrong content {content.get('wrong_content', '?')}"
    )
    for err in s.get("errors", []):
        out.append(f"  error         {err}")
    mon = s.get("monitor") or {}
    out.append("where to look:")
    if mon.get("url"):
        state = "running" if s.get("kept_running") else "stopped with the demo"
        out.append(f"  monitor       {mon['url']}/  ({state}; JSON at /api/snapshot, Prometheus at /metrics)")
    out.append(f"  logs          {s['data_dir']}/nodes/node-*/node.log, {s['data_dir']}/kafka-*/, monitor/monitor.log")
    return out


def explore_lines(data_dir: str, table: str, monitor_url: str | None) -> list[str]:
    d = data_dir
    lines = [
        "the cluster is left running. Explore it:",
        f"  export SHOAL_DATA_DIR={d}",
        "  shoal status",
        f"  shoal table describe {table}",
        f"  shoal scan {table} | head",
        f"  shoal offsets {table}",
        f"  shoal verify {table}",
    ]
    if monitor_url:
        lines.append(f"  open {monitor_url}/ (the monitor)")
    lines.append("the event generator stopped with the demo; the monitor and `shoal spark ingest` still run.")
    lines.append(f"stop everything with: shoal demo --stop --data-dir {d}")
    return lines
