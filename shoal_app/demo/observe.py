"""What the full demo looks at while it runs: rows in shoal, rows per replica, leaders, and lag.

Read-only views over public interfaces: scans and ``describe replica`` over Arrow Flight
(:mod:`shoal.scan`, as ``shoal scan`` and ``shoal verify`` use them; nodes found with
:func:`metadata.node_registry.lookup_node`), leader epochs from
ZooKeeper (:func:`metadata.election.read_epoch`), and lag from the snapshot that ``shoal monitor``
serves (shape in :mod:`monitor.models`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from metadata.client import MetadataClient
from metadata.election import read_epoch
from shoal.errors import ShoalError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Leader:
    partition_id: str
    server_id: str | None
    placement_id: int | None
    epoch: int


def partition_ids(client: MetadataClient, table: str) -> list[str]:
    return [p.partition_id for p in client.coordinator.current(table).partitions]


def leaders(client: MetadataClient, table: str) -> dict[str, Leader]:
    out = {}
    for pid in partition_ids(client, table):
        rec = read_epoch(client.zk, client.layout, pid)
        out[pid] = Leader(pid, rec.server_id, rec.placement_id, rec.epoch)
    return out


def live_nodes(client: MetadataClient, servers: list[str]) -> list[str]:
    from metadata.node_registry import lookup_node

    alive = []
    for server in servers:
        try:
            lookup_node(client.zk, client.layout, server)
        except ShoalError:
            continue
        alive.append(server)
    return alive


def scan_leaders(client: MetadataClient, table: str, timeout_s: float = 60.0) -> pa.Table:
    """Every row of ``table``, each partition read from its leader (what ``shoal scan`` returns)."""
    from metadata.node_registry import lookup_node
    from shoal.scan import ScanRequest, scan_remote

    parts = []
    for pid, lead in leaders(client, table).items():
        if lead.server_id is None:
            raise ShoalError(f"partition {pid} of {table} has no leader")
        location = lookup_node(client.zk, client.layout, lead.server_id)
        parts.append(
            scan_remote(location, ScanRequest(table, pid), timeout_s=timeout_s, scan=client.config.connection.scan)
        )
    return pa.concat_tables(parts)


def count_rows(client: MetadataClient, table: str) -> int | None:
    """Rows in shoal now (sum of leader scans), or None while a partition has no reachable leader."""
    try:
        return scan_leaders(client, table).num_rows
    except ShoalError as exc:
        log.info("scan not possible now: %s", exc)
        return None


def describe_nodes(client: MetadataClient, table: str, servers: list[str]) -> dict[str, list[dict[str, Any]] | None]:
    """``describe replica`` of every replica of ``table`` on each node (None if the node does not answer)."""
    from metadata.node_registry import lookup_node
    from shoal.scan import describe_remote

    out: dict[str, list[dict[str, Any]] | None] = {}
    for server in servers:
        try:
            out[server] = describe_remote(
                lookup_node(client.zk, client.layout, server), table, timeout_s=30, scan=client.config.connection.scan
            )
        except ShoalError:
            out[server] = None
    return out


def replica_rows(client: MetadataClient, table: str, servers: list[str]) -> dict[str, int | None]:
    """Rows held per node (summed over its replicas of ``table``; None if the node does not answer)."""
    return {
        server: None if found is None else sum(int(d.get("row_count") or 0) for d in found)
        for server, found in describe_nodes(client, table, servers).items()
    }


def unflushed_rows(client: MetadataClient, table: str, servers: list[str]) -> int | None:
    """Rows still in the leaders' memtables (not yet in a segment); None if a node does not answer."""
    total = 0
    for found in describe_nodes(client, table, servers).values():
        if found is None:
            return None
        total += sum(int(d.get("memtable_rows") or 0) for d in found if d.get("role") == "leader")
    return total


@dataclass(frozen=True)
class Lag:
    """The few lag figures a progress line shows, from one monitor snapshot."""

    status: str
    spark_lag_records: int | None
    ingest_lag_records: int
    wal_lag_records: dict[str, int]
    """Per server: records of its leaders' WAL channels it has not acked yet."""
    unacked_segments: dict[str, int]
    """Per server: segments of the current leaders' channels it has not acked yet."""
    minors_awaiting_compaction: int
    problems: int

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def lag_from_snapshot(snapshot: dict[str, Any]) -> Lag:
    wal: dict[str, int] = {}
    segs: dict[str, int] = {}
    ingest = 0
    minors = 0
    for table in snapshot.get("tables", []):
        for part in table.get("partitions", []):
            ingest += int(part.get("ingest", {}).get("lag_records") or 0)
            for chan in part.get("wal", []):
                if not chan.get("is_leader_channel") or not chan.get("exists"):
                    continue
                for r in chan.get("replicas", []):
                    wal[r["server_id"]] = wal.get(r["server_id"], 0) + int(r.get("lag_records") or 0)
            for chan in part.get("segments", []):
                if not chan.get("is_leader_channel") or not chan.get("exists"):
                    continue
                minors += int(chan.get("minors_awaiting_compaction") or 0)
                for r in chan.get("replicas", []):
                    segs[r["server_id"]] = segs.get(r["server_id"], 0) + int(r.get("unacked_segments") or 0)
    queries = snapshot.get("spark_queries", [])
    spark = sum(int(q.get("lag_records") or 0) for q in queries) if queries else None
    return Lag(
        status=str(snapshot.get("status", "?")),
        spark_lag_records=spark,
        ingest_lag_records=ingest,
        wal_lag_records=dict(sorted(wal.items())),
        unacked_segments=dict(sorted(segs.items())),
        minors_awaiting_compaction=minors,
        problems=len(snapshot.get("problems", [])),
    )
