"""The full demo (`shoal demo`, `make demo`): every part of shoal working together, with a failure on purpose.

Orchestration only; each step calls the public piece that does the work:

1. a fresh local cluster, 3 KRaft brokers + ZooKeeper + 3 storage nodes (:func:`launcher.up`);
2. a table with replication factor 3 and several partitions (split points on ``event_id``),
   created through the metadata coordinator; wait until every partition has a leader;
3. an external Kafka topic and the Spark Kafka ingest job (``shoal spark ingest``, its own
   process) reading it into shoal;
4. ``shoal monitor`` on a free port (its snapshot gives the lag figures);
5. a generator thread writing JSON events to the topic (:mod:`.generator`); progress lines: rows
   generated/acknowledged, rows in shoal (leader scans), rows per node (``describe replica``), lag
   (monitor);
6. the leader of one partition is found (:func:`metadata.election.read_epoch`) and its node is
   ``kill -9``-ed (pid from the cluster file) while events keep coming;
7. the failover: a new leader with a higher epoch for every partition the node led;
8. the node is restarted as the launcher started it (:func:`shoal_app.runtime.restart.restart_process`);
9. the generator finishes; wait until everything acknowledged is in shoal;
10. a compaction (``shoal spark compact --once``: majors computed by Spark, committed by the leaders);
11. leaders spread again: a preferred-leader election (what ``shoal table rebalance --wait`` does;
    the nodes also do it by themselves once the restarted node is caught up), then the leaders per node;
12. ``shoal verify`` (every replica holds the same rows, WAL hash chains intact) and the content
    check (every acknowledged event present exactly once, with its own content);
13. a split of a serving partition at its middle key (``shoal table split --wait``).

Everything started is stopped by pid through one ExitStack, also on failure, Ctrl-C or SIGTERM;
``keep_running`` leaves the cluster, the monitor and the ingest job up (``stop_kept`` stops them later).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metadata import rebalance
from metadata.client import MetadataClient, MetadataConfig
from metadata.metadata_file import MetadataFile
from shoal import cluster_file
from shoal.cluster_file import ProcessRecord
from shoal.errors import ConfigError, ShoalError
from shoal_app.demo import events as ev
from shoal_app.demo import observe
from shoal_app.demo.generator import EventGenerator, GeneratorConfig
from shoal_app.demo.processes import (
    DemoError,
    check_data_dir,
    kill_node,
    last_line,
    monitor_snapshot,
    read_state,
    run_compaction,
    shoal_argv,
    start_ingest,
    start_monitor,
    stop_process,
    topic_records,
    write_state,
)
from shoal_app.demo.report import Console
from shoal_app.runtime import launcher, secure
from shoal_app.runtime.extras import require_extra
from shoal_app.runtime.ports import free_port
from shoal_app.runtime.process import cmdline, is_running, tail
from shoal_app.runtime.restart import restart_process

log = logging.getLogger(__name__)

STEPS = 13
QUERY_NAME = "demo_ingest"
VERIFY_PATIENCE_S = 120.0
"""How long replicas may take to agree once everything is ingested (followers fast-forwarding the last segments)."""


@dataclass(frozen=True)
class FullDemoConfig:
    data_dir: Path
    cache_dir: Path
    events: int = 20_000
    rate_per_s: float = 400.0
    partitions: int = 4
    brokers: int = 3
    nodes: int = 3
    replication_factor: int = 3
    kill_at: float = 0.4
    """Kill the leader once this fraction of the events was generated."""
    table: str = "demo_events"
    source_topic: str = "demo-events"
    spark_master: str = "local[2]"
    monitor_port: int = 0
    """0: any free port."""
    progress_interval_s: float = 5.0
    keep_running: bool = False
    secure: bool = False
    """Start the cluster secured (``shoal up --secure``); every client of the demo uses the cluster
    file's security settings (the admin principal)."""
    step_timeout_s: float = 240.0
    """The longest any one wait may take (failover, catch-up, verify)."""

    def __post_init__(self) -> None:
        if self.events < self.partitions:
            raise ConfigError(f"--events must be at least --partitions ({self.partitions}), got {self.events}")
        if self.rate_per_s <= 0:
            raise ConfigError(f"--rate must be > 0 events/s, got {self.rate_per_s}")
        if not 2 <= self.partitions <= 64:
            raise ConfigError(f"--partitions must be in [2, 64] (the demo splits the table), got {self.partitions}")
        if not 1 <= self.replication_factor <= self.nodes:
            raise ConfigError(f"replication factor {self.replication_factor} needs as many nodes, have {self.nodes}")
        if self.nodes < 2:
            raise ConfigError("the demo kills a leader: it needs at least 2 storage nodes")
        if not 0.0 < self.kill_at < 1.0:
            raise ConfigError(f"--kill-at must be a fraction in (0, 1), got {self.kill_at}")
        if not 0 <= self.monitor_port <= 65535:
            raise ConfigError(f"--monitor-port must be in [0, 65535], got {self.monitor_port}")
        if self.progress_interval_s <= 0 or self.step_timeout_s <= 0:
            raise ConfigError("progress interval and step timeout must be > 0")

    @property
    def cluster_path(self) -> Path:
        return self.data_dir / launcher.CLUSTER_FILE_NAME

    @property
    def servers(self) -> list[str]:
        return [f"node-{i}" for i in range(1, self.nodes + 1)]


class DemoInterrupted(BaseException):
    """SIGTERM arrived: unwind and stop everything."""


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """In the main thread, turn SIGTERM into an exception so the ExitStack stops what was started."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise DemoInterrupted(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass
class _Run:
    """What one run started and found (becomes the summary)."""

    config: FullDemoConfig
    console: Console
    info: Any = None
    meta: MetadataConfig | None = None
    client: MetadataClient | None = None
    generator: EventGenerator | None = None
    monitor_url: str | None = None
    monitor_record: ProcessRecord | None = None
    ingest: ProcessRecord | None = None
    keep: bool = False
    started: list[ProcessRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def md(self) -> MetadataClient:
        if self.client is None:
            raise DemoError("no metadata client (the cluster did not start)")
        return self.client

    def lag(self) -> observe.Lag | None:
        if self.monitor_url is None:
            return None
        snap = monitor_snapshot(self.monitor_url)
        return None if snap is None else observe.lag_from_snapshot(snap)

    def tick(self) -> None:
        """One progress line."""
        gen = self.generator
        in_shoal = observe.count_rows(self.md, self.config.table)
        per_node = observe.replica_rows(self.md, self.config.table, self.config.servers)
        self.console.progress(
            gen.produced if gen else 0, gen.acknowledged if gen else 0, in_shoal, per_node, self.lag()
        )

    def wait(self, what: str, pred: Callable[[], bool], timeout_s: float | None = None) -> bool:
        """Print progress until ``pred()`` holds; False (and a warning) at the timeout."""
        deadline = time.monotonic() + (timeout_s or self.config.step_timeout_s)
        next_tick = time.monotonic()
        while True:
            if pred():
                return True
            now = time.monotonic()
            if now >= deadline:
                self.console.warn(f"gave up waiting for {what} after {timeout_s or self.config.step_timeout_s:.0f}s")
                return False
            if now >= next_tick:
                with contextlib.suppress(ShoalError):
                    self.tick()
                next_tick = now + self.config.progress_interval_s
            self._check_background()
            time.sleep(0.5)

    def _check_background(self) -> None:
        if self.generator is not None and self.generator.error is not None:
            raise DemoError(f"the event generator failed: {self.generator.error}")
        if self.ingest is not None and not is_running(self.ingest):
            raise DemoError(f"`shoal spark ingest` exited:\n{tail(self.ingest.log_path)}")


def run(config: FullDemoConfig, echo: Callable[[str], None]) -> dict[str, Any]:
    """Run the full demo; return the summary (``ok`` says whether verification passed)."""
    require_extra("spark", "shoal demo")
    run = _Run(config, Console(echo, STEPS))
    with _sigterm_unwinds(), contextlib.ExitStack() as stack:
        try:
            _steps(run, stack)
        except Exception as exc:  # any failure of a step: reported in the summary, everything stopped
            run.errors.append(f"{type(exc).__name__}: {exc}")
            run.console.warn(f"the demo stopped early: {type(exc).__name__}: {exc}")
            log.info("demo failure", exc_info=True)
            run.keep = False
        finally:
            run.summary = _summary(run, run.keep)
            if not run.keep:
                echo("stopping everything the demo started...")
    # the ExitStack has now stopped what it had to
    run.summary["processes"] = [{"name": p.name, "pid": p.pid, "running": is_running(p)} for p in run.started]
    run.summary["seconds"] = round(run.console.elapsed(), 1)
    return run.summary


def _steps(run: _Run, stack: contextlib.ExitStack) -> None:
    cfg, con = run.config, run.console

    # 1. the cluster
    con.step(
        f"starting a fresh local cluster in {cfg.data_dir}: ZooKeeper, {cfg.brokers} Kafka brokers, "
        f"{cfg.nodes} storage nodes"
    )
    check_data_dir(cfg.data_dir)

    def down() -> None:
        if run.keep or not cfg.cluster_path.exists():
            return
        try:
            launcher.down(cfg.cluster_path, progress=con.info)
        except ShoalError as exc:
            con.warn(f"stopping the cluster: {exc}")

    stack.callback(down)
    if cfg.data_dir.exists():
        shutil.rmtree(cfg.data_dir)
    write_state(cfg.data_dir, {"table": cfg.table, "started_at": time.time()})
    try:
        run.info = launcher.up(
            launcher.LocalClusterConfig(
                data_dir=cfg.data_dir,
                cache_dir=cfg.cache_dir,
                brokers=cfg.brokers,
                nodes=cfg.nodes,
                secure=cfg.secure,
            ),
            progress=con.info,
        )
    finally:
        with contextlib.suppress(ShoalError):
            run.started += list(cluster_file.read(cfg.cluster_path).processes)
    info = run.info
    con.info(f"bootstrap servers {info.bootstrap_servers}, ZooKeeper {info.zk_connect}")
    if cfg.secure:  # the cluster file's security settings (TLS, SCRAM, ZooKeeper digest, Flight auth)
        run.meta = MetadataConfig(connection=secure.connection_of(info))
    else:
        run.meta = MetadataConfig(
            zk_hosts=info.zk_connect,
            bootstrap_servers=info.bootstrap_servers,
            topic_prefix=info.topic_prefix,
            zk_root=str(info.extra.get("zk_root", "/shoal")),
        )
    kafka = run.meta.connection.kafka
    run.client = stack.enter_context(MetadataClient(run.meta))

    # 2. the table
    points = ev.split_points(cfg.events, cfg.partitions)
    con.step(
        f"creating table {cfg.table}: {cfg.partitions} partitions (split at event_id {points}), "
        f"replication factor {cfg.replication_factor}"
    )
    table = ev.table_definition(cfg.table, cfg.replication_factor)
    file = run.md.coordinator.create_table(table, cfg.servers, [table.keyspace.encode(p) for p in points])
    run.summary["partition_ids"] = [p.partition_id for p in file.partitions]
    if not run.wait("a leader for every partition", lambda: _all_led(run)):
        raise DemoError("not every partition elected a leader")
    for lead in observe.leaders(run.md, cfg.table).values():
        con.info(f"partition {lead.partition_id[:12]}: leader {lead.server_id} epoch {lead.epoch}")

    # 3. Spark ingest (first, so that it is reading when the events start)
    from shoal.kafka import clients
    from shoal.kafka.admin import create_topic
    from shoal.kafka.settings import TopicPolicy

    create_topic(clients.admin(kafka), cfg.source_topic, policy=TopicPolicy(), partitions=3)
    con.step(
        f"starting the Spark Kafka ingest job ({cfg.spark_master}): external topic {cfg.source_topic} (3 partitions) "
        f"-> table {cfg.table}"
    )
    _start_ingest(run, stack)

    # 4. the monitor
    con.step("starting `shoal monitor`")
    port = cfg.monitor_port or free_port()
    try:
        mon = start_monitor(cfg.cluster_path, cfg.data_dir / "monitor", cfg.table, port)
        run.monitor_url, run.monitor_record = mon.url, mon.record
        run.started.append(mon.record)
        stack.callback(lambda: None if run.keep else stop_process(mon.record))
        con.info(f"monitor at {mon.url}/ (pid {mon.record.pid})")
    except ShoalError as exc:
        run.errors.append(f"monitor: {exc}")
        con.warn(f"`shoal monitor` did not start, continuing without lag figures: {exc}")

    # 5. the generator
    con.step(f"starting the generator: {cfg.events:,} JSON events at {cfg.rate_per_s:g}/s to {cfg.source_topic}")
    run.generator = EventGenerator(
        GeneratorConfig(kafka, cfg.source_topic, cfg.events, cfg.rate_per_s, cfg.partitions)
    ).start()
    stack.callback(_stop_generator, run.generator)
    kill_when = max(1, int(cfg.events * cfg.kill_at))
    gen = run.generator

    def time_to_kill() -> bool:
        # while writes still come: once the ingest has put kill_at of them into shoal, or has put some in
        # while the generator is nearly done or done (the ingest job, which starts slower than the
        # generator, then still writes its backlog through the failover)
        in_shoal = observe.count_rows(run.md, cfg.table) or 0
        return in_shoal >= kill_when or (in_shoal > 0 and (gen.produced >= 0.8 * cfg.events or not gen.running))

    run.wait(f"{kill_when:,} events in shoal", time_to_kill)

    # 6-8. kill a leader, the failover, the restart
    _failover(run)

    # 9. catch up
    con.step("waiting for the generator to finish and the ingest job to catch up")
    run.wait("the generator to finish", lambda: not gen.running, timeout_s=cfg.events / cfg.rate_per_s + 120)
    con.info(
        f"generator done: {gen.produced:,} events produced, {gen.acknowledged:,} acknowledged, {gen.failed} failed"
    )
    caught_up = run.wait(
        "every acknowledged event in shoal", lambda: observe.count_rows(run.md, cfg.table) == gen.acknowledged
    )
    run.summary["caught_up"] = caught_up
    # a compaction folds segments: let the leaders flush what they still hold in memory first
    flushed = run.wait(
        "the leaders to flush their memtables into segments",
        lambda: observe.unflushed_rows(run.md, cfg.table, cfg.servers) == 0,
        timeout_s=90,
    )
    con.info("every leader flushed its memtable into a segment" if flushed else "some rows are still unflushed")

    # 10. compaction
    con.step("running a compaction (majors computed by Spark, committed by the leaders)")
    _compact(run)

    # 11. leaders spread over the nodes again
    con.step("moving leadership back to the preferred leaders (`shoal table rebalance --wait`)")
    _rebalance(run)

    # 12. verification
    con.step("verifying: `shoal verify` on every replica, and every acknowledged event present exactly once")
    _verify(run)

    # 13. a split of a serving partition (storage_node.roles.split), after the checks above
    con.step("splitting the first partition at its middle key (`shoal table split --wait`)")
    _split(run)
    from shoal.topics import TopicNames

    run.summary["ingest"]["deadletter_records"] = topic_records(kafka, TopicNames(info.topic_prefix).deadletter)
    run.keep = cfg.keep_running


def _all_led(run: _Run) -> bool:
    leads = observe.leaders(run.md, run.config.table)
    alive = set(observe.live_nodes(run.md, run.config.servers))
    return all(lead.server_id in alive for lead in leads.values())


def _stop_generator(gen: EventGenerator) -> None:
    gen.stop()
    gen.join(90)


def _start_ingest(run: _Run, stack: contextlib.ExitStack) -> None:
    """``shoal spark ingest`` in its own process (and JVM), stopped by pid with SIGTERM."""
    from shoal.topics import TopicNames

    cfg = run.config
    checkpoint = cfg.data_dir / "spark" / "ingest" / QUERY_NAME
    record = start_ingest(
        cfg.cluster_path,
        topic=cfg.source_topic,
        table=cfg.table,
        checkpoint=checkpoint,
        query_name=QUERY_NAME,
        master=cfg.spark_master,
        log_path=cfg.data_dir / "spark" / "ingest.log",
    )
    run.ingest = record
    run.started.append(record)
    stack.callback(lambda: None if run.keep else stop_process(record))
    group = TopicNames(run.info.topic_prefix).spark_group(QUERY_NAME)
    run.summary["ingest"] = {
        "query": QUERY_NAME,
        "pid": record.pid,
        "checkpoint": str(checkpoint),
        "group": group,
        "log": record.log_path,
    }
    run.console.info(
        f"`shoal spark ingest` pid {record.pid} (log {record.log_path}); its offsets are mirrored to "
        f"consumer group {group}"
    )


def _failover(run: _Run) -> None:
    cfg, con = run.config, run.console
    leads = observe.leaders(run.md, cfg.table)
    target = leads[run.summary["partition_ids"][0]]
    victim = target.server_id
    assert victim is not None
    led = {pid: lead for pid, lead in leads.items() if lead.server_id == victim}
    con.step(
        f"killing the leader of partition {target.partition_id[:12]}: {victim} (epoch {target.epoch}), "
        f"which leads {len(led)} partition(s)"
    )
    info = cluster_file.read(cfg.cluster_path)
    record = info.process(victim)
    running_cmd = cmdline(record) if record is not None else None
    killed = kill_node(info, victim)
    t_kill = time.monotonic()
    con.info(
        f"kill -9 {killed.pid} ({victim}) while the generator is at {run.generator.produced if run.generator else 0:,}"
    )
    fo: dict[str, Any] = {"killed": victim, "killed_pid": killed.pid, "happened": False, "partitions": []}
    run.summary["failover"] = fo

    def failed_over() -> bool:
        now = observe.leaders(run.md, cfg.table)
        alive = set(observe.live_nodes(run.md, cfg.servers))
        return all(
            now[p].server_id not in (None, victim) and now[p].epoch > old.epoch and now[p].server_id in alive
            for p, old in led.items()
        )

    con.step(f"waiting for the failover of the {len(led)} partition(s) {victim} led")
    if run.wait("a new leader for every partition of the killed node", failed_over):
        fo["seconds"] = round(time.monotonic() - t_kill, 1)
        now = observe.leaders(run.md, cfg.table)
        for pid, old in led.items():
            new = now[pid]
            fo["partitions"].append(
                {
                    "partition_id": pid,
                    "old_leader": victim,
                    "old_epoch": old.epoch,
                    "new_leader": new.server_id,
                    "new_epoch": new.epoch,
                }
            )
            con.info(
                f"partition {pid[:12]}: {victim} epoch {old.epoch} -> {new.server_id} epoch {new.epoch} "
                f"({fo['seconds']:.1f}s after the kill)"
            )
        fo["happened"] = True
    else:
        fo["error"] = "no new leader within the step timeout"
        run.errors.append(f"failover: {fo['error']}")
    run.tick()

    con.step(f"restarting {victim} as the launcher started it (same command line, ports, data dir)")
    rs: dict[str, Any] = {"server_id": victim}
    run.summary["restart"] = rs
    t0 = time.monotonic()
    try:
        new_record = _restart(cfg, victim)
    except ShoalError as exc:
        rs["error"] = str(exc)
        run.errors.append(f"restart of {victim}: {exc}")
        con.warn(f"restart failed: {exc}")
        return
    finally:  # the new pid is in the cluster file even if the wait failed: list it, `down` stops it
        restarted = cluster_file.read(cfg.cluster_path).process(victim)
        if restarted is not None and restarted.pid != killed.pid:
            run.started.append(restarted)
    rs.update(
        pid=new_record.pid,
        seconds=round(time.monotonic() - t0, 1),
        same_command_line=running_cmd is not None and running_cmd == cmdline(new_record),
    )
    con.info(
        f"{victim} is back as pid {new_record.pid}, registered in {rs['seconds']:.1f}s "
        f"(same command line as before: {rs['same_command_line']})"
    )


def _restart(cfg: FullDemoConfig, server_id: str) -> ProcessRecord:
    """:func:`restart_process` on the cluster file: the node as the launcher started it."""
    info = restart_process(cluster_file.read(cfg.cluster_path), server_id, cache_dir=cfg.cache_dir)
    record = info.process(server_id)
    assert record is not None
    return record


def _compact(run: _Run) -> None:
    """``shoal spark compact --once`` (every partition with a minor after its major is compacted)."""
    cfg, con = run.config, run.console
    comp: dict[str, Any] = {"majors": [], "committed": 0}
    run.summary["compaction"] = comp
    before = run.lag()
    if before is not None:
        con.info(f"minors awaiting compaction (monitor): {before.minors_awaiting_compaction}")
    try:
        outcomes = run_compaction(
            cfg.cluster_path,
            table=cfg.table,
            master=cfg.spark_master,
            timeout_s=cfg.step_timeout_s + 120,
            log_path=cfg.data_dir / "spark" / "compact.log",
        )
    except ShoalError as exc:
        comp["error"] = str(exc)
        run.errors.append(f"compaction: {exc}")
        con.warn(f"compaction failed: {exc}")
        return
    comp["majors"] = outcomes
    comp["committed"] = sum(1 for o in outcomes if o.get("committed"))
    for o in outcomes:
        con.info(
            f"partition {str(o.get('partition_id'))[:12]}: major {str(o.get('segment_id'))[:12]} folds "
            f"{o.get('folded')} segments, {o.get('rows')} rows, epoch {o.get('epoch')}: "
            f"{'committed' if o.get('committed') else 'NOT committed'}"
        )
    if not outcomes:
        con.warn("no partition needed compaction (no minor segment after a major yet)")


def _rebalance(run: _Run) -> None:
    """A preferred-leader election, waited for; the leaders per node before and after."""
    cfg, con = run.config, run.console
    coord = run.md.coordinator
    t0 = time.monotonic()
    file = coord.current(cfg.table)
    before = rebalance.current_leaders(coord, file)
    rebalance.request_rebalance(coord.zk, coord.layout, cfg.table, ttl_s=cfg.step_timeout_s, security=coord.security)
    after = rebalance.await_preferred_leaders(coord, file, cfg.step_timeout_s, progress=con.info, interval_s=2.0)
    section = _leaders_section(file, after)
    section.update(
        per_node_before=rebalance.leader_balance(file, {p: lead for p, (lead, _) in before.items()}).leaders_per_node,
        seconds=round(time.monotonic() - t0, 1),
    )
    run.summary["leaders"] = section
    per_node = ", ".join(f"{n} {c}" for n, c in section["per_node"].items())
    con.info(
        f"leaders per node: {per_node} ({section['on_preferred']}/{section['partitions']} partitions on their "
        f"preferred leader)"
    )
    led = [n for n, c in section["per_node"].items() if c]
    if len(led) == 1 and cfg.nodes >= 2 and len(file.partitions) >= 2:
        section["error"] = f"{led[0]} leads every partition"
        run.errors.append(f"leaders: {section['error']}")
    elif not section["balanced"]:
        con.warn("some partitions are not on their preferred leader yet (still catching up)")


def _leaders_section(file: MetadataFile, leaders: dict[str, tuple[str | None, int]]) -> dict[str, Any]:
    b = rebalance.leader_balance(file, {pid: lead for pid, (lead, _) in leaders.items()})
    return {
        "per_node": b.leaders_per_node,
        "on_preferred": b.on_preferred,
        "partitions": len(file.partitions),
        "balanced": b.balanced,
    }


def _split(run: _Run) -> None:
    """``shoal table split TABLE --at MID --wait`` as a user runs it; show the children and their rows."""
    cfg, con = run.config, run.console
    before = observe.count_rows(run.md, cfg.table)
    first = ev.split_points(cfg.events, cfg.partitions)[0]
    argv = shoal_argv(cfg.cluster_path, "table", "split", cfg.table, "--at", str(first // 2), "--wait")
    proc = subprocess.run([*argv, "--output", "json"], capture_output=True, text=True, timeout=300, check=False)
    try:
        report = json.loads(proc.stdout) if proc.returncode == 0 else None
    except json.JSONDecodeError:
        report = None
    if not isinstance(report, dict):
        run.errors.append(f"split: {last_line(proc.stderr)}")
        con.warn(f"the split failed: {last_line(proc.stderr)}")
        return
    con.info(
        f"partition {report['partition_id'][:12]} split at event_id {report['split_point']} "
        f"in {report['seconds']}s (copied by its leader, keeping segment ids)"
    )
    if not run.wait("the children's leaders to serve", lambda: _all_led(run), timeout_s=90):
        return
    for child in ("low", "high"):
        c = report[child]
        con.info(
            f"child {c['partition_id'][:12]} [{c['begin']}, {c['end']}) on "
            f"{', '.join(p['server_id'] for p in c['servers'])}"
        )
    # a promoted child serves scans once its leader is ready (and no replica of it still bootstraps)
    run.wait("the children to serve scans", lambda: observe.count_rows(run.md, cfg.table) is not None, timeout_s=90)
    after = observe.count_rows(run.md, cfg.table)
    if after != before:
        run.errors.append(f"split: {before} rows before, {after} after")
        con.warn(f"rows in shoal: {before} before the split, {after} after")
        return
    parts = len(observe.leaders(run.md, cfg.table))
    con.info(f"rows in shoal: {before} before the split, {after} after, now in {parts} partitions")


def _shoal_verify(run: _Run) -> tuple[int, dict[str, Any] | None, str]:
    """``shoal verify TABLE --output json`` as a user runs it: (exit code, its report, its last error line)."""
    argv = shoal_argv(run.config.cluster_path, "verify", run.config.table, "--output", "json")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        report = None
    return proc.returncode, report if isinstance(report, dict) else None, last_line(proc.stderr)


def _verify(run: _Run) -> None:
    cfg, con = run.config, run.console
    ver: dict[str, Any] = {"ok": False, "attempts": 0, "partitions": []}
    run.summary["verify"] = ver
    deadline = time.monotonic() + min(cfg.step_timeout_s, VERIFY_PATIENCE_S)
    while True:
        ver["attempts"] += 1
        code, report, err = _shoal_verify(run)
        ver["exit_code"] = code
        if report is not None:
            ver["ok"] = bool(report.get("ok")) and code == 0
            ver["partitions"] = [
                {
                    "partition_id": p["partition_id"],
                    "agree": p["agree"],
                    "chains_equal": p.get("chains_equal"),
                    "wal_chains_ok": p["wal_chains_ok"],
                    "covered": p.get("covered"),
                    "replicas": [
                        {
                            "server_id": r["server_id"],
                            "row_count": r.get("row_count"),
                            "content_hash": r.get("content_hash"),
                            "error": r.get("error"),
                        }
                        for r in p["replicas"]
                    ],
                }
                for p in report.get("partitions", [])
            ]
        elif err:
            ver["error"] = err
        if ver["ok"] or time.monotonic() >= deadline:
            break
        con.info(
            f"replicas do not agree yet (attempt {ver['attempts']}, exit {code}); followers may still be "
            "catching up, retrying"
        )
        run.tick()
        time.sleep(cfg.progress_interval_s)
    for p in ver["partitions"]:
        rows = ", ".join(f"{r['server_id']} {r['row_count']}" for r in p["replicas"])
        held = {True: "all held", False: "MISSING", None: "not checked"}[p["covered"]]
        con.info(
            f"partition {p['partition_id'][:12]}: {'agree' if p['agree'] else 'DIFFER'} ({rows}), WAL chains "
            f"{'ok' if p['wal_chains_ok'] else 'BROKEN'}, WAL writes {held}"
        )
    if not ver["ok"]:
        run.errors.append(f"shoal verify exit {ver.get('exit_code')}: " + (ver.get("error") or "replicas differ"))

    gen = run.generator
    assert gen is not None
    rows = observe.scan_leaders(run.md, cfg.table)
    check = ev.check_content(rows, gen.acknowledged_ids())
    run.summary["content"] = check.to_json()
    run.summary.setdefault("ingest", {})["rows_in_shoal"] = rows.num_rows
    con.info(
        f"{rows.num_rows:,} rows in shoal for {check.acknowledged:,} acknowledged events: missing "
        f"{check.missing}, unexpected {check.unexpected}, duplicates {check.rows - check.distinct_ids}, wrong "
        f"content {check.wrong_content}"
    )
    if not check.ok:
        run.errors.append(f"content check: {check.to_json()}")


def _summary(run: _Run, kept: bool) -> dict[str, Any]:
    cfg = run.config
    s = run.summary
    gen = run.generator
    info = run.info
    verify_ok = bool(s.get("verify", {}).get("ok"))
    content_ok = bool(s.get("content", {}).get("ok"))
    failover_ok = bool(s.get("failover", {}).get("happened"))
    compaction_ok = s.get("compaction", {}).get("committed", 0) >= 1
    out: dict[str, Any] = {
        "ok": verify_ok and content_ok and failover_ok and compaction_ok and not run.errors,
        "verified": verify_ok and content_ok,
        "data_dir": str(cfg.data_dir),
        "table": cfg.table,
        "source_topic": cfg.source_topic,
        "partitions": cfg.partitions,
        "partition_ids": s.get("partition_ids", []),
        "replication_factor": cfg.replication_factor,
        "cluster": {
            "brokers": cfg.brokers,
            "nodes": cfg.nodes,
            "bootstrap_servers": getattr(info, "bootstrap_servers", None),
            "zk_connect": getattr(info, "zk_connect", None),
            "cluster_file": str(cfg.cluster_path),
        },
        "generator": {
            "events": cfg.events,
            "rate_per_s": cfg.rate_per_s,
            "produced": gen.produced if gen else 0,
            "acknowledged": gen.acknowledged if gen else 0,
            "failed": gen.failed if gen else 0,
        },
        "ingest": {"query": QUERY_NAME, **s.get("ingest", {})},
        "caught_up": s.get("caught_up", False),
        "failover": s.get("failover", {"happened": False, "partitions": []}),
        "restart": s.get("restart", {}),
        "compaction": {**s.get("compaction", {"majors": [], "committed": 0}), "ok": compaction_ok},
        "leaders": s.get("leaders", {"per_node": {}, "on_preferred": 0, "partitions": 0, "balanced": False}),
        "verify": s.get("verify", {"ok": False}),
        "content": s.get("content", {"ok": False}),
        "monitor": _monitor_summary(run),
        "kept_running": kept,
        "errors": list(run.errors),
    }
    if kept:
        write_state(
            cfg.data_dir,
            {
                "table": cfg.table,
                "monitor_url": run.monitor_url,
                "processes": [r.to_json() for r in (run.monitor_record, run.ingest) if r is not None],
            },
        )
    return out


def _monitor_summary(run: _Run) -> dict[str, Any]:
    out: dict[str, Any] = {"url": run.monitor_url, "pid": run.monitor_record.pid if run.monitor_record else None}
    snap = monitor_snapshot(run.monitor_url) if run.monitor_url else None
    if snap is not None:
        out["status"] = snap.get("status")
        out["problems"] = list(snap.get("problems", []))[:10]
    return out


def stop_kept(data_dir: Path, echo: Callable[[str], None]) -> list[str]:
    """Stop what a ``--keep-running`` demo left in ``data_dir``: the monitor and ingest job, then the cluster."""
    state = read_state(data_dir)
    stopped = []
    for entry in state.get("processes") or []:
        record = ProcessRecord.from_json(entry)
        echo(f"stopping {record.name}")
        if stop_process(record):
            stopped.append(record.name)
    path = data_dir / launcher.CLUSTER_FILE_NAME
    if path.exists():
        stopped += launcher.down(path, progress=echo)
    write_state(data_dir, {**state, "processes": []})
    return stopped
