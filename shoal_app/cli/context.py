"""What every CLI command shares: where the cluster file and caches are, and output helpers.

The environment is read here and only here (entry point), never deeper in the library.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

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


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def progress(message: str) -> None:
    click.echo(f"  .. {message}", err=True)


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
