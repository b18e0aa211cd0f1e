"""``shoal verify TABLE``: do all replicas of every partition hold the same rows, and are the WAL chains intact?

Issue 5 item 6. For each partition and each of its placements: the replica's chain (segment ids
from the latest major to root), row count and content hash (``describe replica`` over Arrow
Flight, :mod:`storage_node.replication.describe`), and whether all replicas agree (same row count
and content hash). For each placement's WAL channel the GTID hash chain (TokuMX, seed 003) is
checked from the channel's Tail to its end (from the genesis hash when nothing was truncated).

Exit code 0 when everything agrees and every chain is intact, 1 otherwise (2 for errors such as an
unknown table). Meant for a quiet table: rows still in a leader's memtable and not yet in a
follower's overlay show up as a disagreement while writes are in flight.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from metadata.client import MetadataClient
from shoal.errors import ShoalError
from shoal_app.cli.connection import connection_options, metadata_config
from shoal_app.cli.context import output_option


def check_wal_channel(bootstrap_servers: str, topic: str) -> dict[str, Any]:
    """The GTID hash chain of one WAL channel: records read, ok, and the first error."""
    from confluent_kafka import KafkaException

    from shoal.kafka_admin import admin_client, log_start_and_end
    from shoal.wire.records import GENESIS_HASH, verify_chain
    from shoal.wire.wal_channel import read_channel

    out: dict[str, Any] = {"topic": topic, "records": 0, "tail": None, "append": None, "ok": True, "error": None}
    try:
        admin = admin_client(bootstrap_servers)
        if _missing(admin, topic):
            out["error"] = "no channel (this placement never led)"
            return out
        low, high = log_start_and_end(bootstrap_servers, topic)
        out.update(tail=low, append=high)
        records = [r.record for r in read_channel(bootstrap_servers, topic, low)]
        out["records"] = len(records)
        verify_chain(records, prev_hash=GENESIS_HASH if low == 0 else None)
    except ShoalError as exc:
        out.update(ok=False, error=f"{type(exc).__name__}: {exc}")
    except KafkaException as exc:
        out.update(ok=False, error=f"KafkaException: {exc}")
    return out


def _missing(admin: Any, topic: str) -> bool:
    meta = admin.list_topics(timeout=30).topics.get(topic)  # all topics: never auto-creates one
    return meta is None or meta.error is not None


def verify_table(client: MetadataClient, table: str) -> dict[str, Any]:
    from metadata.node_registry import lookup_node
    from shoal.scan import describe_remote
    from shoal.topics import TopicNames

    file = client.coordinator.current(table)
    topics = TopicNames(client.config.topic_prefix)
    bootstrap = client.config.bootstrap_servers
    described: dict[str, list[dict[str, Any]] | str] = {}
    partitions = []
    for entry in file.partitions:
        replicas: list[dict[str, Any]] = []
        for placement in entry.servers:
            server = placement.server_id
            if server not in described:
                try:
                    described[server] = describe_remote(lookup_node(client.zk, client.layout, server), table)
                except ShoalError as exc:
                    described[server] = f"{type(exc).__name__}: {exc}"
            found = described[server]
            base = {"server_id": server, "placement_id": placement.placement_id}
            if isinstance(found, str):
                replicas.append({**base, "error": found})
                continue
            mine = [d for d in found if d.get("partition_id") == entry.partition_id
                    and d.get("placement_id") == placement.placement_id]  # fmt: skip
            replicas.append({**base, **mine[0]} if mine else {**base, "error": "the node does not hold this replica"})
        states = {(r.get("row_count"), r.get("content_hash")) for r in replicas}
        agree = all("error" not in r for r in replicas) and len(states) == 1
        channels = [check_wal_channel(bootstrap, topics.wal(entry.partition_id, p.placement_id)) for p in entry.servers]
        partitions.append(
            {
                "partition_id": entry.partition_id,
                "agree": agree,
                "chains_equal": len({tuple(r.get("chain") or ()) for r in replicas}) == 1,
                "replicas": replicas,
                "wal_channels": channels,
                "wal_chains_ok": all(c["ok"] for c in channels),
            }
        )
    ok = all(p["agree"] and p["wal_chains_ok"] for p in partitions)
    return {"table": table, "ok": ok, "partitions": partitions}


@click.command("verify")
@click.argument("table_name")
@output_option
@connection_options
def verify_command(table_name: str, output: str, **conn: Any) -> None:
    """Check that every replica of TABLE holds the same rows and every WAL channel's hash chain is intact."""
    try:
        with MetadataClient(metadata_config(conn)) as client:
            report = verify_table(client, table_name)
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    if output == "json":
        click.echo(json.dumps(report, indent=2, sort_keys=True))
    else:
        click.echo(f"table {table_name}: {'OK' if report['ok'] else 'MISMATCH'}")
        for p in report["partitions"]:
            click.echo(f"  partition {p['partition_id']}: replicas {'agree' if p['agree'] else 'DIFFER'}, "
                       f"WAL chains {'ok' if p['wal_chains_ok'] else 'BROKEN'}")  # fmt: skip
            for r in p["replicas"]:
                if "error" in r:
                    click.echo(f"    {r['server_id']}#{r['placement_id']}: error: {r['error']}")
                    continue
                who = f"{r['server_id']}#{r['placement_id']} {r.get('role', '?'):8}"
                click.echo(f"    {who} rows {r['row_count']:>8}  hash {r['content_hash'][:16]}  "
                           f"chain {len(r['chain'])} segments, root {r['root']}")  # fmt: skip
            for c in p["wal_channels"]:
                state = "ok" if c["ok"] else "BROKEN"
                click.echo(f"    wal {c['topic']}: {c['records']} records [{c['tail']}, {c['append']}) {state}"
                           + (f" ({c['error']})" if c["error"] else ""))  # fmt: skip
    if not report["ok"]:
        sys.exit(1)
