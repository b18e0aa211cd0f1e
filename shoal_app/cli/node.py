"""``shoal node`` (run a storage node) and ``shoal scan`` (read a table through the nodes)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pyarrow as pa

from metadata.client import MetadataClient
from metadata.election import read_epoch
from metadata.metadata_file import MetadataFile
from metadata.table import ColumnType, TableDefinition
from shoal.errors import SchemaError, ShoalError
from shoal_app.cli.connection import connection_options, metadata_config
from shoal_app.cli.context import CliContext, emit, node_logging, output_option, progress
from shoal_app.cli.models import DrainMove, DrainResult
from shoal_app.cli.params import SERVER_ID, TABLE_NAME, FiniteFloatRange, timeout_option
from storage_node.allocator import ARROW_MEMORY_POOLS, ARROW_POOL_ENV, DEFAULT_ARROW_MEMORY_POOL

log = logging.getLogger(__name__)


@click.group("node", invoke_without_command=True)
@click.option("--id", "server_id", type=SERVER_ID, default=None, help="This node's server id (e.g. node-1).")
@click.option(
    "--data-dir",
    "node_data_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where this node keeps segments (default <cluster data dir>/nodes/<id>).",
)
@click.option("--flight-host", default="127.0.0.1", show_default=True, help="Address to serve scans on.")
@click.option("--flight-port", type=int, default=0, show_default=True, help="Port for scans (0 = any free port).")
@click.option("--flush-rows", type=int, default=None, help="Flush the memtable at this many rows.")
@click.option(
    "--flush-age",
    type=FiniteFloatRange(0, min_open=True),
    default=None,
    help="Flush the memtable at this age in seconds.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus /metrics on this port (0 = any free port; default: no exporter).",
)
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Address to serve /metrics on.")
@click.option(
    "--max-minors-before-stall",
    type=click.IntRange(0),
    default=64,
    show_default=True,
    help="Slow ingest (writer stall) while more minor segments than this await compaction.",
)
@click.option(
    "--minor-stall",
    "minor_stall_s",
    type=FiniteFloatRange(0, 60),
    default=0.2,
    show_default=True,
    help="Seconds the leader sleeps per batch while stalled (0 = never stall).",
)
@click.option(
    "--max-transaction-decoded-bytes",
    type=click.IntRange(1),
    default=256 * 1024 * 1024,
    show_default=True,
    help="A leader ends an ingest transaction once its decoded rows reach this many bytes (memory bound).",
)
@click.option(
    "--leader-rebalance-delay",
    "leader_rebalance_delay_s",
    type=FiniteFloatRange(0, 86_400),
    default=30.0,
    show_default=True,
    help="Seconds a partition's preferred leader must be caught up before leadership moves back to it.",
)
@click.option(
    "--replica-lag-max",
    "replica_lag_max_s",
    type=FiniteFloatRange(0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds a follower may stay behind (or dead) before its leader marks it out of sync.",
)
@click.option(
    "--replica-lag-max-bytes",
    type=click.IntRange(1),
    default=128 * 1024 * 1024,
    show_default=True,
    help="Segment bytes a follower may lack before its leader marks it out of sync.",
)
@click.option(
    "--arrow-memory-pool",
    type=click.Choice(sorted(ARROW_MEMORY_POOLS)),
    default=DEFAULT_ARROW_MEMORY_POOL,
    show_default=True,
    help="The node process's Arrow allocator (system: lowest RSS with many partitions; storage_node.allocator).",
)
@connection_options
@click.pass_context
def node_command(
    ctx: click.Context,
    server_id: str | None,
    node_data_dir: Path | None,
    flight_host: str,
    flight_port: int,
    flush_rows: int | None,
    flush_age: float | None,
    metrics_port: int | None,
    metrics_host: str,
    max_minors_before_stall: int,
    minor_stall_s: float,
    max_transaction_decoded_bytes: int,
    leader_rebalance_delay_s: float,
    replica_lag_max_s: float,
    replica_lag_max_bytes: int,
    arrow_memory_pool: str,
    **conn: Any,
) -> None:
    """Run one storage node until SIGTERM (``shoal node --id ID``): it holds the partitions discovery
    gives it. ``shoal node drain --id ID`` moves every replica off a node."""
    if ctx.invoked_subcommand is not None:
        return
    if server_id is None:
        raise click.UsageError("give --id (this node's server id), or a subcommand (drain)")
    node_logging()
    from storage_node.config import FlushPolicy, NodeConfig, ReplicaLagPolicy
    from storage_node.node import StorageNode

    _exec_with_arrow_pool(arrow_memory_pool)
    try:
        # the typed connection settings, resolved once here (options, env, cluster file); a node waits for
        # Kafka by itself (it may start before the brokers answer), so no access check at start
        meta = metadata_config(conn, check_access=False)
        obj = ctx.find_object(CliContext)
        base = obj.data_dir if obj is not None else Path.home() / ".shoal" / "local"
        defaults = FlushPolicy()
        flush = FlushPolicy(
            max_rows=defaults.max_rows if flush_rows is None else flush_rows,
            max_bytes=defaults.max_bytes,
            max_age_s=defaults.max_age_s if flush_age is None else flush_age,
        )
        config = NodeConfig(
            server_id=server_id,
            data_dir=node_data_dir or base / "nodes" / server_id,
            connection=meta.connection,
            flight_host=flight_host,
            flight_port=flight_port,
            flush=flush,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            max_minors_before_stall=max_minors_before_stall,
            minor_stall_s=minor_stall_s,
            max_transaction_decoded_bytes=max_transaction_decoded_bytes,
            leader_rebalance_delay_s=leader_rebalance_delay_s,
            replica_lag=ReplicaLagPolicy(replica_lag_max_s, replica_lag_max_bytes),
            arrow_memory_pool=arrow_memory_pool,
        )
        StorageNode(config, metadata=meta).run()
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc


def _exec_with_arrow_pool(pool: str) -> None:
    """Re-execute this process (same pid, same arguments) with Arrow C++'s default pool set to
    ``pool``: Arrow reads :data:`~storage_node.allocator.ARROW_POOL_ENV` once, so it must be in the
    environment the process starts with. Nothing has started yet; a no-op once it is set."""
    if os.environ.get(ARROW_POOL_ENV) == pool:
        return
    log.info("restarting with %s=%s", ARROW_POOL_ENV, pool)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], {**os.environ, ARROW_POOL_ENV: pool})


_INTEGER_KEYS = (ColumnType.INT32, ColumnType.INT64, ColumnType.UINT64, ColumnType.TIMESTAMP_MS)


def _parse_key(table: TableDefinition, text: str | None) -> int | str | None:
    """A ``--key``/``--from``/``--to`` value for the first primary-key column: ASCII decimal digits
    (with an optional ``-``) that the column's integer type holds (milliseconds since the epoch for a
    timestamp), or UTF-8 text for a string column. Other key types cannot be scanned by key (scan
    the whole table instead)."""
    if text is None:
        return None
    col = table.column(table.primary_key[0])
    if col.type is ColumnType.STRING:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise SchemaError(f"key column {col.name!r}: {text!a:.80} is not valid text") from None
        return text
    if col.type not in _INTEGER_KEYS:
        raise SchemaError(
            f"key column {col.name!r} is {col.type.value}: scan --key/--from/--to take integer or string keys"
        )
    digits = text.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()):
        raise SchemaError(f"key column {col.name!r} is {col.type.value}: {text!r:.60} is not a decimal integer")
    if len(digits.lstrip("0")) > 20:  # beyond any integer column (and int()'s 4300-digit limit)
        raise SchemaError(f"key column {col.name!r} is {col.type.value}: a {len(digits)}-digit key is out of its range")
    try:
        pa.scalar(int(text), col.type.arrow())
    except (OverflowError, pa.ArrowInvalid):
        raise SchemaError(f"key column {col.name!r} is {col.type.value}: {text} is out of its range") from None
    return int(text)


def _json_value(value: object) -> object:
    """A scanned value as ``shoal write`` reads it back: a timestamp in ISO 8601 with milliseconds
    and its offset, a binary value as its UTF-8 text, or ``{"base64": ...}`` when it is not UTF-8
    (which ``shoal write`` refuses rather than store the text of it). Floats stay numbers; NaN and
    the infinities are printed as the ``NaN``/``Infinity`` constants Python's JSON reads back."""
    if isinstance(value, dt.datetime):
        return value.isoformat(timespec="milliseconds")
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode("ascii")}
    return value


@click.command("scan")
@click.argument("table_name", type=TABLE_NAME)
@click.option("--node", "server_id", default=None, help="Ask this node (its replicas) instead of the leaders.")
@click.option("--key", default=None, help="Only the row(s) with this first primary-key value.")
@click.option("--from", "low", default=None, help="First primary-key value (inclusive).")
@click.option("--to", "high", default=None, help="Last primary-key value (exclusive).")
@click.option(
    "--output",
    "-o",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json (one object per line) for scripts.",
)
@connection_options
@click.pass_context
def scan_command(
    ctx: click.Context,
    table_name: str,
    server_id: str | None,
    key: str | None,
    low: str | None,
    high: str | None,
    output: str,
    **conn: Any,
) -> None:
    """Read TABLE: the newest version of every row (tombstones hidden), from the nodes over Arrow Flight."""
    from metadata.node_registry import lookup_node
    from shoal.scan import ScanRequest, scan_remote

    if key is not None and (low is not None or high is not None):
        raise click.UsageError("use either --key or --from/--to")
    try:
        with MetadataClient(metadata_config(conn)) as client:
            file = client.coordinator.current(table_name)
            definition = file.table
            bounds: dict[str, Any] = {
                "key": _parse_key(definition, key),
                "low": _parse_key(definition, low),
                "high": _parse_key(definition, high),
            }
            parts: list[pa.Table] = []
            if server_id is not None:
                location = lookup_node(client.zk, client.layout, server_id)
                parts.append(
                    scan_remote(location, ScanRequest(table_name, None, **bounds), scan=client.config.connection.scan)
                )
            else:
                for entry in file.partitions:
                    leader = read_epoch(client.zk, client.layout, entry.partition_id).server_id
                    if leader is None:
                        raise ShoalError(f"partition {entry.partition_id} of {table_name} has no leader yet")
                    location = lookup_node(client.zk, client.layout, leader)
                    parts.append(
                        scan_remote(
                            location,
                            ScanRequest(table_name, entry.partition_id, **bounds),
                            scan=client.config.connection.scan,
                        )
                    )
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    result = pa.concat_tables(parts).sort_by([(k, "ascending") for k in definition.primary_key])
    if output == "json":
        for row in result.to_pylist():
            click.echo(json.dumps({k: _json_value(v) for k, v in row.items()}, default=str, sort_keys=True))
        return
    names = result.column_names
    rows = [[("" if v is None else str(v)) for v in r.values()] for r in result.to_pylist()]
    widths = [max([len(n)] + [len(r[i]) for r in rows]) for i, n in enumerate(names)]
    click.echo("  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)))
    for r in rows:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    click.echo(f"({result.num_rows} rows)", err=True)


# -- shoal node drain (table partitioning seed 4.2 and 4.3) -----------------------------------------


@dataclass
class _Move:
    table: str
    partition_id: str
    placement_id: int
    was_leader: bool
    to_server: str = ""
    to_placement_id: int = 0
    reused: bool = False
    """The replacement already joined (an earlier drain that stopped half way, or an operator's
    add-replica): no new replica is added, the move only waits for it and removes the old one."""


def plan_drain(
    files: list[MetadataFile], server_id: str, servers: list[str], leaders: dict[str, int | None]
) -> list[_Move]:
    """Every replica of ``server_id`` (LIVE or joining) with the server it moves to: the running server
    not yet listed in that partition holding the fewest replicas; partitions it leads come last.

    :class:`DrainError` when ``server_id`` is not running, a partition has no server to move to or is
    splitting (nothing is committed then).
    """
    if server_id not in servers:
        raise DrainError(server_id, f"unknown server {server_id!r}: running nodes are {', '.join(servers) or 'none'}")
    load = dict.fromkeys((s for s in servers if s != server_id), 0)
    for f in files:
        for e in f.partitions:
            for p in e.replicas:
                if p.server_id in load:
                    load[p.server_id] += 1
    moves: list[_Move] = []
    for f in files:
        for e in f.partitions:
            found = e.find(server_id)
            if found is None or found[0] == "servers_leaving":
                continue
            if e.splitting:  # refused now, not after the moves planned before it were committed
                raise DrainError(
                    server_id,
                    f"cannot drain {server_id}: partition {e.partition_id} of {f.table.name} is splitting "
                    "(a replica cannot join or leave it until the split is finalized); drain after the split",
                )
            was_leader = leaders.get(e.partition_id) == found[1].placement_id
            # a re-run after a drain that stopped between its join and its leave: the partition
            # already has its replication factor without this server, so nothing is added again
            others = [p for p in (*e.servers, *e.servers_joining) if p.server_id != server_id]
            if len(others) >= f.table.replication_factor:
                joining = [p for p in e.servers_joining if p.server_id != server_id]
                reuse = max(joining, key=lambda p: p.placement_id) if joining else None
                moves.append(
                    _Move(
                        f.table.name,
                        e.partition_id,
                        found[1].placement_id,
                        was_leader,
                        reuse.server_id if reuse else "",
                        reuse.placement_id if reuse else 0,
                        reused=True,
                    )
                )
                continue
            listed = {p.server_id for p in e.all_placements()}
            free = sorted((n, s) for s, n in load.items() if s not in listed)
            if not free:
                raise DrainError(
                    server_id,
                    f"cannot drain {server_id}: partition {e.partition_id} of {f.table.name} has no running server "
                    "to move to (every other node already holds it); start another node first",
                )
            target = free[0][1]
            load[target] += 1
            moves.append(_Move(f.table.name, e.partition_id, found[1].placement_id, was_leader, target))
    return sorted(moves, key=lambda m: m.was_leader)


class DrainError(ShoalError):
    """``shoal node drain`` cannot move the node's replicas (nothing was changed)."""

    def __init__(self, server_id: str, message: str) -> None:
        super().__init__(message)
        self.server_id = server_id


def _remove(client: MetadataClient, m: _Move, server_id: str, deadline: float) -> None:
    """Remove the drained replica once it is not the partition's last in-sync LIVE one: a replica that
    just joined is marked in sync again by the leader's next Tail pass (every few seconds)."""
    from shoal_app.cli.table import OnlyInSyncReplicaError, remove_replica

    while True:
        try:
            remove_replica(client, m.table, m.partition_id, server_id)
            return
        except OnlyInSyncReplicaError:
            if time.monotonic() >= deadline:
                raise
            progress(f"drain {server_id}: {m.table}/{m.partition_id[:8]}: waiting until another replica is in sync")
            time.sleep(1.0)


def drain_node(client: MetadataClient, server_id: str, *, wait: bool, timeout_s: float) -> DrainResult:
    """Move every replica off ``server_id``: per phase (followers, then leaders) add a replica on another
    node and wait until it is LIVE (JOIN_FINALIZE), then remove the old one (UNLOAD); with ``wait``,
    until the old ones are removed."""
    from shoal_app.cli.table import add_replica, registered_servers, wait_for_states

    started = time.monotonic()
    coord = client.coordinator
    files = [coord.current(t) for t in coord.list_tables()]
    pids = [e.partition_id for f in files for e in f.partitions]
    leaders = {pid: coord.partition_status(pid).leader_placement_id for pid in pids}
    moves = plan_drain(files, server_id, registered_servers(client), leaders)
    final: dict[int, str] = {}
    for phase in (False, True):
        batch = [m for m in moves if m.was_leader is phase]
        if not batch:
            continue
        for m in batch:
            if m.reused:
                continue
            _file, placement = add_replica(client, m.table, m.partition_id, m.to_server)
            m.to_placement_id = placement.placement_id
            progress(f"drain {server_id}: {m.table}/{m.partition_id[:8]} joins on {m.to_server}#{m.to_placement_id}")
        for table in sorted({m.table for m in batch}):
            wanted = [
                (m.partition_id, m.to_placement_id, "LIVE") for m in batch if m.table == table and m.to_placement_id
            ]
            wait_for_states(client, table, wanted, timeout_s, what=f"drain {server_id}: join")  # type: ignore[arg-type]
        deadline = time.monotonic() + timeout_s
        for m in batch:
            _remove(client, m, server_id, deadline)
            final[m.placement_id] = "UNLOAD"
            progress(f"drain {server_id}: {m.table}/{m.partition_id[:8]}#{m.placement_id} leaves (UNLOAD)")
        if wait:
            for table in sorted({m.table for m in batch}):
                wanted = [(m.partition_id, m.placement_id, "REMOVED") for m in batch if m.table == table]
                wait_for_states(client, table, wanted, timeout_s, what=f"drain {server_id}: leave")  # type: ignore[arg-type]
                for m in batch:
                    final[m.placement_id] = "REMOVED"
    out = [
        DrainMove(
            table=m.table,
            partition_id=m.partition_id,
            from_placement_id=m.placement_id,
            to_server_id=m.to_server,
            to_placement_id=m.to_placement_id,
            was_leader=m.was_leader,
            state=final.get(m.placement_id, "LIVE"),  # type: ignore[arg-type]
        )
        for m in moves
    ]
    return DrainResult(
        server_id=server_id,
        moves=out,
        complete=wait and all(m.state == "REMOVED" for m in out),
        seconds=round(time.monotonic() - started, 3),
    )


@node_command.command("drain")
@click.option("--id", "server_id", type=SERVER_ID, required=True, help="The node to drain (server id).")
@click.option("--wait", is_flag=True, help="Wait until every old replica is removed (progress on stderr).")
@timeout_option(600.0, "Seconds each wait may take.")
@output_option
@connection_options
def drain_command(server_id: str, wait: bool, timeout: float, output: str, **conn: Any) -> None:
    """Move every replica off node --id onto other running nodes (leaders last): each move adds a
    replica elsewhere, waits for its JOIN_FINALIZE, then removes the old one."""
    try:
        with MetadataClient(metadata_config(conn)) as client:
            result = drain_node(client, server_id, wait=wait, timeout_s=timeout)
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    if output == "json":
        emit(result)
        return
    for m in result.moves:
        lead = " (was leader)" if m.was_leader else ""
        moved = f"#{m.from_placement_id} -> " + (
            f"{m.to_server_id}#{m.to_placement_id}" if m.to_placement_id else "(its other replicas)"
        )
        click.echo(f"{m.table}/{m.partition_id}: {moved}{lead}: {m.state}")
    pending = "" if result.complete else " (removal in progress)"
    click.echo(f"drained {server_id}: {len(result.moves)} replica(s) moved{pending}")
