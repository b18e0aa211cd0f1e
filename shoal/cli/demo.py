"""`shoal demo`: start the local cluster (if needed), show the round trip, stop what it started."""

from __future__ import annotations

import time
import uuid

import click

from shoal.cli.context import CliContext, emit_json, output_option, progress
from shoal.errors import ClusterFileError, ShoalError
from shoal.runtime import launcher
from shoal.runtime.cluster_file import ClusterInfo


def _running_cluster(obj: CliContext) -> ClusterInfo | None:
    try:
        info = obj.cluster()
    except ClusterFileError:
        return None
    return info if launcher.status(info)["healthy"] else None


@click.command("demo")
@click.option("--keep-running", is_flag=True, help="Leave the cluster running afterwards, to explore it.")
@click.option("--spark-master", default="local[2]", show_default=True, help="Spark master URL.")
@output_option
@click.pass_obj
def demo_command(obj: CliContext, keep_running: bool, spark_master: str, output: str) -> None:
    """Run the end-to-end round trip on the embedded local cluster."""
    from shoal.demo import roundtrip
    from spark_jobs.session import SparkConfig, build_session

    t0 = time.monotonic()
    info = _running_cluster(obj)
    started_here = info is None
    if info is None:
        click.echo("starting the local cluster (ZooKeeper + Kafka)...", err=True)
        info = launcher.up(launcher.LocalClusterConfig(data_dir=obj.data_dir, cache_dir=obj.cache_dir),
                           progress=progress)  # fmt: skip
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
        emit_json({"ok": ok, "seconds": round(time.monotonic() - t0, 1),
                   "steps": [{"name": r.name, "ok": r.ok, "seconds": round(r.seconds, 2), **r.details}
                             for r in results]})  # fmt: skip
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
