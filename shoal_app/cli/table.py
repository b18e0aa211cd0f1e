"""``shoal table``: create, describe, list and history of tables (their METADATA files)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import click

from metadata.client import MetadataClient
from metadata.coordinator import MetadataCoordinator
from metadata.errors import InvalidOperationError
from metadata.in_sync import read_in_sync
from metadata.metadata_file import MetadataFile, Placement
from metadata.placements import preferred_leader
from metadata.rebalance import (
    await_preferred_leaders,
    current_leaders,
    leader_balance,
    preferred_leaders,
    request_rebalance,
)
from metadata.table import Column, TableDefinition
from shoal import jsonio
from shoal.errors import ShoalError
from shoal_app.cli.connection import connection_options, metadata_config
from shoal_app.cli.context import emit, new_table, output_option, show
from shoal_app.cli.context import progress as show_progress
from shoal_app.cli.models import (
    HistoryEntry,
    LeaderBalanceJson,
    PartitionJson,
    PartitionLeader,
    PartitionRebalance,
    PlacementJson,
    ReplicaChange,
    ReplicaLifecycleJson,
    SplitChildJson,
    SplitJson,
    SplitResult,
    TableDescription,
    TableHead,
    TableHistory,
    TableJson,
    TableList,
    TableRebalance,
)
from shoal_app.cli.params import SERVER_ID, TABLE_NAME, FiniteFloatRange, timeout_option


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
@click.argument("name", type=TABLE_NAME)
@click.option("--column", "columns", multiple=True, metavar="NAME:TYPE[:not_null]", help="A column (repeatable).")
@click.option("--schema-file", type=click.File("rb"), help="JSON table definition {columns, primary_key, ...}.")
@click.option("--primary-key", "primary_key", multiple=True, help="Primary key column (repeatable, in order).")
@click.option("--partition-key", help="The partition key column (uint64 or string; part of the primary key).")
@click.option("--replication-factor", type=int, default=None, help="Replicas per partition (default 3).")
@click.option(
    "--server", "servers", type=SERVER_ID, multiple=True, required=True, help="A server to place partitions on."
)
@click.option("--split-point", "split_points", multiple=True, help="Initial split point (repeatable, ascending).")
@output_option
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
    output: str,
    **conn: Any,
) -> None:
    """Create table NAME with one partition, or one more than the given split points
    (``--output json``: the new table as ``shoal table describe`` prints it)."""
    try:
        if schema_file is not None:
            try:
                data = jsonio.loads_checked(schema_file.read())
            except jsonio.BadJson as exc:
                raise click.BadParameter(exc.reason, param_hint="--schema-file") from None
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
        points = [table.keyspace.validate_split_point(table.keyspace.parse_text(p)) for p in split_points]
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    with _coordinator(**conn) as coord:
        try:
            file = coord.create_table(table, servers, points)
            if output == "json":
                emit(describe_table(coord, file.table.name))
                return
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
        lagging = read_in_sync(coord.zk, coord.layout, entry.partition_id).out_of_sync
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
                preferred_leader=_placements((preferred_leader(entry),))[0],
                epoch=status.epoch,
                splitting=entry.splitting,
                out_of_sync=_placements(tuple(p for p in entry.servers if p.placement_id in lagging)),
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
        balance=_balance_json(file, {p.partition_id: p.leader.server_id if p.leader else None for p in parts}),
    )


def describe_json(coord: MetadataCoordinator, name: str) -> dict[str, Any]:
    """:func:`describe_table` as the JSON ``shoal table describe -o json`` prints."""
    return describe_table(coord, name).to_json()


def _fmt_placements(ps: list[PlacementJson]) -> str:
    return ", ".join(f"{p.server_id}#{p.placement_id}" for p in ps) or "-"


def _bound(value: int | str | None, unbounded: str) -> str:
    return unbounded if value is None else repr(value)


@table_group.command("describe")
@click.argument("name", type=TABLE_NAME)
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
    parts = new_table("partition", "range", "leader", "preferred", "epoch", "servers", "changes", right=("epoch",))
    for p in info.partitions:
        lead = "none" if p.leader is None else f"{p.leader.server_id}#{p.leader.placement_id}"
        if p.leader is not None and not p.leader.alive:
            lead += " (not alive)"
        changes = []
        if p.servers_joining:
            changes.append(f"joining {_fmt_placements(p.servers_joining)}")
        if p.servers_leaving:
            changes.append(f"leaving {_fmt_placements(p.servers_leaving)}")
        if p.out_of_sync:
            changes.append(f"out of sync {_fmt_placements(p.out_of_sync)}")
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
            _fmt_placements([p.preferred_leader]),
            str(p.epoch),
            _fmt_placements(p.servers),
            "; ".join(changes) or "-",
        )
    show(parts, _balance_line(info.balance))
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
@click.argument("name", type=TABLE_NAME)
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


# -- shoal table rebalance (preferred-leader election; DESIGN.md section 7) ------------------------


def _balance_json(file: MetadataFile, leaders: dict[str, str | None]) -> LeaderBalanceJson:
    b = leader_balance(file, leaders)
    return LeaderBalanceJson(
        leaders_per_node=b.leaders_per_node,
        preferred_per_node=b.preferred_per_node,
        on_preferred=b.on_preferred,
        partitions=len(file.partitions),
        balanced=b.balanced,
    )


def _balance_line(b: LeaderBalanceJson) -> str:
    per_node = ", ".join(f"{n} {c}" for n, c in sorted(b.leaders_per_node.items())) or "-"
    verdict = "balanced" if b.balanced else "not balanced (`shoal table rebalance` moves leaders back)"
    return (
        f"leaders per node: {per_node}; {b.on_preferred}/{b.partitions} partitions on their preferred leader, {verdict}"
    )


def rebalance_table(
    coord: MetadataCoordinator,
    name: str,
    *,
    wait: bool,
    timeout_s: float,
    progress: Callable[[str], None] = lambda _m: None,
) -> TableRebalance:
    """Ask the leaders of table ``name`` to hand leadership to their caught-up preferred leaders now
    (:func:`metadata.rebalance.request_rebalance`); with ``wait``, until every partition is on its
    preferred leader or ``timeout_s`` passed."""
    t0 = time.monotonic()
    file = coord.current(name)
    before = current_leaders(coord, file)
    req = request_rebalance(coord.zk, coord.layout, name, ttl_s=timeout_s, security=coord.security)
    want = preferred_leaders(file)
    progress(f"requested a preferred-leader election for {name} (request {req.request_id})")
    after = await_preferred_leaders(coord, file, timeout_s, progress=progress) if wait else before
    parts = [
        PartitionRebalance(
            partition_id=pid,
            preferred_leader=want[pid],
            leader_before=before[pid][0],
            leader_after=after[pid][0],
            epoch_before=before[pid][1],
            epoch_after=after[pid][1],
            on_preferred=after[pid][0] == want[pid],
        )
        for pid in want
    ]
    after_balance = _balance_json(file, {pid: lead for pid, (lead, _) in after.items()})
    return TableRebalance(
        table=name,
        request_id=req.request_id,
        waited=wait,
        seconds=round(time.monotonic() - t0, 1),
        balanced=after_balance.balanced,
        partitions=parts,
        before=_balance_json(file, {pid: lead for pid, (lead, _) in before.items()}),
        after=after_balance,
    )


@table_group.command("rebalance")
@click.argument("name", type=TABLE_NAME)
@click.option("--wait", is_flag=True, help="Wait until every partition is led by its preferred leader.")
@click.option(
    "--timeout",
    "timeout_s",
    type=FiniteFloatRange(1, 3600),
    default=120.0,
    show_default=True,
    help="How long --wait waits (and how long the request stays in force).",
)
@output_option
@connection_options
def rebalance(name: str, wait: bool, timeout_s: float, output: str, **conn: Any) -> None:
    """Move the leadership of each partition of NAME back to its preferred leader (once it is caught up).

    Progress goes to stderr. With --wait the exit code is 1 if some partition is still not on its
    preferred leader at the timeout (e.g. that node is down or still catching up)."""
    with _coordinator(**conn) as coord:
        try:
            result = rebalance_table(coord, name, wait=wait, timeout_s=timeout_s, progress=show_progress)
        except ShoalError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    if output == "json":
        emit(result, sort_keys=False)
    else:
        t = new_table("partition", "preferred", "leader before", "leader after", "epoch", right=("epoch",))
        for p in result.partitions:
            mark = "" if p.on_preferred else " (not preferred)"
            t.add_row(
                p.partition_id,
                p.preferred_leader,
                p.leader_before or "none",
                f"{p.leader_after or 'none'}{mark}",
                f"{p.epoch_before} -> {p.epoch_after}",
            )
        show(t, _balance_line(result.after))
    if wait and not result.balanced:
        sys.exit(1)


# -- split (seed 002 section 4.1, seed 000 section 3.8; storage_node.roles.split does the work) ------


def _split_child(file: MetadataFile, partition_id: str) -> SplitChildJson:
    ks = file.table.keyspace
    i = file.index_of(partition_id)
    r = file.range_of(i)
    return SplitChildJson(
        partition_id=partition_id,
        begin=ks.to_json(r.begin),
        end=ks.to_json(r.end),
        servers=_placements(file.partitions[i].servers),
    )


def _split_progress(client: MetadataClient, file: MetadataFile, partition_id: str) -> str:
    """One progress line: which child placements acked the parent leader's staging channels."""
    from metadata.election import read_epoch
    from shoal.kafka.indexes import channel_indexes
    from shoal.topics import TopicNames

    entry = file.partition(partition_id)
    leader = read_epoch(client.zk, client.layout, partition_id).placement_id
    if leader is None:
        return "waiting for the parent's leader"
    topics = TopicNames(client.config.topic_prefix)
    acked, total = 0, 0
    for child, servers in (
        (entry.split_partition_id_low, entry.split_servers_low),
        (entry.split_partition_id_high, entry.split_servers_high),
    ):
        assert child is not None
        groups = [topics.replica_group(child, p.placement_id) for p in servers]
        total += len(groups)
        try:
            idx = channel_indexes(client.config.kafka, topics.segments(child, leader), groups, timeout_s=5)
        except ShoalError:
            continue  # the staging channel does not exist yet
        acked += sum(1 for _g, a in idx.acks if a is not None and a >= idx.append and idx.append > 0)
    return f"copying pieces: {acked}/{total} child placement(s) caught up"


@table_group.command("split")
@click.argument("name", type=TABLE_NAME)
@click.option("--at", "at", required=True, help="The split point: a partition key value (the high child's first key).")
@click.option(
    "--partition", "partition_id", default=None, help="The partition to split (default: the one holding --at)."
)
@click.option("--wait", is_flag=True, help="Wait until the split is finalized (progress on stderr).")
@timeout_option(300.0, "Seconds --wait waits at most.")
@output_option
@connection_options
def split_command(
    name: str, at: str, partition_id: str | None, wait: bool, timeout: float, output: str, **conn: Any
) -> None:
    """Split the partition of table NAME that holds key --at into two at that key.

    The partition's leader copies its segments to the children (keeping segment ids), then commits
    SPLIT_FINALIZE once every child replica acknowledged them; writes and scans go on meanwhile.
    """
    import time

    from metadata.partition_map import PartitionMap

    started = time.monotonic()
    try:
        with MetadataClient(metadata_config(conn)) as client:
            coord = client.coordinator
            base = coord.current(name)
            ks = base.table.keyspace
            try:
                point = ks.validate_split_point(ks.parse_text(at))
            except ShoalError as exc:
                raise click.BadParameter(f"{exc}", param_hint="--at") from exc
            pid = partition_id or PartitionMap(base).lookup_encoded(point).partition_id
            entry = base.partition(pid)
            servers = [p.server_id for p in entry.servers]
            high_servers = servers[1:] + servers[:1]  # another preferred leader for the high child
            file = coord.split(name, pid, point, servers, high_servers)
            entry = file.partition(pid)
            assert entry.split_partition_id_low is not None and entry.split_partition_id_high is not None
            low_id, high_id = entry.split_partition_id_low, entry.split_partition_id_high
            click.echo(
                f"split of {pid} at {ks.format_key(point)} committed (sequence {file.sequence}): "
                f"children {low_id} and {high_id}",
                err=True,
            )
            state: str = "SPLITTING"
            if wait:
                deadline = time.monotonic() + timeout
                last = ""
                while True:
                    file = coord.current(name)
                    if all(e.partition_id != pid for e in file.partitions):
                        state = "FINALIZED"
                        click.echo(f"split of {pid} finalized (sequence {file.sequence})", err=True)
                        break
                    if time.monotonic() > deadline:
                        raise click.ClickException(f"split of {pid} not finalized after {timeout:.0f}s")
                    line = _split_progress(client, file, pid)
                    if line != last:
                        click.echo(line, err=True)
                        last = line
                    time.sleep(0.5)
            if state == "FINALIZED":
                low, high = _split_child(file, low_id), _split_child(file, high_id)
            else:
                r = file.range_of(file.index_of(pid))
                low = SplitChildJson(
                    partition_id=low_id,
                    begin=ks.to_json(r.begin),
                    end=ks.to_json(point),
                    servers=_placements(entry.split_servers_low),
                )
                high = SplitChildJson(
                    partition_id=high_id,
                    begin=ks.to_json(point),
                    end=ks.to_json(r.end),
                    servers=_placements(entry.split_servers_high),
                )
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    result = SplitResult(
        table=name,
        partition_id=pid,
        split_point=ks.to_json(point),
        low=low,
        high=high,
        state="FINALIZED" if state == "FINALIZED" else "SPLITTING",
        metadata_sequence=file.sequence,
        seconds=round(time.monotonic() - started, 3),
    )
    if output == "json":
        emit(result)
        return
    show(
        f"{name}: partition {pid} {'split' if state == 'FINALIZED' else 'splitting'} at {ks.format_key(point)}",
        f"  low  {low.partition_id} [{_bound(low.begin, '-inf')}, {_bound(low.end, '+inf')}) "
        f"on {_fmt_placements(low.servers)}",
        f"  high {high.partition_id} [{_bound(high.begin, '-inf')}, {_bound(high.end, '+inf')}) "
        f"on {_fmt_placements(high.servers)}",
    )


# -- the partition lifecycle: add-replica / remove-replica (table partitioning seed 4.2, 4.3) ------


class UnknownServerError(ShoalError):
    """A lifecycle command named a server that is not a running (registered) storage node."""

    def __init__(self, server_id: str, known: list[str]) -> None:
        super().__init__(f"unknown server {server_id!r}: running nodes are {', '.join(known) or 'none'}")
        self.server_id = server_id
        self.known = known


class OnlyInSyncReplicaError(InvalidOperationError):
    """``remove-replica`` of the partition's last in-sync LIVE replica without
    ``--allow-under-replication``: every other LIVE replica is out of sync, so removing it would let
    one of them lead (an unclean election, DESIGN.md section 7). Nothing was committed."""

    def __init__(self, server_id: str, partition_id: str, out_of_sync: tuple[int, ...]) -> None:
        super().__init__(
            f"{server_id} holds the only in-sync LIVE replica of partition {partition_id} (placements "
            f"{', '.join(map(str, out_of_sync))} are out of sync): removing it would let an out-of-sync replica "
            "lead; wait until one is in sync again, or give --allow-under-replication"
        )
        self.server_id = server_id
        self.partition_id = partition_id
        self.out_of_sync = out_of_sync


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


def remove_replica(
    client: MetadataClient, table: str, partition: str, server: str, *, allow_under_replication: bool = False
) -> tuple[MetadataFile, Placement]:
    """Commit a LeaveServer of ``server`` from ``partition`` (its replica goes to UNLOAD).

    ``allow_under_replication``: even if fewer LIVE replicas than the replication factor remain, or
    the replica is the last in-sync LIVE one (:class:`OnlyInSyncReplicaError` without it): the way out
    when the in-sync replicas' nodes are gone for good (while one of them is LIVE in METADATA, an
    out-of-sync replica never leads, DESIGN.md section 7)."""
    coord = client.coordinator
    current = coord.current(table)
    pid = resolve_partition(current, partition)
    found = current.partition(pid).find(server)
    if found is None and server not in registered_servers(client):
        raise UnknownServerError(server, registered_servers(client))
    if found is not None and found[0] == "servers" and not allow_under_replication:
        # LeaveServer counts LIVE replicas; the election counts in-sync ones (DESIGN.md section 7).
        # Read here, not in the commit's compare-and-swap: a replica marked out of sync between this
        # read and the commit is not seen.
        others = [p.placement_id for p in current.partition(pid).servers if p.server_id != server]
        out = read_in_sync(client.zk, client.layout, pid).out_of_sync
        if found[1].placement_id not in out and others and all(p in out for p in others):
            raise OnlyInSyncReplicaError(server, pid, tuple(others))
    file = coord.leave(table, pid, server, allow_under_replication=allow_under_replication)
    # the server may still be leaving under an older placement (removed, added back, removed again):
    # the one this leave moved is the newest (placement ids only grow)
    placement = max(
        (p for p in file.partition(pid).servers_leaving if p.server_id == server), key=lambda p: p.placement_id
    )
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
                show_progress(f"{what}: {pid[:8]}#{pl} is {now_state}, waiting for {s}{detail}")
        time.sleep(1.0)


class LifecycleTimeoutError(ShoalError):
    """``--wait`` gave up: the lifecycle operation is committed and still in progress."""

    def __init__(self, what: str, timeout_s: float, pending: list[str]) -> None:
        super().__init__(
            f"{what}: not finished after {timeout_s:.0f} s (still in progress, nothing undone): {', '.join(pending)}"
        )
        self.pending = pending


def _replica_change_command(action: Literal["add-replica", "remove-replica"]) -> Any:
    def command(
        table: str,
        partition: str,
        server: str,
        wait: bool,
        timeout: float,
        output: str,
        allow_under_replication: bool = False,
        **conn: Any,
    ) -> None:
        started = time.monotonic()
        try:
            with MetadataClient(metadata_config(conn)) as client:
                if action == "add-replica":
                    file, placement = add_replica(client, table, partition, server)
                else:
                    file, placement = remove_replica(
                        client, table, partition, server, allow_under_replication=allow_under_replication
                    )
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
    f = timeout_option(300.0, "Seconds --wait waits.")(f)
    f = click.option("--wait", is_flag=True, help="Wait until the operation finished (progress on stderr).")(f)
    f = click.option("--server", type=SERVER_ID, required=True, help="The storage node (server id).")(f)
    return click.argument("table", type=TABLE_NAME)(click.argument("partition")(f))


add_replica_command = table_group.command("add-replica")(_lifecycle_options(_replica_change_command("add-replica")))
add_replica_command.help = (
    "Add a replica of PARTITION (its id or a unique prefix) on --server: it joins in LOAD, catches up "
    "from Kafka and becomes LIVE when the partition's leader commits JOIN_FINALIZE."
)
remove_replica_command = table_group.command("remove-replica")(
    _lifecycle_options(
        click.option(
            "--allow-under-replication",
            is_flag=True,
            help="Remove it even if fewer LIVE replicas than the replication factor remain (e.g. the in-sync "
            "replicas' nodes are gone for good: an out-of-sync replica leads only once no LIVE replica is in sync).",
        )(_replica_change_command("remove-replica"))
    )
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
    "rebalance_table",
    "remove_replica",
    "replica_state",
    "split_command",
    "table_group",
    "wait_for_states",
]
