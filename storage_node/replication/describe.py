"""``describe replica``: what one replica holds, for ``shoal verify`` (DESIGN.md section 6).

For a replica: its chain (ids from the latest major to root, oldest first, and the root), the row
count and a content hash of its rows. The rows are what a scan returns (segments + memtable/overlay,
newest version per key by GTID, tombstones hidden) *with* their GTID columns, sorted by primary
key, so the hash is independent of the order writes arrived in, of how they are split into
segments, and of Arrow chunking; two replicas agree iff they hold the same versions of the same
rows.

Tombstones are left out of the hash on purpose. A tombstone changes no read but by hiding the rows
it deletes, and those reads are in the hash; two replicas that differ only in tombstones (one
kept ``k`` deleted at 1:5, the other lost both that tombstone and the row at 1:0 it hid) answer
every scan alike, and a full compaction drops tombstones anyway. If the replica without the
tombstone ever got the hidden row back (a replayed older segment), its scan, and so its hash,
would differ from then on. ``shoal verify``'s coverage check still reads every delete still on the
channels and requires each replica to reach it (a newer version or no row).

``catch_up`` is the replica's catch-up state (:mod:`storage_node.replication.bootstrap`): ``state``
SERVING or BOOTSTRAPPING, the reason, and progress (segments-channel offsets fetched / target, WAL
offsets, segments and bytes fetched, seconds), for ``shoal table describe`` and the lifecycle
commands.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from storage_node.replica import PartitionReplica


def content_hash(rows: pa.Table, key_columns: list[str]) -> str:
    """sha256 of ``rows`` sorted by ``key_columns``, as one Arrow IPC stream of its values: schema
    metadata dropped and every field nullable, so segments written by the node and by the Spark
    compaction (which may declare nullability differently) hash alike when their rows are equal."""
    ordered = rows.sort_by([(k, "ascending") for k in key_columns]).replace_schema_metadata(None)
    ordered = ordered.cast(pa.schema([f.with_nullable(True) for f in ordered.schema])).combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, ordered.schema) as writer:
        for batch in ordered.to_batches():
            writer.write_batch(batch)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


def key_bounds(rows: pa.Table, partition_key: str) -> dict[str, Any]:
    """The lowest and highest partition key this replica holds (None when empty): ``shoal verify``
    checks them against the partition's key range (EventQL table partitioning, section 2), so rows a
    split or a misrouted write left in the wrong partition cannot pass as agreement."""
    if rows.num_rows == 0:
        return {"key_min": None, "key_max": None}
    bounds = pc.min_max(rows.column(partition_key))
    return {"key_min": bounds["min"].as_py(), "key_max": bounds["max"].as_py()}


def describe_replica(replica: PartitionReplica) -> dict[str, Any]:
    chain = replica.chain
    rows = replica.scan(include_system=True)
    overlay = replica.overlay
    return {
        "table": replica.table.name,
        "partition_id": replica.partition_id,
        "placement_id": replica.placement_id,
        "root": chain.root,
        "chain": [e.segment_id for e in chain.since_latest_major()],
        "segments": len(chain),
        "row_count": rows.num_rows,
        "content_hash": content_hash(rows, list(replica.key_columns)),
        **key_bounds(rows, replica.table.partition_key),
        "overlay_records": 0 if overlay is None else overlay.records,
        "memtable_rows": replica.memtable.rows,
        "catch_up": replica.catch_up.snapshot().as_dict(),
    }
