"""Where write -> accepted goes at RF 3: one batch at a time, a timestamp per stage (P4's breakdown).

Starts the same throwaway cluster as :mod:`bench.replicated` (ZooKeeper, 3 KRaft brokers, 3 storage
nodes, a table of 8 partitions at RF 3) and writes ``--batches`` batches of ``--rows`` rows, each
spread over every partition (8 ingest messages), one after the other: nothing else runs, so each
batch shows the latency of the path itself, not of a queue. Two probe consumers read every leader's
WAL channel from its end, one ``read_uncommitted`` and one ``read_committed``. Per batch, measured
from the ``write()`` call:

- ``delivered``: every ingest message acknowledged by Kafka (acks=all, RF 3): what raw Kafka
  gives a writer, the baseline;
- ``WAL produced``: the first WAL record a leader wrote for the batch (read uncommitted);
- ``WAL committed``: the last of the batch's 8 WAL records readable committed (each leader's
  transaction ended; a follower's WAL tail can read it from then on);
- ``accepted``: ``sync()`` returned (every leader group's committed ingest offset is past the batch);
- ``refusals checked``: then the deadletter topic read for the producer's refused messages, which
  ``sync()`` does by default (:mod:`producer.refusals`; this run's producer has it off so that the
  two stages are timed apart).

``ratio`` = accepted p50 / delivered p50. Between ``WAL produced`` and ``WAL committed`` lies each
leader's transaction (WAL records flushed at acks=all, ``send_offsets_to_transaction``,
``commit_transaction``; DESIGN.md section 4); after it, one read of the committed offsets. No
memtable flush is on this path.

    python -m bench.latency_stages                  # ~1.5 minutes on 2 cores
    python -m bench.latency_stages --batches 100 --output json
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from typing import Any

from bench import common
from bench import replicated as rf3

STAGES = ("delivered", "WAL produced", "WAL committed", "accepted", "refusals checked")


class WalProbe:
    """A consumer of every WAL channel of the prefix from its end, recording when records arrive."""

    def __init__(self, bootstrap_servers: str, prefix: str, isolation: str) -> None:
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        self.arrivals: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": f"bench-latency-stages-{isolation}",
                "isolation.level": f"read_{isolation}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        topics = self._consumer.list_topics(timeout=10).topics
        wal = sorted(t for t in topics if t.startswith(f"{prefix}.wal."))
        self.channels = len(wal)
        self._consumer.assign([TopicPartition(t, 0, OFFSET_END) for t in wal])
        self._thread = threading.Thread(target=self._run, name=f"probe-{isolation}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                with self._lock:
                    self.arrivals.append(time.perf_counter())

    def count(self) -> int:
        with self._lock:
            return len(self.arrivals)

    def since(self, start: int) -> list[float]:
        with self._lock:
            return self.arrivals[start:]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


def measure(c: common.NodeCluster, args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, list[float]]:
    from producer import Producer
    from producer.refusals import DeadletterWatch

    out: dict[str, list[float]] = {s: [] for s in STAGES}
    config = rf3._producer_config(c, args, check_refusals=False)
    with Producer(config) as producer:
        refusals = DeadletterWatch(config.kafka, config.topics, producer.producer_id)
        refusals.start(30)
        producer.partition_map(rf3.TABLE)
        say("warm-up: one write to every partition, sync()")
        producer.write(rf3.TABLE, rf3.build_rows(0, args.partitions * 100, args.partitions * 100, args.value_bytes))
        producer.sync(120)
        probes = {iso: WalProbe(c.bootstrap_servers, c.topic_prefix, iso) for iso in ("uncommitted", "committed")}
        try:
            time.sleep(args.settle_s)  # the probes' first fetches
            channels = probes["committed"].channels
            say(f"{args.batches} batches of {args.rows:,} rows, one at a time ({channels} WAL channels)")
            for i in range(args.batches):
                marks = {iso: p.count() for iso, p in probes.items()}
                rows = rf3.latency_rows(i, args.rows, args.batches, args.value_bytes)
                t0 = time.perf_counter()
                result = producer.write(rf3.TABLE, rows)
                for future in result.futures:
                    future.result()
                delivered = time.perf_counter()
                producer.sync(60)
                accepted = time.perf_counter()
                refused = refusals.read(30)
                checked = time.perf_counter()
                if refused:
                    raise RuntimeError(f"a leader refused a benchmark message: {refused[0]}")
                wanted = len(result.futures)
                # the committed probe may see the last record a moment after sync() returned
                common.wait_for(
                    lambda m=marks, n=wanted: all(len(p.since(m[iso])) >= n for iso, p in probes.items()),  # type: ignore[misc]
                    30,
                    "WAL records",
                )
                produced = probes["uncommitted"].since(marks["uncommitted"])
                committed = probes["committed"].since(marks["committed"])[:wanted]
                out["delivered"].append(delivered - t0)
                out["WAL produced"].append(min(produced) - t0)
                out["WAL committed"].append(max(committed) - t0)
                out["accepted"].append(accepted - t0)
                out["refusals checked"].append(checked - t0)
                time.sleep(args.pause_s)
        finally:
            for p in probes.values():
                p.close()
            refusals.close()
    return out


def main(argv: list[str] | None = None) -> None:
    p = common.parser(__doc__.splitlines()[0], cluster=False)
    p.add_argument("--batches", type=common.positive_int, default=60, help="batches written, one at a time")
    p.add_argument("--rows", type=common.positive_int, default=1_000, help="rows per batch (over every partition)")
    p.add_argument("--partitions", type=common.positive_int, default=8, help="partitions of the table")
    p.add_argument("--value-bytes", type=common.positive_int, default=84, help="string bytes per row (~100 B rows)")
    p.add_argument("--pause-s", type=float, default=0.1, help="pause between batches")
    p.add_argument("--settle-s", type=float, default=3.0, help="wait after the probes start")
    p.add_argument("--flush-age", type=float, default=1.0, help="the nodes' memtable flush age (not on this path)")
    p.add_argument("--kafka-heap-mb", type=common.positive_int, default=512, help="each broker's heap")
    args = p.parse_args(argv)
    # the fields bench.replicated's cluster and producer helpers read
    args.brokers, args.nodes = 3, 3
    args.linger_ms, args.max_message_bytes, args.batch_bytes = 5, 1_000_000, 1_000_000
    say = common.progress_printer(args.output)
    common.unwind_on_sigterm()
    with rf3.rf3_cluster(args, say) as c:
        rf3.create_table(c, args.partitions)
        stages = measure(c, args, say)
    rows = [{"stage": s, **rf3.latency_summary(v)} for s, v in stages.items()]
    p50 = {r["stage"]: r["p50_ms"] for r in rows}
    ratio = p50["accepted"] / p50["delivered"] if p50.get("delivered") else None
    settings: dict[str, Any] = {
        "batches": args.batches,
        "rows_per_batch": args.rows,
        "partitions": args.partitions,
        "replication_factor": 3,
        "brokers": 3,
        "nodes": 3,
        "row_bytes": 16 + args.value_bytes,
        "one batch at a time": True,
    }
    notes = [
        "ms from the write() call; delivered = every ingest message acked (acks=all, RF 3)",
        "WAL produced = the batch's first WAL record (read uncommitted); WAL committed = its last (read committed)",
        "accepted = sync() returned (refusal check off); refusals checked = then the deadletter topic read",
    ]
    common.report(
        "write -> accepted, stage by stage, at RF 3",
        ["stage", "n", "p50_ms", "p99_ms"],
        rows,
        settings,
        args.output,
        notes,
        ratio=ratio,
        ratio_meaning="accepted p50 / delivered (raw acks=all) p50, one batch at a time",
    )


if __name__ == "__main__":
    main()
