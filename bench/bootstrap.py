"""Replica bootstrap benchmark: catching up from segments against replaying the WAL.

A replica that bootstraps (:mod:`storage_node.replication.bootstrap`) fetches the latest major and
later minors from the leader's segments channel and fast-forwards them (files copied, rows never
parsed), then tails the rest of the WAL. The baseline, measured in the same run on the same data, is
rebuilding the replica by replaying every row from the leader's WAL channel: fetch each record,
decode, GTID-stamp, insert into the memtable, write the segment (LinDB-style recovery from offset 0,
or row-based replication, seed 000 section 6.1).

Setup: one in-process storage node leads a one-partition table; ``--rows`` rows are written through
the producer in batches of ``--batch-rows`` and flushed into segments of ``--segment-rows`` rows.
Then, on the same Kafka:

- **bootstrap**: a new replica (another placement id, an empty directory) is marked BOOTSTRAPPING
  and a real :class:`~storage_node.roles.follower.PartitionFollower` runs until it is caught up;
  bytes = the record bytes of the segments channel from the start point to its end plus the WAL
  records beyond what the segments cover;
- **WAL replay**: another empty replica reads the whole WAL channel, stamps and inserts every row,
  and flushes it into a segment; bytes = the WAL channel's record bytes.

``ratio`` = replay seconds / bootstrap seconds (``bytes_ratio``: replay bytes / bootstrap bytes;
``cpu_ratio``: process CPU seconds, all threads, replay / bootstrap). The bootstrap's seconds
include its fixed start-up (consumer, group offsets, channel indexes, finding the latest major:
under a second on one local broker), so small runs favour the replay.

    python -m bench.bootstrap --rows 200000            # < 2 minutes
    python -m bench.bootstrap --rows 1000000 -o json   # the 1M-row figure

One run at 1M rows (one local broker, a loaded 2-core machine): bootstrap 2.25 s, 26.2 MB, 0.10 CPU s,
0 rows decoded; WAL replay 1.31 s, 24.4 MB, 0.41 CPU s: ``ratio`` 0.58, ``bytes_ratio`` 0.93,
``cpu_ratio`` 4.2.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench import common


def _rows(n: int, value_bytes: int) -> pa.Table:
    keys = pa.array(np.arange(n, dtype=np.uint64), pa.uint64())
    rng = np.random.default_rng(11)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)
    data = alphabet[rng.integers(0, len(alphabet), size=n * value_bytes)].tobytes()
    offsets = pa.array(np.arange(0, (n + 1) * value_bytes, value_bytes, dtype=np.int32), pa.int32())
    values = pa.StringArray.from_buffers(n, offsets.buffers()[1], pa.py_buffer(data))
    return pa.table({"k": keys, "v": values})


def _table() -> Any:
    from metadata.table import Column, ColumnType, TableDefinition

    return TableDefinition(
        "bench_boot", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
    )


def _bytes(kafka: Any, topic: str, start: int, end: int) -> int:
    from shoal.kafka.readers import read_to_end

    total = 0
    if start >= end:
        return 0
    for msg in read_to_end(kafka, topic, start, what="channel", group_id="shoal-bench-bytes"):
        if int(msg.offset() or 0) >= end:
            break
        total += len(msg.value() or b"") + sum(len(k) + len(v or b"") for k, v in (msg.headers() or []))
    return total


def run(ep: common.Endpoints, args: argparse.Namespace, say: Any) -> dict[str, Any]:
    from metadata.client import MetadataConfig
    from producer import Producer, ProducerConfig
    from shoal.kafka.admin import log_start_and_end
    from shoal.kafka.readers import read_wal_channel
    from shoal.kafka.settings import ConnectionSettings, KafkaSettings
    from shoal.topics import TopicNames
    from shoal.wire.ingest import ingest_schema
    from storage_node.config import FlushPolicy
    from storage_node.replica import PartitionReplica, versioned_rows
    from storage_node.replication import bootstrap
    from storage_node.roles.follower import FollowerConfig, PartitionFollower

    run_id = uuid.uuid4().hex[:10]
    prefix, zk_root = f"benchb{run_id}", f"/benchb_{run_id}"
    meta = MetadataConfig(
        zk_hosts=ep.zk_connect, bootstrap_servers=ep.bootstrap_servers, topic_prefix=prefix, zk_root=zk_root
    )
    kafka = KafkaSettings(ep.bootstrap_servers)
    topics = TopicNames(prefix)
    table = _table()
    rows = _rows(args.rows, args.value_bytes)
    flush = FlushPolicy(max_rows=args.segment_rows, max_age_s=1.0)
    with tempfile.TemporaryDirectory(prefix="shoal-bench-boot-") as tmp:
        work = Path(tmp)
        with common.leading_node(ep, meta, table, work / "leader", flush=flush) as node:
            held = next(iter(node.partitions().values()))
            leader = held.leader
            pid, placement = held.partition_id, held.placement_id
            say(f"writing {args.rows:,} rows")
            pconf = ProducerConfig(
                ConnectionSettings.plain(ep.bootstrap_servers, ep.zk_connect, topic_prefix=prefix, zk_root=zk_root)
            )
            with Producer(pconf) as producer:
                for i in range(0, rows.num_rows, args.batch_rows):
                    producer.write(table.name, rows.slice(i, args.batch_rows))
                producer.sync(600)
            wal_topic, seg_topic = topics.wal(pid, placement), topics.segments(pid, placement)
            wal_end = log_start_and_end(kafka, wal_topic)[1]
            common.wait_for(lambda: held.replica.covered_end() >= wal_end - 1, 600, "segments covering the WAL")
            assert leader is not None and leader.publisher is not None
            publisher = leader.publisher
            common.wait_for(
                lambda: all(
                    e.segment_id in publisher.manifest_offsets for e in held.replica.chain.since_latest_major()
                ),
                600,
                "every segment published",
            )
            segments = len(held.replica.chain.since_latest_major())

            say("bootstrap: a new replica fetches the latest major + minors and the WAL rest")
            replica = PartitionReplica(table, pid, placement + 100, work / "bootstrap")
            bootstrap.request_bootstrap(replica, "benchmark")
            follower = PartitionFollower(replica, FollowerConfig(kafka, topics), lambda: placement)
            cpu0 = time.process_time()
            with common.timer() as boot_s:
                follower.start()
                common.wait_for(lambda: replica.catch_up.eligible, 600, "bootstrap caught up", 0.01)
            boot_cpu = time.process_time() - cpu0
            follower.stop()
            snap = replica.catch_up.snapshot()
            covered = max((r.end_offset for r in replica.chain.coverage() if r.channel == (pid, placement)), default=0)
            boot_bytes = _bytes(kafka, seg_topic, snap.start_offset, snap.target_offset) + _bytes(
                kafka, wal_topic, covered, snap.wal_target
            )
            boot_rows = replica.scan().num_rows
            decoded = follower.stats.rows_decoded_to_apply
            replica.close()

            say("WAL replay: a new replica reads and inserts every row of the WAL channel")
            schema = ingest_schema(table.arrow_schema(), table.primary_key)
            replay = PartitionReplica(table, pid, placement + 200, work / "replay")
            replay_bytes = 0
            cpu0 = time.process_time()
            with common.timer() as replay_s:
                for item in read_wal_channel(kafka, wal_topic, 0):
                    rec = item.record
                    replay_bytes += len(rec.to_bytes())
                    replay.append(versioned_rows(rec.rows(schema), rec.gtid), item.offset)
                replay.flush(1)
            replay_cpu = time.process_time() - cpu0
            replay_rows = replay.scan().num_rows
            replay.close()
    return {
        "rows": args.rows,
        "segments": segments,
        "bootstrap_s": boot_s(),
        "bootstrap_cpu_s": boot_cpu,
        "bootstrap_bytes": boot_bytes,
        "bootstrap_rows": boot_rows,
        "bootstrap_rows_decoded": decoded,
        "segments_fetched": snap.segments_fetched,
        "replay_s": replay_s(),
        "replay_cpu_s": replay_cpu,
        "replay_bytes": replay_bytes,
        "replay_rows": replay_rows,
    }


def main(argv: list[str] | None = None) -> None:
    p = common.parser(__doc__.splitlines()[0], cluster=True)
    p.add_argument("--rows", type=common.positive_int, default=200_000, help="rows written, then bootstrapped")
    p.add_argument("--batch-rows", type=common.positive_int, default=5_000, help="rows per producer write")
    p.add_argument("--segment-rows", type=common.positive_int, default=100_000, help="rows per flushed segment")
    p.add_argument("--value-bytes", type=common.positive_int, default=32, help="bytes of the string column per row")
    args = p.parse_args(argv)
    say = common.progress_printer(args.output)
    with common.cluster(args, say) as ep:
        r = run(ep, args, say)
    ratio = r["replay_s"] / r["bootstrap_s"] if r["bootstrap_s"] > 0 else None
    cpu_ratio = r["replay_cpu_s"] / r["bootstrap_cpu_s"] if r["bootstrap_cpu_s"] > 0 else None
    bytes_ratio = r["replay_bytes"] / r["bootstrap_bytes"] if r["bootstrap_bytes"] > 0 else None
    settings = {k: getattr(args, k) for k in ("rows", "batch_rows", "segment_rows", "value_bytes")}
    if args.output == "json":
        doc = {
            "benchmark": "bootstrap",
            "settings": settings,
            "ratio": ratio,
            "ratio_meaning": "WAL replay seconds / bootstrap seconds (higher = bootstrap wins)",
            "bytes_ratio": bytes_ratio,
            "cpu_ratio": cpu_ratio,
            **r,
        }
        print(json.dumps(doc, indent=2, default=str))
        return
    results = [
        {
            "method": "bootstrap (segments + WAL rest)",
            "seconds": r["bootstrap_s"],
            "CPU s": r["bootstrap_cpu_s"],
            "MB fetched": r["bootstrap_bytes"] / 1e6,
            "rows": r["bootstrap_rows"],
        },
        {
            "method": "replay the WAL",
            "seconds": r["replay_s"],
            "CPU s": r["replay_cpu_s"],
            "MB fetched": r["replay_bytes"] / 1e6,
            "rows": r["replay_rows"],
        },
    ]
    notes = [
        f"ratio (replay s / bootstrap s): {ratio:,.2f}x" if ratio else "ratio: -",
        f"bytes ratio (replay / bootstrap): {bytes_ratio:,.2f}x" if bytes_ratio else "bytes ratio: -",
        f"CPU ratio (replay / bootstrap, whole process): {cpu_ratio:,.2f}x" if cpu_ratio else "CPU ratio: -",
        f"segments fetched {r['segments_fetched']}, rows decoded to apply {r['bootstrap_rows_decoded']}",
    ]
    common.report("replica bootstrap against WAL replay", list(results[0]), results, settings, "table", notes)


if __name__ == "__main__":
    main()
