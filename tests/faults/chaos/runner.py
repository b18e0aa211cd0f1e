"""One chaos run: its own local cluster, writers, the nemesis schedule, healing, convergence, the checker.

The cluster is our own (``shoal_app.runtime.launcher.up`` in a directory of its own: ZooKeeper, three
KRaft brokers, three storage nodes), so restarting ZooKeeper or a broker never touches anybody else's
servers. The table has one partition with replication factor 3 on the three nodes, until a
``split`` fault splits it: replicas are then checked across every partition the table lists (each
node holds them all; a row a partition returns outside its key range fails the run), and
``shoal verify`` reads the retired parent's channels too. The WAL observer reads every partition's
channels.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from fault_support import own_cluster

from chaos.checker import accepted, check
from chaos.history import History
from chaos.models import ChaosRun, FaultEvent, FaultKind
from chaos.nemesis import NODES, Nemesis, elapsed_clock
from chaos.schedule import describe, make_schedule
from chaos.workload import TABLE, ChaosWriter, WalObserver
from metadata.client import MetadataClient, MetadataConfig
from metadata.election import read_epoch
from metadata.node_registry import lookup_node
from metadata.table import Column, ColumnType, TableDefinition
from shoal import cluster_file
from shoal.kafka.settings import ConnectionSettings, KafkaSettings
from shoal.scan import ScanRequest, scan_remote
from shoal.worker import poll_until
from shoal_app.cli.verify import verify

KAFKA_HEAP_MB = 384

Log = Callable[[str], None]


def stderr_log(line: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


Rows = list[tuple[int, str | None]]
Misplaced = list[tuple[str, int]]


def _rows(client: MetadataClient, server: str) -> tuple[Rows | None, Misplaced]:
    """The server's rows of every partition the table lists now (all three nodes hold every
    partition: replication factor 3), or None if one cannot be scanned; and the (partition id, key)
    of every row a partition returned outside its key range."""
    rows: Rows = []
    misplaced: Misplaced = []
    try:
        location = lookup_node(client.zk, client.layout, server)
        file = client.coordinator.current(TABLE)
        for entry, key_range in file.ranges():
            table = scan_remote(location, ScanRequest(TABLE, entry.partition_id), timeout_s=30)
            keys = table.column("k").to_pylist()
            rows += zip(keys, table.column("v").to_pylist(), strict=True)
            keyspace = file.table.keyspace
            misplaced += [(entry.partition_id, k) for k in keys if not key_range.contains(keyspace.encode(k))]
    except Exception:
        return None, []
    return rows, misplaced


def _replicas(client: MetadataClient) -> tuple[dict[str, Rows | None], dict[str, Misplaced]]:
    """:func:`_rows` of every node."""
    scanned = {s: _rows(client, s) for s in NODES}
    return {s: rows for s, (rows, _) in scanned.items()}, {s: wrong for s, (_, wrong) in scanned.items() if wrong}


def _verify_ok(client: MetadataClient) -> bool | None:
    try:
        return verify(client, TABLE).ok
    except Exception:
        return None


def run_once(
    seed: int,
    *,
    faults: int,
    kinds: Sequence[FaultKind],
    data_dir: Path,
    prefix: str,
    duration_s: float = 3_600.0,
    converge_timeout_s: float = 180.0,
    writers: int = 2,
    log: Log = stderr_log,
) -> ChaosRun:
    """Run ``faults`` faults of ``make_schedule(seed, faults, kinds)`` (stopping early once
    ``duration_s`` of faults have passed), heal, wait for convergence, check."""
    schedule = make_schedule(seed, faults, kinds)
    log(f"seed {seed}, schedule of {len(schedule)} faults:\n{describe(schedule)}")
    wall = time.monotonic()
    errors: list[str] = []
    events: list[FaultEvent] = []
    with own_cluster(data_dir, prefix, brokers=3, nodes=len(NODES), kafka_heap_mb=KAFKA_HEAP_MB) as config:
        info = cluster_file.read(config.cluster_file)
        connection = ConnectionSettings.plain(info.bootstrap_servers, info.zk_connect, topic_prefix=prefix)
        meta = MetadataConfig(zk_hosts=info.zk_connect, bootstrap_servers=info.bootstrap_servers, topic_prefix=prefix)
        with MetadataClient(meta) as client:
            definition = TableDefinition(
                TABLE, (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 3
            )
            pid = client.coordinator.create_table(definition, list(NODES)).partitions[0].partition_id

            def leader() -> str | None:
                try:
                    return read_epoch(client.zk, client.layout, pid).server_id
                except Exception:
                    return None

            if not poll_until(lambda: leader() is not None, 120, interval_s=0.5):
                errors.append("no leader elected within 120 s of creating the table")
            history = History()
            observer = WalObserver(KafkaSettings(info.bootstrap_servers), prefix)
            observer.start()
            quiet = threading.Event()
            team = [
                ChaosWriter(connection, history, index=i, count=writers, seed=seed, quiet=quiet) for i in range(writers)
            ]
            for w in team:
                w.start()

            def acked() -> int:
                return sum(len(k.acked) for k in history.snapshot().values())

            if not poll_until(lambda: acked() >= 100, 120, interval_s=0.5):
                errors.append(f"writes did not start: {acked()} acknowledged after 120 s")
            log(f"cluster up, leader {leader()}, {acked()} writes acknowledged; faults start")
            clock, halt = elapsed_clock(), threading.Event()
            nemesis = Nemesis(
                info,
                client,
                pid,
                cache_dir=config.cache_dir,
                kafka_heap_mb=KAFKA_HEAP_MB,
                clock=clock,
                halt=halt,
                quiet=quiet,
                highest_key=lambda: max(history.snapshot(), default=0),
            )
            try:
                for fault in schedule:
                    if clock() > duration_s:
                        log(f"duration {duration_s:.0f} s reached after {len(events)} faults")
                        break
                    halt.wait(fault.gap_s)
                    try:
                        event = nemesis.inject(fault)
                    except Exception as exc:
                        errors.append(f"fault #{fault.index} {fault.kind.value}: {type(exc).__name__}: {exc}")
                        log(errors[-1])
                        nemesis.heal_all()
                        continue
                    events.append(event)
                    log(
                        f"#{event.index} {event.kind.value} on {event.target} ({event.note or '-'}) "
                        f"{event.started_s:.1f}-{event.healed_s:.1f}s, {acked()} acknowledged"
                    )
            finally:
                started = nemesis.heal_all()
                if started:
                    log(f"healed: started {started}")
            before = acked()
            if not poll_until(lambda: acked() >= before + 50, 180, interval_s=0.5):
                errors.append(f"writes did not resume after healing ({before} -> {acked()} acknowledged in 180 s)")
                for name, stacks in nemesis.dump_stacks().items():
                    log(f"{name}: election threads and lines after writes did not resume:\n{stacks}")
            for w in team:
                w.stop()
                if w.is_alive() or w.error is not None:
                    errors.append(f"{w.name}: alive={w.is_alive()} error={w.error!r}")
            final = history.snapshot()
            log(f"writers stopped ({sum(w.failures for w in team)} failed calls); waiting for convergence")

            def converged() -> bool:
                """Every replica holds what the history allows, they are identical, and verify agrees."""
                replicas, misplaced = _replicas(client)
                if not check(accepted(final, list(observer.observations))[0], replicas, misplaced=misplaced).ok:
                    return False
                return _verify_ok(client) is True

            done = poll_until(converged, converge_timeout_s, interval_s=2.0)
            if not done:
                for name, stacks in nemesis.dump_stacks().items():
                    log(f"{name}: election threads and lines after no convergence:\n{stacks}")
            observer.stop()
            replicas, misplaced = _replicas(client)
            verify_ok = _verify_ok(client)
            if verify_ok is None:
                errors.append("shoal verify raised instead of answering after convergence")
            if not observer.observations:
                errors.append("the WAL observer read no record: the GTID checks had nothing to check")
            result = check(final, replicas, observer.observations, misplaced=misplaced, verify_ok=verify_ok)
            observed = {"wal_offsets_unobserved": observer.unobserved, "wal_rounds_failed": observer.failed_rounds}
            result = result.model_copy(update={"counts": result.counts.model_copy(update=observed)})
            errors += observer.errors[:10]
    verdict = result
    errors += [f"fault {e.index} ({e.kind.value}) was not injected: {e.note}" for e in events if not e.injected]
    faults_done: dict[str, int] = {}
    for e in events:
        faults_done[e.kind.value] = faults_done.get(e.kind.value, 0) + 1
    verdict = verdict.model_copy(
        update={
            "counts": verdict.counts.model_copy(
                update={"faults": faults_done, "failed_runs": int(not (verdict.ok and done and not errors))}
            )
        }
    )
    run = ChaosRun(
        # an error (a fault that could not be injected, writes that did not resume, a writer that
        # died, a WAL record the observer could not decode) fails the run: each is a guarantee unkept
        ok=verdict.ok and done and not errors,
        seed=seed,
        schedule=schedule,
        events=events,
        converged=done,
        wall_s=round(time.monotonic() - wall, 1),
        result=verdict,
        errors=errors,
    )
    log(f"seed {seed}: {'OK' if run.ok else 'FAILED'} converged={done} counts={verdict.counts.to_json()}")
    return run
