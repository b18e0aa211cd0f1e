"""`shoal up`, `shoal status`, `shoal down`, `shoal jars`: the embedded local cluster."""

from __future__ import annotations

from pathlib import Path

import click

from shoal.jvm import jars
from shoal_app.cli.context import CliContext, emit, new_table, output_option, progress, show
from shoal_app.cli.models import ClusterStatus, JarBundle, Jars, Stopped
from shoal_app.cli.processes import start_missing_processes
from shoal_app.cli.replication import topic_problems
from shoal_app.runtime import launcher, secure
from shoal_app.runtime.extras import has_extra


@click.command("up")
@click.option(
    "--nodes",
    type=int,
    default=0,
    show_default=True,
    help="Storage nodes to start (node-1..node-N, ready once registered in ZooKeeper).",
)
@click.option("--brokers", type=int, default=1, show_default=True, help="Kafka brokers (KRaft, combined mode).")
@click.option("--data-dir", type=click.Path(path_type=Path), default=None, help="Where servers keep data and logs.")
@click.option("--fresh", is_flag=True, help="Delete the data dir first instead of reusing its data.")
@click.option(
    "--secure",
    is_flag=True,
    help="SASL_SSL Kafka (SCRAM-SHA-512, one user per role, ACLs), authenticated ZooKeeper and scan servers.",
)
@output_option
@click.pass_obj
def up_command(
    obj: CliContext, nodes: int, brokers: int, data_dir: Path | None, fresh: bool, secure: bool, output: str
) -> None:
    """Start ZooKeeper, Kafka and N storage nodes on 127.0.0.1 and write the cluster file.

    On a data dir whose cluster partly runs, start only what is missing, with the same command
    lines, ports and data (--nodes and --brokers are then those of the cluster file).
    """
    data = (data_dir or obj.data_dir).expanduser()
    cfg = launcher.LocalClusterConfig(
        data_dir=data, cache_dir=obj.cache_dir, brokers=brokers, nodes=nodes, fresh=fresh, secure=secure
    )
    if not fresh and start_missing_processes(obj, cfg.cluster_file, output):
        return
    info = launcher.up(cfg, progress=progress)
    if output == "json":
        emit(info)
        return
    where = new_table("what", "where", header=False)
    where.add_row("bootstrap servers", info.bootstrap_servers)
    where.add_row("zookeeper", info.zk_connect)
    for p in info.processes:
        if p.name.startswith("node-"):
            where.add_row(p.name, f"scans on 127.0.0.1:{p.port}, log {p.log_path}")
    where.add_row("cluster file", str(cfg.cluster_file))
    show(f"local cluster up ({brokers} broker(s), {nodes} storage node(s))", where, "stop it with: shoal down")


@click.command("status")
@output_option
@click.pass_obj
def status_command(obj: CliContext, output: str) -> None:
    """Say what runs and whether it is healthy (exit 0 only if everything is)."""
    info = obj.cluster()
    report = ClusterStatus.model_validate(launcher.status(info))
    if report.brokers_seen:
        problems = [
            p
            for h in topic_problems(secure.connection_of(info).kafka, info.topic_prefix)  # the admin's settings
            for p in h.problems
        ]
        report = report.model_copy(update={"topic_problems": problems, "healthy": report.healthy and not problems})
    if output == "json":
        emit(report)
    else:
        lines = [
            f"cluster {report.kafka_cluster_id}  healthy={report.healthy}",
            f"  bootstrap servers: {report.bootstrap_servers}  "
            f"(brokers seen {report.brokers_seen}/{report.brokers_expected})",
            f"  zookeeper:         {report.zk_connect}",
        ]
        if report.nodes_expected:
            lines.append(
                f"  storage nodes:     {len(report.nodes_registered)}/{report.nodes_expected} registered "
                f"({', '.join(report.nodes_registered) or 'none'})"
            )
        show(*lines)
        if report.topic_problems:
            show("  topic problems:", *(f"    {p}" for p in report.topic_problems))
        if report.processes:
            procs = new_table("process", "pid", "port", "state", "log", right=("pid", "port"))
            for p in report.processes:
                state = "healthy" if p.healthy else "RUNNING, UNHEALTHY" if p.running else "STOPPED"
                procs.add_row(p.name, str(p.pid), str(p.port), state, p.log)
            show(procs)
        else:
            show("  nothing is running (start it with `shoal up`)")
    raise SystemExit(0 if report.healthy else 1)


@click.command("down")
@output_option
@click.pass_obj
def down_command(obj: CliContext, output: str) -> None:
    """Stop everything `shoal up` started, by pid."""
    stopped = launcher.down(obj.cluster_file_path, progress=progress)
    if output == "json":
        emit(Stopped(stopped=stopped))
    else:
        show("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@click.command("jars")
@output_option
@click.pass_obj
def jars_command(obj: CliContext, output: str) -> None:
    """Fetch the pinned Kafka, ZooKeeper and Spark connector jars (once; cached)."""
    result: dict[str, JarBundle] = {}
    if has_extra("spark"):
        bundles = jars.all_bundles()
    else:  # the connector's version follows the installed PySpark
        bundles = [jars.zookeeper_bundle(), jars.kafka_bundle()]
        progress("skipping the Spark connector jars: PySpark is not installed (pip install 'shoal[spark]')")
    for bundle in bundles:
        cached = jars.is_complete(bundle, obj.cache_dir)
        if not cached:
            progress(f"fetching {bundle.name} {bundle.version} from Maven Central")
        folder = jars.ensure_bundle(bundle, obj.cache_dir)
        result[bundle.name] = JarBundle(
            version=bundle.version, dir=str(folder), cached=cached, jars=len(list(folder.glob("*.jar")))
        )
    if output == "json":
        emit(Jars(result))
    else:
        t = new_table("bundle", "version", "jars", "state", "dir", right=("jars",))
        for name, r in result.items():
            t.add_row(name, r.version, str(r.jars), "cached" if r.cached else "fetched", r.dir)
        show(t)
