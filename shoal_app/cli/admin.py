"""`shoal admin`: repairs of the cluster shoal runs on."""

from __future__ import annotations

from typing import Any

import click

from shoal.errors import ShoalError
from shoal_app.cli.connection import connection_options, connection_settings
from shoal_app.cli.context import CliContext, emit, new_table, output_option, progress, show
from shoal_app.cli.params import FiniteFloatRange
from shoal_app.cli.replication import fix_replication


@click.group("admin")
def admin_group() -> None:
    """Repair the Kafka topics shoal relies on."""


@admin_group.command("fix-replication")
@click.option("--wait", is_flag=True, help="Wait until the new replicas are in sync, then set min.insync.replicas.")
@click.option(
    "--timeout", type=FiniteFloatRange(1), default=600.0, show_default=True, help="Seconds to wait with --wait."
)
@output_option
@connection_options
@click.pass_obj
def fix_replication_command(obj: CliContext, wait: bool, timeout: float, output: str, **conn: Any) -> None:
    """Raise every shoal topic to the topic policy: replication factor min(3, live brokers) and
    min.insync.replicas min(2, RF), or SHOAL_TOPIC_REPLICATION_FACTOR / SHOAL_TOPIC_MIN_INSYNC_REPLICAS.

    Partitions are moved with Kafka's own reassignment tool (from the pinned Kafka jars); existing
    replicas stay, new ones go to the least used live brokers. Without --wait the moves are only
    started: run again with --wait to finish them. Exit 0 when every topic is at the policy.
    """
    try:
        settings = connection_settings(conn)
        report = fix_replication(
            settings.kafka, settings.topic_prefix, obj.cache_dir, wait=wait, timeout_s=timeout, progress=progress
        )
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    if output == "json":
        emit(report)
    else:
        table = new_table("topic", "replicas", "min.insync", "status", right=("replicas", "min.insync"))
        for t in report.topics:
            table.add_row(
                t.topic,
                f"{t.replication_factor_before} -> {t.replication_factor}",
                f"{t.min_insync_replicas_before} -> {t.min_insync_replicas}",
                t.status,
            )
        show(
            f"policy: replication factor {report.replication_factor}, min.insync.replicas {report.min_insync_replicas}",
            table,
            "every topic is at the policy"
            if report.complete
            else "topics below the policy: too few live brokers (run again once they are back)"
            if any(t.status == "below_policy" for t in report.topics)
            else "replicas still copying: run again with --wait",
        )
    raise SystemExit(0 if report.complete else 1)
