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
from shoal.errors import ConfigError, ShoalError
from shoal.jvm import jars

DEFAULT_DATA_DIR = Path.home() / ".shoal" / "local"


@dataclass(frozen=True)
class CliContext:
    data_dir: Path
    cache_dir: Path
    cluster_file_path: Path
    cluster_file_named: bool = False
    """The path came from ``--cluster-file`` or ``SHOAL_CLUSTER_FILE``: it must then exist."""

    def cluster(self) -> ClusterInfo:
        return cluster_file.read(self.cluster_file_path)


def context_from_env(data_dir: str | None, cluster_file_opt: str | None) -> CliContext:
    """Where the data dir, jar cache and cluster file are: options, then the environment, then defaults.
    A ``~user`` that names no user is a ConfigError naming where the path came from."""
    data = _expanded(data_dir, "--data-dir") or _expanded(os.environ.get("SHOAL_DATA_DIR"), "SHOAL_DATA_DIR")
    data = data or DEFAULT_DATA_DIR
    try:
        cache = jars.cache_dir_from(os.environ)
    except RuntimeError as exc:
        raise ConfigError(f"SHOAL_CACHE_DIR: cannot expand {os.environ.get('SHOAL_CACHE_DIR')!r}: {exc}") from None
    named = _expanded(cluster_file_opt, "--cluster-file") or _expanded(
        os.environ.get("SHOAL_CLUSTER_FILE"), "SHOAL_CLUSTER_FILE"
    )
    return CliContext(
        data_dir=data,
        cache_dir=cache,
        cluster_file_path=named or data / "cluster.json",
        cluster_file_named=named is not None,
    )


def _expanded(text: str | None, source: str) -> Path | None:
    if not text:
        return None
    try:
        return Path(text).expanduser()
    except RuntimeError as exc:  # "~nosuchuser/x": Path.expanduser cannot find the user
        raise ConfigError(f"{source}: cannot expand {text!r}: {exc}") from None


def configure_logging(verbose: int) -> None:
    """Warnings and up on stderr (``-v`` info, ``-vv`` debug). Without ``-v``, kazoo's own warnings
    (a line per dropped connection attempt) are left out: a command that cannot reach ZooKeeper says
    so in its one error line. ``shoal node`` keeps them (:func:`node_logging`)."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("kazoo").setLevel(logging.ERROR if verbose == 0 else logging.NOTSET)


def node_logging() -> None:
    """A long-running server logs kazoo's connection warnings: an operator reads them in its log."""
    logging.getLogger("kazoo").setLevel(logging.NOTSET)


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
