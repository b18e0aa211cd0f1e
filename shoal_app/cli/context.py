"""What every CLI command shares: where the cluster file and caches are, and output helpers.

The environment is read here and only here (entry point), never deeper in the library.

Output: ``--output json`` prints one model's JSON (:func:`emit`, shapes in
:mod:`shoal_app.cli.models`); people get ``rich`` tables on stdout (:func:`new_table`, :func:`show`)
and progress lines on stderr (:func:`progress`). In a terminal they are styled; elsewhere (CI
logs, pipes) they are plain text, never wrapped, so a log line stays one line.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import click
from rich import box
from rich.console import Console, RenderableType
from rich.table import Table

from shoal import cluster_file
from shoal.cluster_file import ClusterInfo
from shoal.errors import ShoalError
from shoal.jvm import jars

DEFAULT_DATA_DIR = Path.home() / ".shoal" / "local"


@dataclass(frozen=True)
class CliContext:
    data_dir: Path
    cache_dir: Path
    cluster_file_path: Path

    def cluster(self) -> ClusterInfo:
        return cluster_file.read(self.cluster_file_path)


def context_from_env(data_dir: str | None, cluster_file_opt: str | None) -> CliContext:
    data = Path(data_dir or os.environ.get("SHOAL_DATA_DIR") or DEFAULT_DATA_DIR).expanduser()
    cache = jars.cache_dir_from(os.environ)
    cf = Path(cluster_file_opt or os.environ.get("SHOAL_CLUSTER_FILE") or data / "cluster.json").expanduser()
    return CliContext(data_dir=data, cache_dir=cache, cluster_file_path=cf)


def configure_logging(verbose: int) -> None:
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


class JsonShape(Protocol):
    """A typed JSON document: a model of :mod:`shoal_app.cli.models`, the cluster file, a snapshot."""

    def to_json(self) -> Any: ...


def emit(shape: JsonShape, *, indent: int | None = 2, sort_keys: bool = True) -> None:
    """Print ``shape`` as JSON for scripts (``indent=None``: on one line)."""
    click.echo(json.dumps(shape.to_json(), indent=indent, sort_keys=sort_keys))


NO_WRAP_WIDTH = 10_000
"""The width given to rich when the output is not a terminal: wide enough that nothing wraps."""


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr), resolved when called (so click's test runner captures it)."""
    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    return Console(
        file=stream,
        highlight=False,
        markup=False,
        soft_wrap=True,
        width=None if tty else NO_WRAP_WIDTH,
        force_terminal=tty,
        no_color=not tty,
    )


def new_table(*columns: str, right: tuple[str, ...] = (), header: bool = True) -> Table:
    """A table for people: bold headers in a terminal, aligned plain columns elsewhere.

    Only the last column wraps (paths and reasons go there) when a terminal is too narrow."""
    t = Table(
        box=box.SIMPLE_HEAD if sys.stdout.isatty() and header else None,
        pad_edge=False,
        show_edge=False,
        show_header=header,
    )
    for i, c in enumerate(columns):
        last = i == len(columns) - 1
        t.add_column(c, justify="right" if c in right else "left", no_wrap=not last, overflow="fold")
    return t


def show(*items: RenderableType) -> None:
    """Print text lines or tables to stdout (without trailing blanks when it is not a terminal)."""
    out = console()
    if out.is_terminal:
        for item in items:
            out.print(item)
        return
    with out.capture() as captured:
        for item in items:
            out.print(item)
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def progress(message: str) -> None:
    console(stderr=True).print(f"  .. {message}", style="dim")


output_option = click.option(
    "--output",
    "-o",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="How to print the result: for people (table) or for scripts (json).",
)


class ShoalGroup(click.Group):
    """Turns a ShoalError into a one-line message and exit code 2, instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ShoalError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)
