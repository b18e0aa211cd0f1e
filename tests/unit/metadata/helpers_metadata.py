"""Builders shared by the metadata unit tests (imported as a module next to them)."""

from __future__ import annotations

import itertools

from metadata.keyspace import Keyspace
from metadata.metadata_file import MetadataFile, Placement
from metadata.operations import create_file
from metadata.table import Column, ColumnType, TableDefinition


def table(keyspace: Keyspace = Keyspace.UINT64, rf: int = 2, name: str = "events") -> TableDefinition:
    ktype = ColumnType.UINT64 if keyspace is Keyspace.UINT64 else ColumnType.STRING
    return TableDefinition(
        name,
        (
            Column("k", ktype, nullable=False),
            Column("ts", ColumnType.TIMESTAMP_MS, False),
            Column("v", ColumnType.STRING),
        ),
        ("k", "ts"),
        "k",
        rf,
    )


class Ids:
    """A stand-in for the ZooKeeper placement counter."""

    def __init__(self) -> None:
        self._next = itertools.count(1)

    def place(self, *servers: str) -> tuple[Placement, ...]:
        return tuple(Placement(s, next(self._next)) for s in servers)


def new_file(
    keyspace: Keyspace = Keyspace.UINT64, rf: int = 2, split_points: tuple[bytes, ...] = (), ids: Ids | None = None
) -> MetadataFile:
    ids = ids or Ids()
    t = table(keyspace, rf)
    servers = [f"node-{i}" for i in range(1, rf + 1)]
    return create_file(t, [ids.place(*servers) for _ in range(len(split_points) + 1)], split_points)


def no_rows_acked(file: MetadataFile, partition_id: str) -> dict[int, tuple[int, int] | None]:
    """SPLIT_FINALIZE evidence for a parent that accepted no row: every child placement, nothing to ack."""
    e = file.partition(partition_id)
    return {p.placement_id: None for p in e.split_servers_low + e.split_servers_high}
