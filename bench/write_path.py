"""Write-path benchmark: producer -> ingest topic -> leader -> WAL -> durable Parquet segments.

Measures rows/s and MB/s from ``producer.Producer.write`` until every row is in a durable segment
on the leader (an in-process :class:`storage_node.node.StorageNode` whose flush policy writes
segments; the run ends when each leader's segments cover its WAL channel to the end). In the same
run it produces and consumes the very same message bytes with raw confluent-kafka (acks=all,
idempotent, same linger and compression) and prints the ratio. DESIGN.md
sections 3 to 5.

    python -m bench.write_path --rows 200000            # throwaway local cluster
    python -m bench.write_path --bootstrap-servers H:P --zk H:P --output json
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench import common


def build_rows(n: int, value_bytes: int, seed: int = 7) -> pa.Table:
    """``n`` rows with unique keys spread over the uint64 key space and ``value_bytes``-long values."""
    step = (2**64 - 1) // n
    keys = pa.array(np.arange(n, dtype=np.uint64) * np.uint64(step), pa.uint64())
    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)
    data = alphabet[rng.integers(0, len(alphabet), size=n * value_bytes)].tobytes()
    offsets = pa.array(np.arange(0, (n + 1) * value_bytes, value_bytes, dtype=np.int32), pa.int32())
    values = pa.StringArray.from_buffers(n, offsets.buffers()[1], pa.py_buffer(data))
    return pa.table({"k": keys, "v": values, "n": pa.array(np.arange(n, dtype=np.int64))})


def _table_definition() -> Any:
    from metadata.table import Column, ColumnType, TableDefinition

    cols = (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING), Column("n", ColumnType.INT64))
    return TableDefinition("bench", cols, ("k",), "k", 1)


def _wal_end(bootstrap: str, topic: str) -> int:
    from shoal.kafka.admin import log_start_and_end
    from shoal.kafka.settings import KafkaSettings

    return log_start_and_end(KafkaSettings(bootstrap), topic)[1]


def run_shoal(ep: common.Endpoints, args: argparse.Namespace, rows: pa.Table, say: Any) -> dict[str, Any]:
    from metadata.client import MetadataConfig
    from metadata.keyspace import Keyspace
    from producer import Producer, ProducerConfig
    from shoal.kafka.settings import ConnectionSettings
    from storage_node.config import FlushPolicy

    run = uuid.uuid4().hex[:10]
    prefix, zk_root = f"bench{run}", f"/bench_{run}"
    meta = MetadataConfig(
        zk_hosts=ep.zk_connect, bootstrap_servers=ep.bootstrap_servers, topic_prefix=prefix, zk_root=zk_root
    )
    splits = [Keyspace.UINT64.encode((2**64 // args.partitions) * i) for i in range(1, args.partitions)]
    flush = FlushPolicy(max_rows=args.segment_rows, max_age_s=args.segment_age)
    with (
        tempfile.TemporaryDirectory(prefix="shoal-bench-node-") as node_dir,
        common.leading_node(
            ep, meta, _table_definition(), Path(node_dir), flush=flush, split_points=splits, server_id="node-1"
        ) as node,
    ):

        def leaders() -> list[Any]:
            return common.ready_leaders(node)

        say(f"shoal: writing {rows.num_rows:,} rows into {args.partitions} partition(s)")
        pconf = ProducerConfig(
            ConnectionSettings.plain(ep.bootstrap_servers, ep.zk_connect, topic_prefix=prefix, zk_root=zk_root),
            linger_ms=args.linger_ms,
            max_message_bytes=args.max_message_bytes,
            kafka_config={"batch.size": args.batch_bytes},
        )
        with Producer(pconf) as producer:
            producer.partition_map("bench")  # metadata and topics first: not part of the measurement
            producer.write("bench", rows.slice(0, 1)).wait(60)
            producer.sync(60)
            base_rows = sum(ld.stats.rows for ld in leaders())
            with common.timer() as elapsed:
                result = producer.write("bench", rows)
                producer.flush()
                t_acked = elapsed()
                common.wait_for(
                    lambda: sum(ld.stats.rows for ld in leaders()) >= base_rows + rows.num_rows,
                    600,
                    "leaders accepting every row",
                )
                t_accepted = elapsed()
                ends = {ld.wal_topic: _wal_end(ep.bootstrap_servers, ld.wal_topic) for ld in leaders()}
                common.wait_for(
                    lambda: all(ld.replica.covered_end() >= ends[ld.wal_topic] - 1 for ld in leaders()),
                    600,
                    "segments covering the WAL to its end",
                )
            payload = sum(len(m) for m in _payloads(rows, args))
            messages = len(result.futures)
        segments = sum(ld.stats.segments for ld in leaders())
    t = elapsed()
    return {
        "pipeline": "shoal (producer -> durable segments)",
        "rows": rows.num_rows,
        "messages": messages,
        "MB": payload / 1e6,
        "seconds": t,
        "rows/s": rows.num_rows / t,
        "MB/s": payload / 1e6 / t,
        "kafka acked s": t_acked,
        "leader accepted s": t_accepted,
        "segments": segments,
    }


def _payloads(rows: pa.Table, args: argparse.Namespace) -> list[bytes]:
    """The ingest messages the producer sends for ``rows`` (same encoding, same size bounds)."""
    from producer.batching import split_messages
    from producer.validation import to_ingest

    messages = split_messages(
        "bench", to_ingest(rows, deleted=False), max_bytes=args.max_message_bytes, max_rows=100_000
    )
    return [m.payload for m in messages]


def run_raw(ep: common.Endpoints, args: argparse.Namespace, payloads: list[bytes], say: Any) -> dict[str, Any]:
    from confluent_kafka import Producer

    from shoal.kafka import clients
    from shoal.kafka.admin import create_topic
    from shoal.kafka.settings import KafkaSettings, TopicPolicy

    topic = f"bench-raw-{uuid.uuid4().hex[:10]}"
    # the baseline: plain confluent-kafka clients with the same tuning as shoal's producer and leader
    create_topic(
        clients.admin(KafkaSettings(ep.bootstrap_servers)), topic, policy=TopicPolicy(), partitions=args.partitions
    )
    producer = Producer(common.raw_producer_config(ep.bootstrap_servers, args))
    consumer = common.raw_consumer(ep.bootstrap_servers, topic, args.partitions)
    say(f"raw confluent-kafka: producing and consuming the same {len(payloads)} messages")
    counts = {"messages": 0, "bytes": 0}

    def consume() -> None:  # concurrently with producing, as a leader consumes while producers write
        while counts["messages"] < len(payloads) and elapsed() < 600:
            for msg in consumer.consume(100, 0.2):
                if msg.error() is None:
                    counts["messages"] += 1
                    counts["bytes"] += len(msg.value() or b"")

    with common.timer() as elapsed:
        reader = threading.Thread(target=consume, name="raw-consumer")
        reader.start()
        for i, payload in enumerate(payloads):
            while True:
                try:
                    producer.produce(topic, payload, partition=i % args.partitions)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        producer.flush()
        reader.join()
    consumer.close()
    got, got_bytes = counts["messages"], counts["bytes"]
    if got < len(payloads):
        raise TimeoutError(f"raw consume read {got} of {len(payloads)} messages in 600s")
    t = elapsed()
    return {
        "pipeline": "raw confluent-kafka produce + consume",
        "rows": None,
        "messages": got,
        "MB": got_bytes / 1e6,
        "seconds": t,
        "rows/s": None,
        "MB/s": got_bytes / 1e6 / t,
    }


def main(argv: list[str] | None = None) -> None:
    p = common.parser(__doc__.splitlines()[0], cluster=True)
    p.add_argument("--rows", type=common.positive_int, default=200_000, help="rows to write")
    p.add_argument("--value-bytes", type=common.positive_int, default=64, help="bytes of the string column per row")
    p.add_argument("--partitions", type=common.positive_int, default=1, help="table partitions (one leader each)")
    p.add_argument("--segment-rows", type=common.positive_int, default=100_000, help="memtable rows per segment")
    p.add_argument("--segment-age", type=float, default=0.5, help="seconds before a partial memtable is flushed")
    p.add_argument("--raw-repeat", type=common.positive_int, default=3, help="raw Kafka runs (median reported)")
    p.add_argument("--linger-ms", type=int, default=5, help="producer linger.ms (both runs)")
    p.add_argument("--batch-bytes", type=common.positive_int, default=1_000_000, help="librdkafka batch.size")
    p.add_argument(
        "--max-message-bytes",
        type=common.positive_int,
        default=1_000_000,
        help="largest Arrow IPC message the producer sends",
    )
    args = p.parse_args(argv)
    say = common.progress_printer(args.output)
    rows = build_rows(args.rows, args.value_bytes)
    payloads = _payloads(rows, args)
    with common.cluster(args, say) as ep:
        runs = sorted((run_raw(ep, args, payloads, say) for _ in range(args.raw_repeat)), key=lambda r: r["seconds"])
        raw = runs[len(runs) // 2]  # the median run: the raw baseline is short and noisy on a loaded machine
        shoal = run_shoal(ep, args, rows, say)
    from shoal.wire.arrow_ipc import DEFAULT_COMPRESSION

    ratio = shoal["MB/s"] / raw["MB/s"]
    settings = {
        "rows": args.rows,
        "value_bytes": args.value_bytes,
        "partitions": args.partitions,
        "messages": len(payloads),
        "max_message_bytes": args.max_message_bytes,
        "batch.size": args.batch_bytes,
        "linger.ms": args.linger_ms,
        "arrow_ipc_compression": DEFAULT_COMPRESSION,
        "kafka compression.type": "none",
        "acks": "all",
        "idempotence": True,
        "segment_rows": args.segment_rows,
        "segment_age_s": args.segment_age,
        "raw_repeat": args.raw_repeat,
        "cluster": "throwaway local (1 broker)" if ep.started_here else ep.bootstrap_servers,
    }
    notes = [
        f"shoal / raw Kafka throughput ratio: {ratio:.2f} (shoal reaches {ratio:.0%} of raw produce+consume)",
        "raw Kafka sends pre-encoded bytes; shoal's time includes validation, routing and Arrow IPC "
        "encoding, the leader's transactions and the fsynced Parquet segments",
    ]
    common.report(
        "write path: producer -> durable segments vs raw Kafka",
        [
            "pipeline",
            "rows",
            "messages",
            "MB",
            "seconds",
            "rows/s",
            "MB/s",
            "kafka acked s",
            "leader accepted s",
            "segments",
        ],
        [shoal, raw],
        settings,
        args.output,
        notes,
        ratio=ratio,
        ratio_meaning="shoal MB/s / raw produce+consume MB/s (RF 1, one leader node)",
    )


if __name__ == "__main__":
    main()
