"""``shoal verify TABLE``: do all replicas of every partition hold the same rows, and are the WAL chains intact?

For each partition and each of its placements: the replica's chain (segment ids
from the latest major to root), row count and content hash (``describe replica`` over Arrow
Flight, :mod:`storage_node.replication.describe`), and whether all replicas agree (same row count
and content hash). For each placement's WAL channel the GTID hash chain (TokuMX, seed 003) is
checked from the channel's Tail to its end (from the genesis hash when nothing was truncated).

Exit code 0 when everything agrees and every chain is intact, 1 otherwise (2 for errors such as an
unknown table). Meant for a quiet table: rows still in a leader's memtable and not yet in a
follower's overlay show up as a disagreement while writes are in flight.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from metadata.client import MetadataClient
from shoal.errors import ShoalError
from shoal.kafka.settings import KafkaSettings
from shoal_app.cli.connection import connection_options, metadata_config
from shoal_app.cli.context import emit, new_table, output_option, show
from shoal_app.cli.models import (
    PartitionVerification,
    ReplicaDescription,
    ReplicaError,
    Verification,
    WalChannelCheck,
)


def check_wal_channel(kafka: KafkaSettings, topic: str) -> WalChannelCheck:
    """The GTID hash chain of one WAL channel: records read, ok, and the first error."""
    from confluent_kafka import KafkaException

    from shoal.kafka import clients
    from shoal.kafka.admin import log_start_and_end
    from shoal.kafka.readers import read_wal_channel
    from shoal.wire.records import GENESIS_HASH, verify_chain

    out = WalChannelCheck(topic=topic, records=0, tail=None, append=None, ok=True, error=None)
    try:
        admin = clients.admin(kafka)
        if _missing(admin, topic):
            out.error = "no channel (this placement never led)"
            return out
        low, high = log_start_and_end(kafka, topic)
        out.tail, out.append = low, high
        records = [r.record for r in read_wal_channel(kafka, topic, low)]
        out.records = len(records)
        verify_chain(records, prev_hash=GENESIS_HASH if low == 0 else None)
    except ShoalError as exc:
        out.ok, out.error = False, f"{type(exc).__name__}: {exc}"
    except KafkaException as exc:
        out.ok, out.error = False, f"KafkaException: {exc}"
    return out


def _missing(admin: Any, topic: str) -> bool:
    meta = admin.list_topics(timeout=30).topics.get(topic)  # all topics: never auto-creates one
    return meta is None or meta.error is not None


def verify(client: MetadataClient, table: str) -> Verification:
    """Every partition of ``table``: do its replicas agree, and are its WAL channels' chains intact?"""
    from metadata.node_registry import lookup_node
    from shoal.scan import describe_remote
    from shoal.topics import TopicNames

    file = client.coordinator.current(table)
    topics = TopicNames(client.config.topic_prefix)
    kafka = client.config.kafka
    described: dict[str, list[dict[str, Any]] | str] = {}
    partitions = []
    for entry in file.partitions:
        replicas: list[ReplicaError | ReplicaDescription] = []
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
                replicas.append(ReplicaError(server_id=server, placement_id=placement.placement_id, error=found))
                continue
            mine = [
                d
                for d in found
                if d.get("partition_id") == entry.partition_id and d.get("placement_id") == placement.placement_id
            ]
            replicas.append(
                ReplicaDescription.model_validate({**base, **mine[0]})
                if mine
                else ReplicaError(
                    server_id=server, placement_id=placement.placement_id, error="the node does not hold this replica"
                )
            )
        described_ok = [r for r in replicas if isinstance(r, ReplicaDescription)]
        states = {(r.row_count, r.content_hash) for r in described_ok}
        agree = len(described_ok) == len(replicas) and len(states) == 1
        chains = {tuple(r.chain) if isinstance(r, ReplicaDescription) else () for r in replicas}
        channels = [check_wal_channel(kafka, topics.wal(entry.partition_id, p.placement_id)) for p in entry.servers]
        partitions.append(
            PartitionVerification(
                partition_id=entry.partition_id,
                agree=agree,
                chains_equal=len(chains) == 1,
                replicas=replicas,
                wal_channels=channels,
                wal_chains_ok=all(c.ok for c in channels),
            )
        )
    ok = all(p.agree and p.wal_chains_ok for p in partitions)
    return Verification(table=table, ok=ok, partitions=partitions)


def verify_table(client: MetadataClient, table: str) -> dict[str, Any]:
    """:func:`verify` as the JSON ``shoal verify -o json`` prints."""
    return verify(client, table).to_json()


@click.command("verify")
@click.argument("table_name")
@output_option
@connection_options
def verify_command(table_name: str, output: str, **conn: Any) -> None:
    """Check that every replica of TABLE holds the same rows and every WAL channel's hash chain is intact."""
    try:
        with MetadataClient(metadata_config(conn)) as client:
            report = verify(client, table_name)
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    if output == "json":
        emit(report)
    else:
        show(f"table {table_name}: {'OK' if report.ok else 'MISMATCH'}")
        for p in report.partitions:
            show(
                f"  partition {p.partition_id}: replicas {'agree' if p.agree else 'DIFFER'}, "
                f"WAL chains {'ok' if p.wal_chains_ok else 'BROKEN'}"
            )
            replicas = new_table("replica", "rows", "content hash", "chain", right=("rows",))
            for r in p.replicas:
                who = f"{r.server_id}#{r.placement_id}"
                if isinstance(r, ReplicaError):
                    replicas.add_row(who, "-", f"error: {r.error}", "")
                else:
                    chain = f"{len(r.chain)} segments, root {r.root}"
                    replicas.add_row(who, str(r.row_count), r.content_hash[:16], chain)
            channels = new_table("WAL channel", "records", "[tail, append)", "chain", right=("records",))
            for c in p.wal_channels:
                state = "ok" if c.ok else "BROKEN"
                channels.add_row(
                    c.topic, str(c.records), f"[{c.tail}, {c.append})", state + (f" ({c.error})" if c.error else "")
                )
            show(replicas, channels)
    if not report.ok:
        sys.exit(1)
