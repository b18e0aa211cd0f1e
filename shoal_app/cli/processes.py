"""`shoal stop NAME` / `shoal start NAME`: one process of the local cluster, restarted in place."""

from __future__ import annotations

from pathlib import Path

import click

from shoal import cluster_file
from shoal.errors import ShoalError
from shoal_app.cli.context import CliContext, emit, output_option, progress, show
from shoal_app.cli.models import Started, Stopped
from shoal_app.cli.params import FiniteFloatRange
from shoal_app.runtime import restart
from shoal_app.runtime.process import is_running


@click.command("stop")
@click.argument("name")
@click.option("--timeout", type=FiniteFloatRange(1), default=20.0, show_default=True, help="Seconds before SIGKILL.")
@output_option
@click.pass_obj
def stop_command(obj: CliContext, name: str, timeout: float, output: str) -> None:
    """Stop one process of the local cluster (zookeeper, kafka-N or node-N) by pid.

    It stays in the cluster file: `shoal start NAME` or `shoal up` start it again with the same
    command line, ports and data.
    """
    try:
        was_running = restart.stop_process(obj.cluster(), name, timeout_s=timeout)
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    if output == "json":
        emit(Stopped(stopped=[name] if was_running else []))
    else:
        show(f"stopped {name}" if was_running else f"{name} was not running")


@click.command("start")
@click.argument("name")
@click.option("--timeout", type=FiniteFloatRange(1), default=120.0, show_default=True, help="Seconds to serve.")
@output_option
@click.pass_obj
def start_command(obj: CliContext, name: str, timeout: float, output: str) -> None:
    """Start one stopped process of the local cluster again, in place (same command line, ports
    and data), and wait until it serves. A process that runs is left alone."""
    try:
        info = obj.cluster()
        record = info.process(name)
        if record is None or not is_running(record):
            progress(f"starting {name}")
            restart.restart_process(info, name, cache_dir=obj.cache_dir, timeout_s=timeout)
            started = [name]
        else:
            started = []
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    if output == "json":
        emit(Started(started=started))
    else:
        show(f"started {name}" if started else f"{name} is already running")


def start_missing_processes(obj: CliContext, path: Path, output: str) -> bool:
    """`shoal up` on a partly running cluster: start what is missing, in place. False when the
    cluster file at ``path`` has nothing running, or everything (a normal `shoal up` follows: it
    starts a new cluster on the data, or refuses a running one)."""
    if not path.exists():
        return False
    info = cluster_file.read(path)
    running = [p for p in info.processes if is_running(p)]
    if not running or len(running) == len(info.processes):
        return False
    try:
        _, started = restart.start_missing(info, cache_dir=obj.cache_dir, progress=progress)
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    if output == "json":
        emit(Started(started=started))
    else:
        show("started again, in place: " + ", ".join(started))
    return True
