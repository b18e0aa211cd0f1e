"""``shoal table``: create, describe, list and history of tables (their METADATA files)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import click

from metadata.client import MetadataClient
from metadata.coordinator import MetadataCoordinator
from metadata.metadata_file import MetadataFile, Placement
from metadata.table import Column, TableDefinition
from shoal.errors import ShoalError
from shoal_app.cli.connection import connection_options, metadata_config
from shoal_app.cli.context import emit, new_table, output_option, progress, show
from shoal_app.cli.models import (
    HistoryEntry,
    PartitionJson,
    PartitionLeader,
    PlacementJson,
    ReplicaChange,
    ReplicaLifecycleJson,
    SplitJson,
    TableDescription,
    TableHead,
    TableHistory,
    TableJson,
    TableList,
)


@contextmanager
def _coordinator(
    zk_hosts: str | None, bootstrap_servers: str | None, topic_prefix: str | None, zk_root: str | None
) -> Iterator[MetadataCoordinator]:
    try:
        config = metadata_config(
            {
                "zk_hosts": zk_hosts,
                "bootstrap_servers": bootstrap_servers,
                "topic_prefix": topic_prefix,
                "zk_root": zk_root,
            }
        )
        with MetadataClient(config) as client:
            yield client.coordinator
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc


@click.group("table")
def table_group() -> None:
    """Tables and their partitioning (METADATA files)."""


@table_group.command("create")
@click.argument("name")
@click.option("--column", "columns", multiple=True, metavar="NAME:TYPE[:not_null]", help="A column (repeatable).")
@click.option("--schema-file", type=click.File("r"), help="JSON table definition {columns, primary_key, ...}.")
@click.option("--primary-key", "primary_key", multiple=True, help="Primary key column (repeatable, in order).")
@click.option("--partition-key", help="The partition key column (uint64 or string; part of the primary key).")
@click.option("--replication-factor", type=int, default=None, help="Replicas per partition (default 3).")
@click.option("--server", "servers", multiple=True, required=True, help="A server to place partitions on.")
@click.option("--split-point", "split_points", multiple=True, help="Initial split point (repeatable, ascending).")
@connection_options
def create(
    name: str,
    columns: tuple[str, ...],
    schema_file: Any,
    primary_key: tuple[str, ...],
    partition_key: str | None,
    replication_factor: int | None,
    servers: tuple[str, ...],
    split_points: tuple[str, ...],
    **conn: Any,
) -> None:
    """Create table NAME with one partition, or one more than the given split points."""
    try:
        if schema_file is not None:
            try:
                data = json.load(schema_file)
            except json.JSONDecodeError as exc:
                raise click.BadParameter(f"not JSON: {exc}", param_hint="--schema-file") from exc
            if not isinstance(data, dict):
                raise click.BadParameter("must be a JSON object", param_hint="--schema-file")
            data = {**data, "name": name}
            if primary_key:
                data["primary_key"] = list(primary_key)
            if partition_key:
                data["partition_key"] = partition_key
            if replication_factor is not None:
                data["replication_factor"] = replication_factor
            table = TableDefinition.from_json(data)
        else:
            if not columns:
                raise click.UsageError("give --column NAME:TYPE (repeatable) or --schema-file")
            if not primary_key:
                raise click.UsageError("give --primary-key")
            table = TableDefinition(
                name,
                tuple(Column.parse(c) for c in columns),
                primary_key,
                partition_key or primary_key[0],
                3 if replication_factor is None else replication_factor,
            )
        points = [table.keyspace.parse_text(p) for p in split_points]
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    with _coordinator(**conn) as coord:
        try:
            file = coord.create_table(table, servers, points)
        except ShoalError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    click.echo(f"created table {file.table.name}: txnid {file.txnid}, {len(file.partitions)} partition(s)")


def _placements(ps: tuple[Placement, ...]) -> list[PlacementJson]:
    return [PlacementJson(server_id=p.server_id, placement_id=p.placement_id) for p in ps]


def describe_table(coord: MetadataCoordinator, name: str, client: MetadataClient | None = None) -> TableDescription:
    """The current METADATA of table ``name`` with each partition's leader and epoch; with ``client``,
    also each replica's lifecycle state and catch-up progress (its Acks on the leader's channels)."""
    head = coord.head(name)
    file = coord.current(name)
    ks = file.table.keyspace
    parts = []
    for entry, krange in file.ranges():
        status = coord.partition_status(entry.partition_id)
        parts.append(
            PartitionJson(
                partition_id=entry.partition_id,
                begin=ks.to_json(krange.begin),
                end=ks.to_json(krange.end),
                servers=_placements(entry.servers),
                servers_joining=_placements(entry.servers_joining),
                servers_leaving=_placements(entry.servers_leaving),
                leader=None
                if status.leader_server_id is None
                else PartitionLeader(
                    server_id=status.leader_server_id,
                    placement_id=status.leader_placement_id,
                    alive=status.leader_alive,
                ),
                epoch=status.epoch,
                splitting=entry.splitting,
                split=SplitJson(
                    split_point=ks.to_json(entry.split_point),
                    split_partition_id_low=entry.split_partition_id_low,
                    split_partition_id_high=entry.split_partition_id_high,
                    split_servers_low=_placements(entry.split_servers_low),
                    split_servers_high=_placements(entry.split_servers_high),
                )
                if entry.splitting
                else None,
                replicas=[] if client is None else lifecycle_progress(client, file, entry.partition_id),
            )
        )
    return TableDescription(
        table=TableJson.model_validate(file.table.to_json()),
        metadata_txnid=head.metadata_txnid,
        metadata_sequence=head.metadata_sequence,
        metadata_servers=list(head.metadata_servers),
        partitions=parts,
    )


def describe_json(coord: MetadataCoordinator, name: str) -> dict[str, Any]:
    """:func:`describe_table` as the JSON ``shoal table describe -o json`` prints."""
    return describe_table(coord, name).to_json()


def _fmt_placements(ps: list[PlacementJson]) -> str:
    return ", ".join(f"{p.server_id}#{p.placement_id}" for p in ps) or "-"


def _bound(value: int | str | None, unbounded: str) -> str:
    return unbounded if value is None else repr(value)


@table_group.command("describe")
@click.argument("name")
@output_option
@connection_options
def describe(name: str, output: str, **conn: Any) -> None:
    """Show the current METADATA of table NAME, with the leader and epoch of each partition and each
    replica's lifecycle state (LOAD, LIVE, UNLOAD) and catch-up progress."""
    try:
        with MetadataClient(metadata_config(conn)) as client:
            info = describe_table(client.coordinator, name, client)
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    if output == "json":
        emit(info)
        return
    t = info.table
    cols = ", ".join(f"{c.name} {c.type}{'' if c.nullable else ' not null'}" for c in t.columns)
    show(
        f"table {t.name} ({cols})",
        f"  primary key {', '.join(t.primary_key)}; partition key {t.partition_key} ({t.keyspace})",
        f"  replication factor {t.replication_factor}",
        f"  metadata txnid {info.metadata_txnid} sequence {info.metadata_sequence}",
        f"  metadata servers {', '.join(info.metadata_servers) or '-'}",
    )
    parts = new_table("partition", "range", "leader", "epoch", "servers", "changes", right=("epoch",))
    for p in info.partitions:
        lead = "none" if p.leader is None else f"{p.leader.server_id}#{p.leader.placement_id}"
        if p.leader is not None and not p.leader.alive:
            lead += " (not alive)"
        changes = []
        if p.servers_joining:
            changes.append(f"joining {_fmt_placements(p.servers_joining)}")
        if p.servers_leaving:
            changes.append(f"leaving {_fmt_placements(p.servers_leaving)}")
        if p.split is not None:
            s = p.split
            changes.append(
                f"splitting at {s.split_point!r} into {s.split_partition_id_low} "
                f"({_fmt_placements(s.split_servers_low)}) and {s.split_partition_id_high} "
                f"({_fmt_placements(s.split_servers_high)})"
            )
        parts.add_row(
            p.partition_id,
            f"[{_bound(p.begin, '-inf')}, {_bound(p.end, '+inf')})",
            lead,
            str(p.epoch),
            _fmt_placements(p.servers),
            "; ".join(changes) or "-",
        )
    show(parts)
    replicas = new_table("partition", "replica", "state", "catch-up")
    for p in info.partitions:
        for r in p.replicas:
            replicas.add_row(p.partition_id, f"{r.server_id}#{r.placement_id}", r.state, _progress_text(r))
    if replicas.row_count:
        show(replicas)


@table_group.command("list")
@output_option
@connection_options
def list_tables(output: str, **conn: Any) -> None:
    """List the tables."""
    with _coordinator(**conn) as coord:
        try:
            rows = [(name, coord.head(name)) for name in coord.list_tables()]
        except ShoalError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    if output == "json":
        listed = [
            TableHead(table=n, metadata_txnid=h.metadata_txnid, metadata_sequence=h.metadata_sequence) for n, h in rows
        ]
        emit(TableList(listed), sort_keys=False)
        return
    # one tab-separated line per table, no header: the list is read by scripts (cut, grep) as is
    for name, head in rows:
        click.echo(f"{name}\tsequence {head.metadata_sequence}\ttxnid {head.metadata_txnid}")


def _history_row(f: MetadataFile) -> HistoryEntry:
    return HistoryEntry(
        sequence=f.sequence,
        txnid=f.txnid,
        parent_txnid=f.parent_txnid,
        change=f.change.value,
        summary=f.change_summary,
        created_at_ms=f.created_at_ms,
        partitions=len(f.partitions),
    )


@table_group.command("history")
@click.argument("name")
@output_option
@connection_options
def history(name: str, output: str, **conn: Any) -> None:
    """The committed METADATA transactions of table NAME, oldest first."""
    with _coordinator(**conn) as coord:
        try:
            chain = coord.history(name)
        except ShoalError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    entries = TableHistory([_history_row(f) for f in chain])
    if output == "json":
        emit(entries, sort_keys=False)
        return
    t = new_table("sequence", "committed (UTC)", "txnid", "change", "summary", right=("sequence",))
    for e in entries.root:
        when = _dt.datetime.fromtimestamp(e.created_at_ms / 1000, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        t.add_row(str(e.sequence), when, e.txnid, e.change, e.summary)
    show(t)


# -- the partition lifecycle: add-replica / remove-replica (table partitioning seed 4.2, 4.3) ------


class UnknownServerError(ShoalError):
    """A lifecycle command named a server that is not a running (registered) storage node."""

    def __init__(self, server_id: str, known: list[str]) -> None:
        super().__init__(f"unknown server {server_id!r}: running nodes are {', '.join(known) or 'none'}")
        self.server_id = server_id
        self.known = known


class UnknownPartitionArgError(ShoalError):
    """A lifecycle command named a partition the table does not have (or an ambiguous prefix)."""

    def __init__(self, table: str, partition: str, candidates: list[str]) -> None:
        what = "matches several partitions" if len(candidates) > 1 else "is not a partition"
        super().__init__(f"{partition!r} {what} of table {table} (partitions: {', '.join(candidates) or 'none'})")
        self.table = table
        self.partition = partition


ReplicaStateName = Literal["LOAD", "LIVE", "UNLOAD", "REMOVED"]


def registered_servers(client: MetadataClient) -> list[str]:
    """The storage nodes running now (their ephemeral registration znodes)."""
    from kazoo.exceptions import NoNodeError

    try:
        return sorted(client.zk.get_children(f"{client.layout.root}/nodes"))
    except NoNodeError:
        return []


def resolve_partition(file: MetadataFile, partition: str) -> str:
    """A partition id of ``file`` from its full id or a unique prefix of it."""
    ids = [e.partition_id for e in file.partitions]
    matches = [p for p in ids if p == partition] or [p for p in ids if partition and p.startswith(partition)]
    if len(matches) != 1:
        raise UnknownPartitionArgError(file.table.name, partition, matches or ids)
    return matches[0]


def replica_state(file: MetadataFile, partition_id: str, placement_id: int) -> ReplicaStateName:
    """Where a placement is in ``file``: LOAD (joining), LIVE, UNLOAD (leaving) or REMOVED (not listed)."""
    for entry in file.partitions:
        if entry.partition_id != partition_id:
            continue
        for name, ps in (("LIVE", entry.servers), ("LOAD", entry.servers_joining), ("UNLOAD", entry.servers_leaving)):
            if any(p.placement_id == placement_id for p in ps):
                return name  # type: ignore[return-value]
    return "REMOVED"


def add_replica(client: MetadataClient, table: str, partition: str, server: str) -> tuple[MetadataFile, Placement]:
    """Commit a JoinServer of ``server`` into ``partition`` (LOAD): nothing changes on bad input."""
    coord = client.coordinator
    pid = resolve_partition(coord.current(table), partition)
    known = registered_servers(client)
    if server not in known:
        raise UnknownServerError(server, known)
    file = coord.join(table, pid, server)
    placement = next(p for p in file.partition(pid).servers_joining if p.server_id == server)
    return file, placement


def remove_replica(client: MetadataClient, table: str, partition: str, server: str) -> tuple[MetadataFile, Placement]:
    """Commit a LeaveServer of ``server`` from ``partition`` (its replica goes to UNLOAD)."""
    coord = client.coordinator
    current = coord.current(table)
    pid = resolve_partition(current, partition)
    found = current.partition(pid).find(server)
    if found is None and server not in registered_servers(client):
        raise UnknownServerError(server, registered_servers(client))
    file = coord.leave(table, pid, server)
    placement = next(p for p in file.partition(pid).servers_leaving if p.server_id == server)
    return file, placement


def lifecycle_progress(client: MetadataClient, file: MetadataFile, partition_id: str) -> list[ReplicaLifecycleJson]:
    """Every replica of a partition with its state and its Acks on the leader's channels."""
    from shoal.kafka.indexes import channel_indexes
    from shoal.topics import TopicNames

    entry = file.partition(partition_id)
    leader = client.coordinator.partition_status(partition_id).leader_placement_id
    topics = TopicNames(client.config.topic_prefix)
    listed = [
        *((p, "LIVE") for p in entry.servers),
        *((p, "LOAD") for p in entry.servers_joining),
        *((p, "UNLOAD") for p in entry.servers_leaving),
    ]
    groups = tuple(topics.replica_group(partition_id, p.placement_id) for p, _ in listed)
    seg = wal = None
    if leader is not None:
        with contextlib.suppress(ShoalError):
            kafka = client.config.kafka
            seg = channel_indexes(kafka, topics.segments(partition_id, leader), groups, timeout_s=5)
            wal = channel_indexes(kafka, topics.wal(partition_id, leader), groups, timeout_s=5)
    out = []
    for (p, state), group in zip(listed, groups, strict=True):
        is_leader = p.placement_id == leader
        out.append(
            ReplicaLifecycleJson(
                server_id=p.server_id,
                placement_id=p.placement_id,
                state=state,  # type: ignore[arg-type]
                leader=is_leader,
                segments_ack=None if seg is None or is_leader else seg.ack(group),
                segments_end=None if seg is None else seg.append,
                wal_ack=None if wal is None or is_leader else wal.ack(group),
                wal_end=None if wal is None else wal.append,
            )
        )
    return out


def _progress_text(r: ReplicaLifecycleJson) -> str:
    if r.leader:
        return "leader"
    if r.segments_end is None:
        return "-"
    seg = "-" if r.segments_ack is None else str(r.segments_ack)
    wal = "-" if r.wal_ack is None else str(r.wal_ack)
    return f"segments {seg}/{r.segments_end} wal {wal}/{r.wal_end}"


def wait_for_states(
    client: MetadataClient,
    table: str,
    want: Sequence[tuple[str, int, ReplicaStateName]],
    timeout_s: float,
    *,
    what: str,
) -> MetadataFile:
    """Wait until every (partition, placement) reaches its state; progress on stderr every few seconds."""
    from shoal.worker import Deadline

    deadline = Deadline(timeout_s)
    next_report = 0.0
    while True:
        file = client.coordinator.current(table)
        pending = [(pid, pl, s) for pid, pl, s in want if replica_state(file, pid, pl) != s]
        if not pending:
            return file
        if deadline.expired():
            raise LifecycleTimeoutError(what, timeout_s, [f"{pid[:8]}#{pl} -> {s}" for pid, pl, s in pending])
        now = time.monotonic()
        if now >= next_report:
            next_report = now + 3.0
            for pid, pl, s in pending:
                rows = {r.placement_id: r for r in lifecycle_progress(client, file, pid)}
                r = rows.get(pl)
                now_state = replica_state(file, pid, pl)
                detail = "" if r is None else f" ({_progress_text(r)})"
                progress(f"{what}: {pid[:8]}#{pl} is {now_state}, waiting for {s}{detail}")
        time.sleep(1.0)


class LifecycleTimeoutError(ShoalError):
    """``--wait`` gave up: the lifecycle operation is committed and still in progress."""

    def __init__(self, what: str, timeout_s: float, pending: list[str]) -> None:
        super().__init__(
            f"{what}: not finished after {timeout_s:.0f} s (still in progress, nothing undone): {', '.join(pending)}"
        )
        self.pending = pending


def _replica_change_command(action: Literal["add-replica", "remove-replica"]) -> Any:
    def command(table: str, partition: str, server: str, wait: bool, timeout: float, output: str, **conn: Any) -> None:
        started = time.monotonic()
        try:
            with MetadataClient(metadata_config(conn)) as client:
                change = add_replica if action == "add-replica" else remove_replica
                file, placement = change(client, table, partition, server)
                pid = next(e.partition_id for e in file.partitions if placement in e.all_placements())
                target: ReplicaStateName = "LIVE" if action == "add-replica" else "REMOVED"
                if wait:
                    file = wait_for_states(client, table, [(pid, placement.placement_id, target)], timeout, what=action)
                result = ReplicaChange(
                    table=table,
                    partition_id=pid,
                    server_id=server,
                    placement_id=placement.placement_id,
                    action=action,
                    state=replica_state(file, pid, placement.placement_id),
                    metadata_sequence=file.sequence,
                    waited=wait,
                    seconds=round(time.monotonic() - started, 3),
                )
        except ShoalError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
        if output == "json":
            emit(result)
            return
        click.echo(
            f"{action}: {server}#{result.placement_id} in {table}/{pid} is {result.state} "
            f"(METADATA sequence {result.metadata_sequence})"
        )

    return command


def _lifecycle_options(f: Any) -> Any:
    f = connection_options(output_option(f))
    f = click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds --wait waits.")(f)
    f = click.option("--wait", is_flag=True, help="Wait until the operation finished (progress on stderr).")(f)
    f = click.option("--server", required=True, help="The storage node (server id).")(f)
    return click.argument("table")(click.argument("partition")(f))


add_replica_command = table_group.command("add-replica")(_lifecycle_options(_replica_change_command("add-replica")))
add_replica_command.help = (
    "Add a replica of PARTITION (its id or a unique prefix) on --server: it joins in LOAD, catches up "
    "from Kafka and becomes LIVE when the partition's leader commits JOIN_FINALIZE."
)
remove_replica_command = table_group.command("remove-replica")(
    _lifecycle_options(_replica_change_command("remove-replica"))
)
remove_replica_command.help = (
    "Remove the replica of PARTITION on --server: it goes to UNLOAD (a leader resigns first), keeps its "
    "data until every remaining replica acked it, then it is removed (UNLOAD_FINAL)."
)


__all__ = [
    "add_replica",
    "describe_json",
    "describe_table",
    "lifecycle_progress",
    "remove_replica",
    "replica_state",
    "table_group",
    "wait_for_states",
]
