"""``shoal offsets [TABLE]``: replication indexes, lag and status of every channel (DESIGN.md section 3).

For each partition: leader and epoch; the ingest topic (accepted-by-leader index and lag); per WAL
channel the Append and Tail indexes and, per replica, Consume and Ack indexes with lag in records,
seconds and (estimated) bytes and a Burrow-style status; per segments channel which replicas acked
each recent segment; and every Spark ingest query's lag. ``--output json`` prints the snapshot
(:class:`monitor.models.Snapshot`; ``--watch``: one JSON document per line, per poll).

The text form stays hand-laid-out rather than a rich table: it is a tree (partition, channel,
replica, segment) like ``kafka-consumer-groups --describe``, one grep-able line per node.

A status needs a window of polls: a single run sees only what one poll can prove (ERR: truncated
past an Ack, a recreated topic; REWIND), unless ``--history-dir`` points at a window kept by an
earlier run or by ``shoal monitor``. ``--watch`` polls every ``--interval`` seconds.

Exit status: 0 when the last poll's status is below ``--fail-on`` (default ``stall``: WARN, a lag
still growing, passes; STALL, STOP, REWIND and ERR fail), 1 when it is at or above it or when no
poll could be made (then nothing is printed on stdout), 2 for refused options.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from metadata.client import MetadataClient
from monitor.collector import Collector
from monitor.config import MonitorConfig
from monitor.models import Problem, ReaderLag, Snapshot
from monitor.status import Status, worst
from monitor.topology import read_topology
from shoal.errors import ShoalError
from shoal_app.cli.connection import connection_options, metadata_config
from shoal_app.cli.context import emit, output_option
from shoal_app.cli.params import TABLE_NAME, FiniteFloatRange
from shoal_app.cli.replication import topic_problems


@contextlib.contextmanager
def open_collector(
    conn: dict[str, Any],
    table: str | None,
    *,
    interval_s: float,
    window_samples: int,
    warn_samples: int | None = None,
    history_dir: Path | None,
) -> Iterator[Collector]:
    """A collector over the cluster named by ``conn`` (options > env > cluster file), closed on exit."""
    try:
        meta = metadata_config(conn)
        config = MonitorConfig(
            kafka=meta.kafka,
            topic_prefix=meta.topic_prefix,
            interval_s=interval_s,
            window_samples=window_samples,
            warn_samples=warn_samples,
            history_dir=history_dir,
        )
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    try:
        client = MetadataClient(meta)
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    try:
        if table is not None:
            try:
                client.coordinator.head(table)  # an unknown table is an error now, not an empty report
            except ShoalError as exc:
                raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
        collector = Collector(config, lambda: read_topology(config.topics, client.coordinator, table))
        try:
            yield collector
        finally:
            collector.close()
    finally:
        client.close()


def _num(v: int | None) -> str:
    return "-" if v is None else str(v)


def _lag(r: ReaderLag) -> str:
    parts = [f"lag {r.lag_records}"]
    if r.lag_seconds is not None:
        parts.append(f"{r.lag_seconds:.1f}s")
    if r.lag_bytes_estimate is not None:
        parts.append(f"~{r.lag_bytes_estimate} B")
    return ", ".join(parts)


def format_table(snap: Snapshot) -> str:
    """The snapshot for people, one block per partition (like ``kafka-consumer-groups --describe``)."""
    out = [f"cluster {snap.cluster_id}  status {snap.status.value}"]
    for t in snap.tables:
        for p in t.partitions:
            lead = p.leader
            who = "none" if lead is None else f"{lead.server_id}#{lead.placement_id}"
            if lead is not None and not lead.alive:
                who += " (not alive)"
            out.append(
                f"table {t.table} partition {p.partition_id}  leader {who} epoch {p.epoch} "
                f"(leader changes {p.leader_changes})  {p.status.value}"
            )
            ing = p.ingest
            if ing.exists:
                out.append(
                    f"  ingest   accepted {_num(ing.accepted_index)} / end {ing.log_end}  {_lag(ing)}  "
                    f"{ing.status.value}  {ing.reason}"
                )
            else:
                out.append(f"  ingest   no topic  {ing.status.value}")
            for c in p.wal:
                name = f"wal#{c.owner.placement_id} ({c.owner.server_id}"
                name += ", leader)" if c.is_leader_channel else ")"
                if not c.exists:
                    if c.status is not Status.OK:
                        out.append(f"  {name}  {c.status.value}  {c.reason}")
                    continue
                out.append(f"  {name}  append {c.append_index}  tail {c.tail_index}")
                for r in c.replicas:
                    out.append(
                        f"    {r.server_id}#{r.placement_id}  ack {_num(r.ack_index)}  consume "
                        f"{_num(r.consume_index)}  {_lag(r)}  {r.status.value}  {r.reason}"
                    )
            for sc in p.segments:
                if not sc.exists:
                    if sc.status is not Status.OK:
                        out.append(f"  segments#{sc.owner.placement_id}  {sc.status.value}  {sc.reason}")
                    continue
                out.append(
                    f"  segments#{sc.owner.placement_id} ({sc.owner.server_id})  {sc.manifests} segments, "
                    f"{sc.majors} major, {sc.minors_awaiting_compaction} minors awaiting compaction"
                )
                for sr in sc.replicas:
                    out.append(
                        f"    {sr.server_id}#{sr.placement_id}  ack {_num(sr.ack_index)}  unacked segments "
                        f"{sr.unacked_segments}  {_lag(sr)}  {sr.status.value}  {sr.reason}"
                    )
                for s in sc.recent:
                    kind = "major" if s.is_major else "minor"
                    acked = ", ".join(f"#{a}" for a in s.acked_by) or "nobody"
                    out.append(f"      @{s.offset} {s.segment_id} {kind}  acked by {acked}")
    groups = [(f"spark query {q.query}", q.lag_records, q.status, q.partitions) for q in snap.spark_queries]
    groups += [(f"compaction intake {g.group}", g.lag_records, g.status, g.partitions) for g in snap.compaction_intake]
    for name, lag, status, partitions in groups:
        out.append(f"{name}  lag {lag}  {status.value}")
        for pp in partitions:
            out.append(
                f"  {pp.topic}[{pp.partition}]  committed {_num(pp.committed)} / end {pp.log_end}  "
                f"{_lag(pp)}  {pp.status.value}"
            )
    if snap.problems:
        out.append("problems:")
        out += [f"  {pr.status.value:<6} {pr.where}: {pr.reason}" for pr in snap.problems]
    return "\n".join(out)


FAIL_ON = ("warn", "stall", "stop", "rewind", "err", "never")
"""``--fail-on`` choices: a status name (that status or a worse one fails) or ``never``."""


def fails(status: Status, fail_on: str) -> bool:
    """Whether ``status`` is at or above the ``--fail-on`` threshold."""
    if fail_on.lower() == "never":
        return False
    return status.severity >= Status[fail_on.upper()].severity


@click.command("offsets")
@click.argument("table", required=False, type=TABLE_NAME)
@click.option("--watch", is_flag=True, help="Poll again every --interval seconds until interrupted.")
@click.option(
    "--interval", type=FiniteFloatRange(0.05, 3600), default=5.0, show_default=True, help="Seconds between polls."
)
@click.option(
    "--window", type=click.IntRange(2, 10_000), default=12, show_default=True, help="Polls in the status window."
)
@click.option(
    "--warn-samples",
    type=click.IntRange(1, 10_000),
    default=None,
    help="Polls of growing lag before WARN (default half the window).",
)
@click.option("--count", type=click.IntRange(1), default=None, help="With --watch: stop after this many polls.")
@click.option(
    "--history-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep (and reuse) the window in DIR/monitor-history.json, e.g. the one of `shoal monitor`.",
)
@click.option(
    "--fail-on",
    type=click.Choice(FAIL_ON, case_sensitive=False),
    default="stall",
    show_default=True,
    help="Exit 1 when the last poll's status is this or worse ('never': exit 0 whatever it is).",
)
@output_option
@connection_options
def offsets_command(
    table: str | None,
    watch: bool,
    interval: float,
    window: int,
    warn_samples: int | None,
    count: int | None,
    history_dir: Path | None,
    fail_on: str,
    output: str,
    **conn: Any,
) -> None:
    """Replication indexes, lag and status of every channel of TABLE (or of every table).

    Exits 1 when the last poll's status is --fail-on or worse, or when Kafka or ZooKeeper cannot
    be polled."""
    if warn_samples is not None and warn_samples > window:
        raise click.BadParameter(f"must be at most --window ({window})", param_hint="--warn-samples")
    polls = (count or 0) if watch else 1
    with open_collector(
        conn, table, interval_s=interval, window_samples=window, warn_samples=warn_samples, history_dir=history_dir
    ) as collector:
        n = 0
        while True:
            started = time.monotonic()
            try:
                snap = with_topic_problems(collector.poll(), collector)
            except ShoalError as exc:
                raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
            n += 1
            if output == "json":
                emit(snap, indent=None if watch else 2)
            else:
                if watch:
                    click.echo(f"--- poll {n} at {time.strftime('%H:%M:%S')}")
                click.echo(format_table(snap))
            if not watch or (polls and n >= polls):
                break
            try:
                time.sleep(max(0.0, interval - (time.monotonic() - started)))
            except KeyboardInterrupt:
                break
    if fails(snap.status, fail_on):
        sys.exit(1)


def with_topic_problems(snap: Snapshot, collector: Collector) -> Snapshot:
    """``snap`` with a problem per shoal topic below the topic policy (WARN), under-replicated
    (WARN) or without a leader (ERR)."""
    found = [
        Problem(where=f"topic {h.topic}", status=Status.ERR if h.leaderless_partitions else Status.WARN, reason=reason)
        for h in topic_problems(collector.config.kafka, collector.config.topic_prefix)
        for reason in h.problems
    ]
    if not found:
        return snap
    return snap.model_copy(
        update={"problems": [*snap.problems, *found], "status": worst([snap.status, *(p.status for p in found)])}
    )


__all__ = ["FAIL_ON", "fails", "format_table", "offsets_command", "open_collector"]
