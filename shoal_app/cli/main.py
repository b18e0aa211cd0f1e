"""The `shoal` command line."""

from __future__ import annotations

import click

from shoal_app.cli.acl import acl_group
from shoal_app.cli.admin import admin_group
from shoal_app.cli.cluster import down_command, jars_command, status_command, up_command
from shoal_app.cli.context import ShoalGroup, configure_logging, context_from_env
from shoal_app.cli.demo import demo_command
from shoal_app.cli.monitor import monitor_command
from shoal_app.cli.node import node_command, scan_command
from shoal_app.cli.offsets import offsets_command
from shoal_app.cli.processes import start_command, stop_command
from shoal_app.cli.spark import spark_group
from shoal_app.cli.table import table_group
from shoal_app.cli.verify import verify_command
from shoal_app.cli.write import write_command


@click.group(cls=ShoalGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--data-dir", envvar=None, default=None, help="Local cluster data dir (env SHOAL_DATA_DIR).")
@click.option("--cluster-file", default=None, help="Cluster file to use (env SHOAL_CLUSTER_FILE).")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
@click.version_option(package_name="shoal")
@click.pass_context
def cli(ctx: click.Context, data_dir: str | None, cluster_file: str | None, verbose: int) -> None:
    """shoal: a replicated, partitioned table store over Kafka, ZooKeeper and Spark."""
    configure_logging(verbose)
    ctx.obj = context_from_env(data_dir, cluster_file)


for command in (up_command, status_command, down_command, jars_command, demo_command, node_command, scan_command):
    cli.add_command(command)

cli.add_command(table_group)
cli.add_command(admin_group)
cli.add_command(acl_group)
cli.add_command(stop_command)
cli.add_command(start_command)
cli.add_command(spark_group)
cli.add_command(write_command)
cli.add_command(offsets_command)
cli.add_command(monitor_command)
cli.add_command(verify_command)


def main() -> None:
    cli(prog_name="shoal")


if __name__ == "__main__":
    main()
