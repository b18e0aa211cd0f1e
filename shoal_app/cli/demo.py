"""`shoal demo`: the full demo, or with --roundtrip the foundation round trip.

The full demo starts its own cluster in ``--data-dir`` (default ~/.shoal/demo), shows ingest,
replication, a leader killed and the failover, a restart, a compaction and ``shoal verify``, and
stops everything it started (see :mod:`shoal_app.demo.full`). Exit code 0 only if everything held.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import click

from shoal.cluster_file import ClusterInfo
from shoal.errors import ClusterFileError, ShoalError
from shoal_app.cli.context import CliContext, console, emit, output_option, progress, show
from shoal_app.cli.models import DemoSummary, Roundtrip, RoundtripStep, Stopped
from shoal_app.cli.params import FiniteFloatRange
from shoal_app.demo.report import fmt_count
from shoal_app.runtime import launcher
from shoal_app.runtime.extras import require_extra

DEFAULT_DEMO_DIR = Path.home() / ".shoal" / "demo"


def _running_cluster(obj: CliContext) -> ClusterInfo | None:
    try:
        info = obj.cluster()
    except ClusterFileError:
        return None
    return info if launcher.status(info)["healthy"] else None


def _echo_err(line: str) -> None:
    console(stderr=True).print(line)


@click.command("demo")
@click.option("--roundtrip", is_flag=True, help="Only the foundation round trip (ZooKeeper CAS, Kafka txn, Spark).")
@click.option("--stop", "stop_kept", is_flag=True, help="Stop a demo left running by --keep-running, and exit.")
@click.option(
    "--data-dir",
    "demo_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the demo cluster lives (default ~/.shoal/demo; emptied and re-made at each run).",
)
@click.option(
    "--events",
    type=click.IntRange(10, 10_000_000),
    default=20_000,
    show_default=True,
    help="Events the generator writes.",
)
@click.option(
    "--rate", type=FiniteFloatRange(1, 1_000_000), default=400.0, show_default=True, help="Events per second."
)
@click.option(
    "--partitions",
    type=click.IntRange(2, 64),
    default=4,
    show_default=True,
    help="Partitions of the demo table (split points on event_id).",
)
@click.option(
    "--kill-at",
    type=FiniteFloatRange(0.01, 0.99),
    default=0.4,
    show_default=True,
    help="Kill a leader once this fraction of the events is in shoal (or the generator is nearly done).",
)
@click.option(
    "--monitor-port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port of `shoal monitor` (0: a free port).",
)
@click.option(
    "--keep-running", is_flag=True, help="Leave the cluster, monitor and ingest job running, to explore (stop: --stop)."
)
@click.option("--spark-master", default="local[2]", show_default=True, help="Spark master URL.")
@click.option(
    "--secure",
    is_flag=True,
    help="Run it on a secured cluster (`shoal up --secure`: TLS, SCRAM users and ACLs, authenticated "
    "ZooKeeper and Flight); every client, the Spark jobs and the monitor use the cluster file's security "
    "settings (see the README's security section).",
)
@output_option
@click.pass_obj
def demo_command(
    obj: CliContext,
    roundtrip: bool,
    stop_kept: bool,
    demo_dir: Path | None,
    events: int,
    rate: float,
    partitions: int,
    kill_at: float,
    monitor_port: int,
    keep_running: bool,
    spark_master: str,
    secure: bool,
    output: str,
) -> None:
    """Run the full demo: a 3-node cluster, Spark ingest, a leader killed, failover, compaction, verify.

    Prints progress to stderr and a summary to stdout (--output json: one object). Exit code 0 only if
    the failover happened, a compaction was committed, `shoal verify` agreed and every acknowledged
    event is in shoal exactly once. Everything it starts is stopped at the end, on failure and on
    Ctrl-C/SIGTERM, unless --keep-running.
    """
    if roundtrip:
        if secure:
            raise click.UsageError("--secure runs the full demo; the --roundtrip check runs on a plain cluster")
        _roundtrip(obj, keep_running, spark_master, output)
        return
    from shoal_app.demo import full
    from shoal_app.demo.processes import check_data_dir

    data_dir = (demo_dir or DEFAULT_DEMO_DIR).expanduser().absolute()
    if stop_kept:
        stopped = full.stop_kept(data_dir, progress)
        if output == "json":
            emit(Stopped(stopped=stopped))
        else:
            show("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return
    check_data_dir(data_dir)  # a foreign or still-running dir is refused before anything starts
    config = full.FullDemoConfig(
        data_dir=data_dir,
        cache_dir=obj.cache_dir,
        events=events,
        rate_per_s=rate,
        partitions=partitions,
        kill_at=kill_at,
        spark_master=spark_master,
        monitor_port=monitor_port,
        keep_running=keep_running,
        secure=secure,
    )
    try:
        summary_json = full.run(config, _echo_err)
    except (KeyboardInterrupt, full.DemoInterrupted):
        click.echo("interrupted: everything the demo started was stopped", err=True)
        sys.exit(130)
    summary = DemoSummary.model_validate(summary_json)
    if output == "json":
        emit(summary)
    else:
        show(*summary_lines(summary))
        if summary.kept_running:
            show(*explore_lines(summary.data_dir, summary.table, summary.monitor.url))
    if not summary.ok:
        sys.exit(1)


def _roundtrip(obj: CliContext, keep_running: bool, spark_master: str, output: str) -> None:
    """The foundation round trip on the embedded local cluster: ZooKeeper CAS, a Kafka transaction, Spark."""
    require_extra("spark", "shoal demo --roundtrip")
    from shoal_app.demo import roundtrip
    from spark_jobs.session import SparkConfig, build_session

    t0 = time.monotonic()
    info = _running_cluster(obj)
    started_here = info is None
    if info is None:
        click.echo("starting the local cluster (ZooKeeper + Kafka)...", err=True)
        info = launcher.up(
            launcher.LocalClusterConfig(data_dir=obj.data_dir, cache_dir=obj.cache_dir), progress=progress
        )
    else:
        click.echo(f"using the running cluster at {info.bootstrap_servers}", err=True)
    run_id = uuid.uuid4().hex[:10]
    topic = f"shoal-demo-{run_id}"
    results: list[roundtrip.StepResult] = []
    spark = None
    try:
        click.echo("1/3 ZooKeeper compare-and-swap...", err=True)
        results.append(roundtrip.zookeeper_cas(info.zk_connect, run_id))
        click.echo("2/3 Kafka transaction...", err=True)
        results.append(roundtrip.kafka_transaction(info.bootstrap_servers, topic, run_id))
        click.echo("3/3 Spark Structured Streaming read of the topic (starting Spark)...", err=True)
        spark = build_session(SparkConfig(cache_dir=obj.cache_dir, master=spark_master, app_name="shoal-demo"))
        results.append(roundtrip.spark_streaming_read(spark, info.bootstrap_servers, topic))
        roundtrip.cleanup_topic(info.bootstrap_servers, topic)
    finally:
        if spark is not None:
            spark.stop()
        if started_here and not keep_running:
            click.echo("stopping the local cluster...", err=True)
            launcher.down(obj.cluster_file_path, progress=progress)
    ok = all(r.ok for r in results)
    if output == "json":
        steps = [RoundtripStep(name=r.name, ok=r.ok, seconds=round(r.seconds, 2), **r.details) for r in results]
        emit(Roundtrip(ok=ok, seconds=round(time.monotonic() - t0, 1), steps=steps))
    else:
        for r in results:
            click.echo(f"[{'ok' if r.ok else 'FAILED'}] {r.name} ({r.seconds:.1f}s)")
            for k, v in r.details.items():
                click.echo(f"       {k}: {v}")
        click.echo(f"round trip {'passed' if ok else 'FAILED'} in {time.monotonic() - t0:.1f}s")
        if started_here and keep_running:
            click.echo(f"cluster left running: {info.bootstrap_servers} (stop it with `shoal down`)")
    if not ok:
        raise ShoalError("the round trip failed; see the steps above")


def summary_lines(s: DemoSummary) -> list[str]:
    """The end-of-demo summary for people."""
    gen, ing, fo, rs, comp, ver, content = (
        s.generator,
        s.ingest,
        s.failover,
        s.restart,
        s.compaction,
        s.verify,
        s.content,
    )
    out = [f"shoal demo {'PASSED' if s.ok else 'FAILED'} in {s.seconds:.0f}s  (data dir {s.data_dir})"]
    out.append(
        f"  cluster       {s.cluster.brokers} Kafka brokers, {s.cluster.nodes} storage nodes, "
        f"table {s.table}: {s.partitions} partitions x RF {s.replication_factor}"
    )
    out.append(
        f"  generated     {gen.produced:,} events to topic {s.source_topic}, {gen.acknowledged:,} "
        f"acknowledged, {gen.failed} failed"
    )
    out.append(
        f"  ingested      {fmt_count(ing.rows_in_shoal)} rows in shoal by Spark query {ing.query} "
        f"({ing.deadletter_records or 0} records in deadletter)"
    )
    if fo.happened:
        for p in fo.partitions:
            out.append(
                f"  failover      partition {p.partition_id[:12]}: {p.old_leader} (epoch {p.old_epoch}, "
                f"killed -9) -> {p.new_leader} (epoch {p.new_epoch}) in {fo.seconds or 0.0:.1f}s"
            )
    else:
        out.append(f"  failover      DID NOT HAPPEN ({fo.error or 'no leader change seen'})")
    if rs.pid:
        out.append(
            f"  restarted     {rs.server_id} as pid {rs.pid} (same command line: {rs.same_command_line}),"
            f" registered in {rs.seconds or 0.0:.1f}s"
        )
    else:
        out.append(f"  restarted     NO ({rs.error or '?'})")
    out.append(
        f"  compaction    {comp.committed} major(s) committed of {len(comp.majors)} computed"
        + (f" ({comp.error})" if comp.error else "")
    )
    per_node = ", ".join(f"{n} {c}" for n, c in s.leaders.per_node.items()) or "none"
    out.append(
        f"  leaders       per node: {per_node} ({s.leaders.on_preferred}/{s.leaders.partitions} partitions on "
        f"their preferred leader)"
    )
    out.append(
        f"  verify        {'every replica agrees' if ver.ok else 'MISMATCH or error'} "
        f"(shoal verify exit {ver.exit_code}, {ver.attempts or 0} attempt(s))"
    )
    for vp in ver.partitions or []:
        rows = ", ".join(f"{r.server_id} {fmt_count(r.row_count)}" for r in vp.replicas)
        out.append(
            f"                partition {vp.partition_id[:12]}: {'agree' if vp.agree else 'DIFFER'}, "
            f"WAL chains {'ok' if vp.wal_chains_ok else 'BROKEN'}; rows {rows}"
        )
    out.append(
        f"  content       {content.rows or 0:,} rows for {content.acknowledged or 0:,} acknowledged "
        f"events: missing {_q(content.missing)}, unexpected {_q(content.unexpected)}, "
        f"wrong content {_q(content.wrong_content)}"
    )
    for err in s.errors:
        out.append(f"  error         {err}")
    out.append("where to look:")
    if s.monitor.url:
        state = "running" if s.kept_running else "stopped with the demo"
        out.append(f"  monitor       {s.monitor.url}/  ({state}; JSON at /api/snapshot, Prometheus at /metrics)")
    out.append(f"  logs          {s.data_dir}/nodes/node-*/node.log, {s.data_dir}/kafka-*/, monitor/monitor.log")
    return out


def _q(value: int | None) -> str:
    return "?" if value is None else str(value)


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
