"""Split benchmark: a split moves pieces of segment files, re-inserting moves every row through the write path.

A parent partition of N rows (minor segments of ``--segment-rows``) is split in two at its middle
key, as the parent's leader does it (:mod:`storage_node.roles.split`): each segment is rewritten by
the child's key range keeping its id (a pyarrow filter of the Parquet file), and each child replica
stores the piece's bytes and fast-forwards its segment list onto it (the follower's receive path).
Bytes moved = the piece files (what the staging channels carry).

The baseline, measured in the same run on the same rows, is re-inserting the rows into the children:
each row is encoded as an ingest Arrow IPC batch (producer), decoded and stamped with a GTID (the
child's leader), merged in a memtable and flushed as a segment. Bytes moved = the ingest payload,
the same payload again as the WAL record, and the child's segment file published to its followers
(which store it, as the children store the pieces in the split).

    python -m bench.split                      # 200k rows, seconds
    python -m bench.split --rows 1000000       # the 1M-row partition of the issue (~1 minute)
    python -m bench.split --output json        # {"ratio": re-insert seconds / split seconds, ...}

Offline (no Kafka): both sides run the local steps a node runs, without the network between, so
the seconds compare the CPU and disk work only; on a cluster the re-insert also pays one Kafka
transaction per batch (ingest -> WAL) and the split one per segment. The bytes are what crosses Kafka.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench import common


def _table() -> Any:
    from metadata.table import Column, ColumnType, TableDefinition

    return TableDefinition(
        "bench", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
    )


def _ingest_rows(keys: np.ndarray, value_bytes: int) -> pa.Table:
    from shoal.wire.ingest import ingest_schema

    values = pa.array([("x" * value_bytes)] * len(keys), pa.string())
    return pa.table(
        {"k": pa.array(keys, pa.uint64()), "v": values, "_shoal_deleted": np.zeros(len(keys), dtype=bool)},
        schema=ingest_schema(_table().arrow_schema()),
    )


def build_parent(directory: Path, rows: int, segment_rows: int, value_bytes: int) -> Any:
    from shoal.ids import new_partition_id
    from shoal.wire.records import Gtid
    from storage_node.replica import PartitionReplica, versioned_rows

    parent = PartitionReplica(_table(), new_partition_id(), 1, directory)
    rng = np.random.default_rng(7)
    keys = rng.permutation(np.arange(rows, dtype=np.uint64) * 7919)
    for i, start in enumerate(range(0, rows, segment_rows)):
        chunk = keys[start : start + segment_rows]
        parent.append(versioned_rows(_ingest_rows(chunk, value_bytes), Gtid(1, start)), i)
        parent.flush(1)
    return parent


def _add(replica: Any, record: Any) -> bool:
    """Fast-forward-add onto an empty list (a major based on a segment the receiver never had)."""
    return bool(replica.chain.root is None and record.entry.base_segment_id is not None)


def split_side(parent: Any, point: bytes, directory: Path) -> dict[str, Any]:
    """Stage both children's pieces, then receive them on one child replica each (fast-forward)."""
    from metadata.keyspace import UNBOUNDED, KeyRange
    from shoal.ids import new_partition_id
    from shoal.segments import read_segment
    from shoal.segments.parquet_io import segment_path, write_segment_bytes
    from storage_node.replica import PartitionReplica
    from storage_node.replication.split import stage_pieces, staging_replica

    moved = 0
    started = time.perf_counter()
    targets = [
        (staging_replica(parent.table, new_partition_id(), parent.placement_id, directory), key_range)
        for key_range in (KeyRange(UNBOUNDED, point), KeyRange(point, UNBOUNDED))
    ]
    staged = stage_pieces(parent, targets)
    for staging, _range in targets:
        pieces = [p for st, p in staged if st is staging]
        receiver = PartitionReplica(parent.table, staging.partition_id, 2, directory / "children")
        for piece in pieces:
            record = staging.record(piece.segment_id)
            data = segment_path(staging.directory, piece.segment_id).read_bytes()
            moved += len(data)
            write_segment_bytes(receiver.directory, piece.segment_id, [data], expected_sha256=record.sha256)
            receiver.apply_received(
                record, add=receiver.chain.root is None and record.entry.base_segment_id is not None
            )
        assert sum(read_segment(receiver.directory, p.segment_id).num_rows for p in pieces) == sum(
            p.rows for p in pieces
        )
    return {"seconds": time.perf_counter() - started, "bytes": moved}


def reinsert_side(parent: Any, point: bytes, directory: Path, batch_rows: int) -> dict[str, Any]:
    """Re-insert every row into the children through the write path (encode, decode, stamp, flush)."""
    import pyarrow.compute as pc

    from metadata.keyspace import UNBOUNDED, KeyRange
    from shoal.ids import new_partition_id
    from shoal.segments import read_segment
    from shoal.segments.parquet_io import segment_path, write_segment_bytes
    from shoal.segments.versioned import SYSTEM_COLUMNS
    from shoal.wire.arrow_ipc import decode_batch, encode_batch
    from shoal.wire.records import Gtid
    from storage_node.replica import PartitionReplica, versioned_rows
    from storage_node.replication.split import piece_rows

    schema_names = [*parent.table.arrow_schema().names]
    moved = 0
    started = time.perf_counter()
    for key_range in (KeyRange(UNBOUNDED, point), KeyRange(point, UNBOUNDED)):
        child_id = new_partition_id()
        child = PartitionReplica(parent.table, child_id, 3, directory / "reinsert")
        follower = PartitionReplica(parent.table, child_id, 4, directory / "followers")
        offset, seq = 0, 0
        for entry in parent.chain.walk():
            rows = piece_rows(read_segment(parent.directory, entry.segment_id), parent.table, key_range)
            plain = rows.select(schema_names).append_column(
                "_shoal_deleted", pc.equal(rows.column(SYSTEM_COLUMNS[2]), True)
            )
            for start in range(0, plain.num_rows, batch_rows):
                payload = encode_batch(plain.slice(start, batch_rows))
                moved += 2 * len(payload)  # the ingest message, and the same payload as the WAL record
                batch = decode_batch(payload)
                child.append(versioned_rows(batch, Gtid(2, seq)), offset)
                offset, seq = offset + 1, seq + batch.num_rows
            record = child.flush(2)
            if record is not None:  # published to the child's followers, which store it (as in the split)
                data = segment_path(child.directory, record.segment_id).read_bytes()
                moved += len(data)
                write_segment_bytes(follower.directory, record.segment_id, [data], expected_sha256=record.sha256)
                follower.apply_received(
                    record, add=follower.chain.root is None and record.entry.base_segment_id is not None
                )
    return {"seconds": time.perf_counter() - started, "bytes": moved}


def main(argv: list[str] | None = None) -> None:
    p: argparse.ArgumentParser = common.parser(__doc__.splitlines()[0], cluster=False)
    p.add_argument("--rows", type=common.positive_int, default=200_000, help="rows in the parent partition")
    p.add_argument("--segment-rows", type=common.positive_int, default=50_000, help="rows per parent segment")
    p.add_argument("--batch-rows", type=common.positive_int, default=5_000, help="rows per re-inserted ingest batch")
    p.add_argument("--value-bytes", type=common.positive_int, default=32, help="bytes of the string column per row")
    p.add_argument("--dir", type=Path, default=None, help="where to write segments (default: a temp dir)")
    args = p.parse_args(argv)
    say = common.progress_printer(args.output)
    from metadata.keyspace import Keyspace

    point = Keyspace.UINT64.encode(args.rows // 2 * 7919)
    with tempfile.TemporaryDirectory(prefix="shoal-bench-split-", dir=args.dir) as tmp:
        base = Path(tmp)
        say(f"parent partition of {args.rows:,} rows")
        parent = build_parent(base / "parent", args.rows, args.segment_rows, args.value_bytes)
        say("split: pieces by key range, keeping segment ids, fast-forwarded by the children")
        split = split_side(parent, point, base / "split")
        say("baseline: re-insert every row into the children")
        reinsert = reinsert_side(parent, point, base / "reinsert", args.batch_rows)
    ratio = reinsert["seconds"] / split["seconds"] if split["seconds"] > 0 else None
    result = {
        "benchmark": "split vs re-insert",
        "rows": args.rows,
        "split": split,
        "reinsert": reinsert,
        "ratio": ratio,
        "ratio_meaning": "re-insert seconds / split seconds (higher = split wins)",
        "bytes_ratio": reinsert["bytes"] / split["bytes"] if split["bytes"] else None,
        "settings": {k: v for k, v in vars(args).items() if k not in ("output", "dir")},
    }
    if args.output == "json":
        print(json.dumps(result, indent=2, default=str))
        return
    print(f"split of a {args.rows:,}-row partition (offline: the node's local steps)")
    print(f"  split      {split['seconds']:8.3f} s  {split['bytes']:>14,} bytes moved")
    print(f"  re-insert  {reinsert['seconds']:8.3f} s  {reinsert['bytes']:>14,} bytes moved")
    print(f"  ratio      {ratio:8.1f}x faster, {result['bytes_ratio']:.1f}x fewer bytes")


if __name__ == "__main__":
    main()
