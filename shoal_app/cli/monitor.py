"""``shoal monitor``: the offset monitor as a service: a live web page, a JSON API and /metrics.

Polls every ``--interval`` seconds (see :mod:`monitor.web` for the routes) and keeps its window in
``--history-dir`` (default ``DATA_DIR/monitor``) so a restart is not blind. Runs until interrupted.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import click

from monitor.web import MonitorService
from shoal.errors import ShoalError
from shoal_app.cli.connection import connection_options
from shoal_app.cli.context import CliContext
from shoal_app.cli.offsets import open_collector
from shoal_app.cli.params import TABLE_NAME, FiniteFloatRange


@click.command("monitor")
@click.argument("table", required=False, type=TABLE_NAME)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=9400, show_default=True, help="HTTP port (0: any free port)."
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--history-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the window is kept across restarts (default DATA_DIR/monitor).",
)
@click.option(
    "--interval", type=FiniteFloatRange(0.05, 3600), default=10.0, show_default=True, help="Seconds between polls."
)
@click.option(
    "--window", type=click.IntRange(2, 10_000), default=30, show_default=True, help="Polls in the status window."
)
@click.option(
    "--warn-samples",
    type=click.IntRange(1, 10_000),
    default=None,
    help="Polls of growing lag before WARN (default half the window).",
)
@connection_options
@click.pass_context
def monitor_command(
    ctx: click.Context,
    table: str | None,
    port: int,
    host: str,
    history_dir: Path | None,
    interval: float,
    window: int,
    warn_samples: int | None,
    **conn: Any,
) -> None:
    """Serve a live page of partitions, replicas, status and lag charts, a JSON API and /metrics."""
    if warn_samples is not None and warn_samples > window:
        raise click.BadParameter(f"must be at most --window ({window})", param_hint="--warn-samples")
    if history_dir is None:
        obj = ctx.find_object(CliContext)
        history_dir = (obj.data_dir if obj is not None else Path.cwd()) / "monitor"
    stop = threading.Event()
    with open_collector(
        conn, table, interval_s=interval, window_samples=window, warn_samples=warn_samples, history_dir=history_dir
    ) as collector:
        try:
            service = MonitorService(collector, host=host, port=port).start()
        except ShoalError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
        try:
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            click.echo(f"serving {service.url}/ (metrics {service.url}/metrics), history in {history_dir}", err=True)
            click.echo(service.url)
            try:
                while not stop.wait(0.5):
                    pass
            except KeyboardInterrupt:
                pass
        finally:
            service.close()


__all__ = ["monitor_command"]
