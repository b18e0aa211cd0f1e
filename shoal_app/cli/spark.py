"""``shoal spark ingest`` (Kafka topic -> table) and ``shoal spark compact`` (the compaction service).

Both start their own SparkSession (``--master``, default local[*]; the Kafka connector jars come from
the jar cache) and run until SIGTERM/SIGINT, or until the input is processed with ``--available-now``
/ ``--once``. Connection settings: options > SHOAL_* environment > the cluster file of ``shoal up``.
DESIGN.md section 9.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import click

from shoal.errors import ShoalError
from shoal_app.cli.connection import connection_options, metadata_config
from shoal_app.cli.context import CliContext, emit, new_table, output_option, show
from shoal_app.cli.models import Compactions, IngestSummary
from shoal_app.cli.params import TABLE_NAME, FiniteFloatRange
from shoal_app.runtime.extras import require_extra

log = logging.getLogger(__name__)


def _context() -> CliContext:
    ctx = click.get_current_context()
    obj = ctx.find_object(CliContext)
    if obj is None:
        from shoal_app.cli.context import context_from_env

        obj = context_from_env(None, None)
    return obj


def _spark_conf(pairs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``--conf KEY=VALUE`` pairs (spark-submit's form) as (key, value) tuples; a clear error otherwise."""
    out = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not key.startswith("spark."):
            raise click.BadParameter(f"expected spark.KEY=VALUE, got {pair!r:.80}", param_hint="--conf")
        out.append((key.strip(), value))
    return tuple(out)


def _session(master: str, app: str, conf: tuple[str, ...] = ()) -> Any:
    from spark_jobs.session import SparkConfig, build_session

    return build_session(
        SparkConfig(cache_dir=_context().cache_dir, master=master, app_name=app, extra_conf=_spark_conf(conf))
    )


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM/SIGINT while the block runs (the previous handlers are restored after)."""
    stop = threading.Event()

    def handler(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, handler)
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def master_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--master`` and ``--conf`` (repeatable; also SHOAL_SPARK_CONF, space separated)."""
    f = click.option(
        "--conf",
        "spark_conf",
        multiple=True,
        envvar="SHOAL_SPARK_CONF",
        metavar="spark.KEY=VALUE",
        help="A Spark setting, as spark-submit's --conf (e.g. spark.driver.host=NAME and "
        "spark.driver.bindAddress=0.0.0.0 when executors run on other hosts; spark.cores.max=1).",
    )(f)
    return click.option(
        "--master", default="local[*]", show_default=True, help="Spark master URL (local[*], spark://host:7077, ...)."
    )(f)


@click.group("spark")
def spark_group() -> None:
    """Spark jobs: Kafka ingest into a table, and the compaction service."""


@spark_group.command("ingest")
@click.option("--topic", "source_topic", required=True, help="The external Kafka topic to read.")
@click.option("--table", type=TABLE_NAME, required=True, help="The shoal table to write to.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "avro"]),
    default="json",
    show_default=True,
    help="How the source records are encoded (avro: schemaless Avro binary).",
)
@click.option(
    "--avro-schema",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Writer schema (.avsc) of Avro records (default: the table's Avro schema).",
)
@click.option(
    "--starting-offsets",
    default="earliest",
    show_default=True,
    help="Where a new query starts: earliest, latest or Spark's JSON offsets (not on restart).",
)
@click.option(
    "--max-offsets-per-trigger",
    type=click.IntRange(min=1),
    default=None,
    help="At most this many source records per micro-batch.",
)
@click.option(
    "--checkpoint",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Checkpoint (default <data dir>/spark/ingest/<query name>); a restart continues there.",
)
@click.option(
    "--query-name",
    default=None,
    help="Query name (default ingest-<table>); its offsets are mirrored to consumer group <prefix>.spark.<query name>.",
)
@click.option(
    "--fail-on-data-loss/--no-fail-on-data-loss",
    default=True,
    show_default=True,
    help="Fail when source offsets were deleted (retention) or the topic was reset.",
)
@click.option("--source-bootstrap-servers", default=None, help="Kafka of the source topic (default: shoal's).")
@click.option("--available-now", is_flag=True, help="Process what the topic holds now, then stop.")
@click.option("--trigger-interval", default=None, help="Micro-batch interval, e.g. '10 seconds' (default: ASAP).")
@master_option
@output_option
@connection_options
def ingest_command(
    source_topic: str,
    table: str,
    fmt: str,
    avro_schema: Path | None,
    starting_offsets: str,
    max_offsets_per_trigger: int | None,
    checkpoint: Path | None,
    query_name: str | None,
    fail_on_data_loss: bool,
    source_bootstrap_servers: str | None,
    available_now: bool,
    trigger_interval: str | None,
    master: str,
    spark_conf: tuple[str, ...],
    output: str,
    **conn: Any,
) -> None:
    """Read a Kafka topic with Structured Streaming, parse it, and write it to TABLE with the shoal sink.

    Malformed records go to the deadletter topic with a reason (and are counted); the rest are written.
    """
    require_extra("spark", "shoal spark ingest")
    from spark_jobs.ingest import IngestConfig, SourceFormat, start_ingest

    if avro_schema is not None and fmt != "avro":
        raise click.UsageError("--avro-schema is only used with --format avro")
    name = query_name or f"ingest-{table}"
    schema_text: str | None = None
    if avro_schema is not None:
        try:
            schema_text = avro_schema.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise click.BadParameter(f"cannot read {avro_schema}: {exc}", param_hint="--avro-schema") from None
    try:
        config = IngestConfig(
            source_topic=source_topic,
            table=table,
            connection=metadata_config(conn),
            checkpoint=checkpoint or _context().data_dir / "spark" / "ingest" / name,
            query_name=name,
            format=SourceFormat(fmt),
            avro_schema=schema_text,
            source_bootstrap_servers=source_bootstrap_servers,
            starting_offsets=starting_offsets,
            max_offsets_per_trigger=max_offsets_per_trigger,
            fail_on_data_loss=fail_on_data_loss,
            available_now=available_now,
            trigger_interval=trigger_interval,
        )
        spark = _session(master, f"shoal-ingest-{name}", spark_conf)
        job = start_ingest(spark, config)
        try:
            with _stop_on_signals() as stop:
                while not stop.is_set() and job.query.isActive:
                    job.await_termination(1)
        finally:
            error = job.query.exception()
            job.stop()
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    summary = IngestSummary(
        query=name,
        query_id=str(job.query.id),
        checkpoint=str(config.checkpoint),
        malformed_to_deadletter=job.malformed_count,
        batches=job.mirror.batches,
        consumer_group=config.group,
        mirrored_offsets={f"{t}/{p}": o for (t, p), o in sorted(job.mirror.committed.items())},
        error=None if error is None else str(error)[:2000],
    )
    if output == "json":
        emit(summary)
    else:
        fields = new_table("field", "value", header=False)
        for key, value in summary.to_json().items():
            fields.add_row(key, str(value))
        show(fields)
    if error is not None:
        raise click.ClickException(f"the ingest query failed: {str(error)[:500]}")


@spark_group.command("compact")
@click.option("--table", type=TABLE_NAME, default=None, help="Only this table (default: every table with segments).")
@click.option("--once", is_flag=True, help="Read the segments channels now, compact what is due, wait, exit.")
@click.option(
    "--min-minors",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Compact a partition with at least this many minors since its latest major.",
)
@click.option(
    "--min-bytes",
    type=click.IntRange(min=1),
    default=256 * 1024 * 1024,
    show_default=True,
    help="... or at least this many bytes of such minors.",
)
@click.option(
    "--max-age",
    type=FiniteFloatRange(min=0, min_open=True),
    default=3600.0,
    show_default=True,
    help="... or whose oldest such minor is older than this many seconds.",
)
@click.option(
    "--full",
    is_flag=True,
    help="No effect, kept so that scripts using it still run: majors always keep tombstones (dropping "
    "them let a segment merged later, e.g. pushed by a returning old leader, bring a deleted key back).",
)
@click.option(
    "--check-interval",
    type=FiniteFloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds between checks of the age threshold (the service mode).",
)
@click.option(
    "--commit-timeout",
    type=FiniteFloatRange(min=0, min_open=True),
    default=120.0,
    show_default=True,
    help="Seconds to wait for the leader to commit a published major.",
)
@click.option(
    "--local-max-bytes",
    type=click.IntRange(min=0),
    default=64 * 1024 * 1024,
    show_default=True,
    help="Compute majors whose inputs total at most this many bytes in this process, without a Spark job "
    "(0: always a Spark job).",
)
@master_option
@output_option
@connection_options
def compact_command(
    table: str | None,
    once: bool,
    min_minors: int,
    min_bytes: int,
    max_age: float,
    full: bool,
    check_interval: float,
    commit_timeout: float,
    local_max_bytes: int,
    master: str,
    spark_conf: tuple[str, ...],
    output: str,
    **conn: Any,
) -> None:
    """Compact partitions: fold the minors since each latest major into a new major, committed by the leader."""
    require_extra("spark", "shoal spark compact")
    if full:
        click.echo("warning: --full has no effect: majors keep tombstones (see --help)", err=True)
    from spark_jobs.compaction.policy import CompactionPolicy
    from spark_jobs.compaction.service import CompactionConfig, CompactionService

    try:
        config = CompactionConfig(
            connection=metadata_config(conn),
            policy=CompactionPolicy(min_minors=min_minors, min_bytes=min_bytes, max_age_s=max_age),
            table=table,
            check_interval_s=check_interval,
            commit_timeout_s=commit_timeout,
            local_max_bytes=local_max_bytes,
        )
        spark = _session(master, "shoal-compaction", spark_conf)
        with CompactionService(spark, config) as service:
            if once:
                outcomes = service.run_once()
            else:
                with _stop_on_signals() as stop:
                    service.run(stop)
                outcomes = service.outcomes
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    rows = Compactions(outcomes)
    failures = list(service.failures)
    if output == "json":
        emit(rows)
    elif not rows.root and not failures:
        show("nothing to compact")
    elif rows.root:
        t = new_table(
            "partition",
            "major",
            "state",
            "rows",
            "bytes",
            "folded",
            "epoch",
            "reason",
            right=("rows", "bytes", "folded", "epoch"),
        )
        for r in rows.root:
            state = {True: "committed", False: "not committed", None: "published"}[r.committed]
            t.add_row(
                r.partition_id, r.segment_id, state, str(r.rows), str(r.bytes), str(r.folded), str(r.epoch), r.reason
            )
        show(t)
    if failures:
        detail = "; ".join(f"{pid}: {err}" for pid, err in failures)
        raise click.ClickException(f"{len(failures)} compaction(s) failed: {detail[:2000]}")
