"""``shoal table``: create, describe, list and history of tables (their METADATA files)."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from metadata.client import MetadataClient
from metadata.coordinator import MetadataCoordinator
from metadata.in_sync import read_in_sync
from metadata.metadata_file import MetadataFile, Placement
from metadata.table import Column, TableDefinition
from shoal.errors import ShoalError
from shoal_app.cli.connection import connection_options, metadata_config
from shoal_app.cli.context import emit, new_table, output_option, show
from shoal_app.cli.models import (
    HistoryEntry,
    PartitionJson,
    PartitionLeader,
    PlacementJson,
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


def describe_table(coord: MetadataCoordinator, name: str) -> TableDescription:
    """The current METADATA of table ``name`` with each partition's leader and epoch."""
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
    """Show the current METADATA of table NAME, with the leader and epoch of each partition."""
    with _coordinator(**conn) as coord:
        try:
            info = describe_table(coord, name)
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
            str(p.epoch),
            _fmt_placements(p.servers),
            "; ".join(changes) or "-",
        )
    show(parts)


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


__all__ = ["describe_json", "describe_table", "table_group"]
