"""Replicated writes at RF 3 against raw Kafka: throughput (P1) and latency (P4), on a throwaway cluster.

Starts its own local cluster (``shoal_app.runtime.launcher``: ZooKeeper, 3 KRaft brokers, then 3
storage nodes with a short flush age), creates a table of 8 partitions at replication factor 3 and
measures, side by side in one run:

P1 throughput. Producers in 2 processes write ``--rows`` rows of about 100 bytes. shoal's time runs
   from the first write until every row is in a segment acked by every replica, read from committed
   offsets (``monitor.topology`` + ``shoal.kafka.indexes``): each leader's accepted index (its ingest
   group's committed offset) is at the ingest log end, and every other replica's Ack index on the
   leader's WAL channel, which a follower moves only over what its applied and acked segments cover,
   is at the channel's end (:func:`durable_on_every_replica`). That result is then confirmed the way
   the monitor reads it (``monitor.segments``: the leader's segments cover its WAL channel, every
   other replica's Ack on the segments channel is past the last manifest), outside the clock: reading
   the manifests (and the chunks between them) took 1-5 s per poll under load, which made the clock's
   resolution that coarse and loaded the machine it measures. The baseline sends the very same Arrow
   IPC messages with raw confluent-kafka (acks=all, idempotent) from 2 processes to an 8-partition topic with the
   same topic policy (RF 3) and has 3 consumer processes read all of it; its time runs from the first
   produce until the third consumer has read everything. Each pipeline runs ``--repeat`` times (3),
   alternated, and ``ratio`` = shoal MB/s / raw MB/s of the median runs: single runs of either
   moved by up to 1.7x from one run to the next on this machine (raw 1.25-2.15 s, 2026-11-26).
   The check polls only what the clock needs (each leader's ingest group, the other replicas' Ack
   groups on its WAL channel: 24 groups for 8 partitions), not a partition already found durable
   after the last write, with the group readers made before the clock starts
   (:meth:`ReplicationCheck.durable_progress`): reading all 104 groups, the first poll making a
   consumer per group, took up to 4.8 s under load, counted as shoal's time.
Warm-up. Before either pipeline is measured, each runs once unmeasured (``--warmup-rows``, by default
   the measured size up to 500,000 rows; shoal's warm-up rows have their own keys): brokers that
   just started spend most of their first load compiling (a profile of a broker under shoal's first
   load: the C2 compiler threads took more CPU than every Kafka thread together; the same 500,000
   rows a second time took 7.6 broker CPU seconds instead of 42), so a cold run measures the JIT
   more than either pipeline. A long-running cluster has compiled these paths.
P4 latency at 50% of the rate of shoal's first measured run, right after it: small batches written
   on a fixed schedule; per batch the time from ``write`` to ``sync()`` returning (accepted by the
   leader), in a run of its own, then in a second run at the same rate the time to the batch's
   sampled key being returned by a scan of every node (its replica's fresh read: a leader's
   memtable, a follower's WAL overlay). The second run's key scans load the nodes (three per
   pending sample every 10 ms), a load the raw baseline does not have, so its accepted latencies
   are reported apart (``accepted_while_probing``). Raw: acks=all produce -> consume of the same
   bytes at the same rate.

Broker profile (``--broker-requests``): the brokers log every request they complete and the
   report adds up their handler time per Kafka API over each pipeline's measured P1 runs
   (:mod:`bench.broker_requests`): how much of it moves bytes (Produce, Fetch) and how much is per
   request (metadata, coordinators, transactions). The logging slows the brokers, so such a run
   answers that split, not the ratio.

Every process it starts (the cluster by pid, producer and consumer processes) is stopped at the end,
also on Ctrl-C, SIGTERM or a failure. DESIGN.md sections 3, 4 and 6.

    python -m bench.replicated                      # ~200k rows, a few minutes on 2 cores
    python -m bench.replicated --rows 2000000 --output json
    python -m bench.replicated --rows 500000 --skip-latency --broker-requests
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench import broker_requests, common

TABLE = "bench"
NODES = ("node-1", "node-2", "node-3")


# -- pure parts (unit-tested) ----------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) of ``values`` by linear interpolation; None if empty."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def latency_summary(seconds: Sequence[float]) -> dict[str, Any]:
    """n, p50 and p99 in milliseconds."""
    p50, p99 = percentile(seconds, 50), percentile(seconds, 99)
    return {
        "n": len(seconds),
        "p50_ms": None if p50 is None else p50 * 1e3,
        "p99_ms": None if p99 is None else p99 * 1e3,
    }


def throughput_ratio(shoal_mb_s: float, raw_mb_s: float) -> float | None:
    """shoal MB/s / raw MB/s (None when the baseline moved nothing)."""
    return shoal_mb_s / raw_mb_s if raw_mb_s > 0 else None


WRITING_POLL_S = 1.0
"""How often the replication check polls while the producers still write (``--poll-s`` after)."""

WARMUP_KEY_OFFSET = 1
"""Added to every warm-up key: the measured keys are multiples of a large step, so none collides."""


def _owned_by(channels: Sequence[Any], placement_id: int | None) -> Any:
    """The channel of ``channels`` that placement ``placement_id`` writes (the leader's), or None."""
    return next((ch for ch in channels if ch.owner is not None and ch.owner.placement_id == placement_id), None)


def median_run(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median time (the lower one of the middle two for an even count), with every
    run's seconds under ``runs s`` in the order they ran."""
    ordered = sorted(runs, key=lambda r: r["seconds"])
    return {**ordered[(len(ordered) - 1) // 2], "runs s": [r["seconds"] for r in runs]}


def warmup_rows(rows: int, requested: int | None) -> int:
    """Rows of each pipeline's unmeasured first run: ``requested``, or ``rows`` up to 500,000."""
    return min(rows, 500_000) if requested is None else requested


def split_evenly(n: int, parts: int) -> list[tuple[int, int]]:
    """``[start, end)`` ranges that cover ``range(n)`` in ``parts`` nearly equal pieces."""
    return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]


@dataclass(frozen=True)
class PartitionProgress:
    """What the replication check reads for one partition (all offsets from Kafka)."""

    ingest_end: int
    accepted: int | None
    wal_append: int
    wal_covered: int | None
    """End (exclusive) of the leader's WAL offsets its published segments cover; None = none yet."""
    unacked_segments: tuple[int, ...]
    """Per other replica: manifests on the leader's segments channel it has not acked."""
    wal_acks: tuple[int | None, ...] = ()
    """Per other replica: its Ack index on the leader's WAL channel, what its durable segments cover
    (``storage_node.roles.follower``: committed only after the segments are applied and acked)."""


def replication_stages(p: PartitionProgress) -> dict[str, bool]:
    """Which steps towards "every accepted row is in a segment every replica acked" hold for ``p``.

    The WAL channel is transactional: its last offset is a commit marker, so segments covering up
    to ``append - 1`` cover every record (as ``monitor.collector`` counts an old channel settled).
    """
    return {
        "accepted": _accepted(p),
        "in segments": p.wal_append == 0 or (p.wal_covered is not None and p.wal_covered >= p.wal_append - 1),
        "acked": all(n == 0 for n in p.unacked_segments),
    }


def fully_replicated(p: PartitionProgress) -> bool:
    """Every accepted row is in a segment every replica acked (the monitor's reading of the indexes)."""
    return all(replication_stages(p).values())


def _accepted(p: PartitionProgress) -> bool:
    """The leader's accepted index is at the ingest log end."""
    return p.ingest_end == 0 or (p.accepted is not None and p.accepted >= p.ingest_end)


def durable_on_every_replica(p: PartitionProgress) -> bool:
    """Every accepted row is in a segment durable on every other replica, from committed offsets alone.

    A follower commits its Ack on the leader's WAL channel only up to what its applied (durable,
    acked) segments cover, so every Ack at the channel's end (its last offset is a commit marker)
    implies :func:`fully_replicated`; it needs no read of the segments channel's manifests, which
    took 1-5 s per poll under load (the monitor's tracker reads the chunks too)."""
    durable = p.wal_append == 0 or (
        bool(p.wal_acks) and all(a is not None and a >= p.wal_append - 1 for a in p.wal_acks)
    )
    return _accepted(p) and durable


def _stages(progress: list[PartitionProgress]) -> dict[str, bool]:
    """Every partition accepted everything, and durable on every replica (the P1 timeline, from
    committed offsets: :func:`durable_on_every_replica`)."""
    return {
        "accepted": bool(progress) and all(_accepted(p) for p in progress),
        "durable on every replica": bool(progress) and all(durable_on_every_replica(p) for p in progress),
    }


# -- the cluster ----------------------------------------------------------------------------------


Cluster = common.NodeCluster


def rf3_cluster(
    args: argparse.Namespace, say: Callable[[str], None], *, request_log: bool = False
) -> contextlib.AbstractContextManager[Cluster]:
    """ZooKeeper + ``--brokers`` brokers + ``--nodes`` storage nodes (started here with ``--flush-age``),
    every process stopped by pid at the end (nodes, brokers, ZooKeeper), the data deleted.
    ``args`` needs only the options every RF 3 benchmark shares (``latency_stages`` and
    ``kafka_bytes`` use this too); ``request_log``: the brokers log every request."""
    return common.node_cluster(
        say,
        brokers=args.brokers,
        nodes=args.nodes,
        kafka_heap_mb=args.kafka_heap_mb,
        flush_age=args.flush_age,
        prefix="shoal-bench-rf3-",
        kafka_request_log=request_log,
    )


def create_table(c: Cluster, partitions: int) -> None:
    common.create_table(c, common.table_definition(TABLE, 3), NODES, partitions)


def node_locations(c: Cluster) -> list[str]:
    from metadata.client import MetadataClient
    from metadata.node_registry import lookup_node

    with MetadataClient(c.metadata_config()) as client:
        return [lookup_node(client.zk, client.layout, s) for s in NODES]


class ReplicationCheck:
    """Reads, per partition, what :func:`fully_replicated` needs, with batched admin requests."""

    def __init__(self, c: Cluster) -> None:
        from metadata.client import MetadataClient
        from monitor.kafka_offsets import KafkaOffsets
        from monitor.segments import SegmentsTracker
        from shoal.topics import TopicNames

        self.client = MetadataClient(c.metadata_config())
        self.topics = TopicNames(c.topic_prefix)
        self.kafka = KafkaOffsets(c.bootstrap_servers)
        self.tracker = SegmentsTracker(c.bootstrap_servers)
        self.read_at = 0.0
        """Wall time right after the last poll read the indexes: when what it found was true."""
        self._topology: list[Any] | None = None
        self._durable: set[int] = set()
        """Partitions (by topology position) :meth:`durable_progress` found durable after the last write."""
        self._last: dict[int, PartitionProgress] = {}

    def _read_topology(self) -> list[Any]:
        from monitor.topology import read_topology

        self._topology = read_topology(self.topics, self.client.coordinator, TABLE)
        return self._topology

    def topology_changed(self) -> bool:
        """Read the partitions' leaders, replicas and channels again: did they change since they were
        last read? (A poll with ``fresh_topology=False`` trusts the ones it read before.)"""
        before = self._topology
        changed = self._read_topology() != before
        if changed:
            self.forget()
        return changed

    def forget(self) -> None:
        """Read every partition again at the next :meth:`durable_progress`."""
        self._durable.clear()
        self._last.clear()

    def close(self) -> None:
        self.kafka.close()
        self.tracker.close()
        self.client.close()

    def progress(self, *, fresh_topology: bool = True, manifests: bool = True) -> list[PartitionProgress]:
        """Where every partition is. ``fresh_topology=False`` reuses the leaders, replicas and channels
        read by an earlier poll (its METADATA and ZooKeeper reads were half of a poll's time under load);
        a caller then confirms a result with :meth:`topology_changed`. ``manifests=False`` reads
        committed offsets only (``wal_covered`` None, no ``unacked_segments``): enough for
        :func:`durable_on_every_replica`."""
        from shoal.kafka.indexes import IndexQuery

        parts = self._read_topology() if fresh_topology or self._topology is None else self._topology
        queries = []
        for p in parts:
            queries.append(IndexQuery(p.ingest.topic, tuple(r.ack_group for r in p.ingest.readers)))
            for ch in (*p.wal, *p.segments):
                queries.append(IndexQuery(ch.topic, tuple(r.ack_group for r in ch.readers)))
        _cluster, existing = self.kafka.cluster_and_topics()
        ix = self.kafka.channel_indexes([q for q in queries if q.topic in existing])
        self.read_at = time.time()  # every index below was read by now; manifests only add what they cover
        leading = [
            ch.topic
            for p in parts
            for ch in p.segments
            if ch.owner is not None and ch.owner.placement_id == p.leader_placement_id and ch.topic in ix
        ]
        if manifests:
            self.tracker.update_many({t: (ix[t].tail, ix[t].append) for t in leading})  # all channels at once
        out = []
        for p in parts:
            lead = p.leader_placement_id
            wal, seg = _owned_by(p.wal, lead), _owned_by(p.segments, lead)
            ingest = ix.get(p.ingest.topic)
            if ingest is None or wal is None or seg is None:
                out.append(PartitionProgress(1, None, 0, None, ()))
                continue
            seg_ix = ix.get(seg.topic)
            wal_ix = ix.get(wal.topic)
            wal_acks = tuple(None if wal_ix is None else wal_ix.ack(r.ack_group) for r in wal.readers)
            unacked: tuple[int, ...] = ()
            if not manifests:
                mans = None
            elif seg_ix is None:
                mans = None
                unacked = (1,) if wal_ix is not None and wal_ix.append > 0 else ()
            else:
                mans = self.tracker.update(seg.topic, seg_ix.tail, seg_ix.append)
                unacked = tuple(mans.unacked(seg_ix.ack(r.ack_group)) for r in seg.readers)
            out.append(
                PartitionProgress(
                    ingest_end=ingest.append,
                    accepted=ingest.ack(p.ingest.readers[0].ack_group),
                    wal_append=0 if wal_ix is None else wal_ix.append,
                    wal_covered=None if mans is None else mans.covered_end(wal.topic),
                    unacked_segments=unacked,
                    wal_acks=wal_acks,
                )
            )
        return out

    def durable_progress(self, *, final: bool) -> list[PartitionProgress]:
        """:func:`durable_on_every_replica` of every partition, from the fewest reads: per partition the
        leader group on its ingest topic and the other replicas' Ack groups on the leader's WAL channel
        (24 groups for 8 partitions at RF 3, not the 104 of :meth:`progress`), with the topology read by
        an earlier poll. With ``final`` (no more rows will be written), a partition found durable is
        not read again: its indexes only move up without new writes, and the caller confirms the
        result with a full :meth:`progress` (manifests included) afterwards. Reading the 104 groups
        took 1.5-4 s per poll under load, which the clock then counted as shoal's time."""
        from shoal.kafka.indexes import IndexQuery

        parts = self._topology if self._topology is not None else self._read_topology()
        queries, lagging = [], []
        for i, p in enumerate(parts):
            if i in self._durable:
                continue
            wal = _owned_by(p.wal, p.leader_placement_id)
            lagging.append((i, p, wal))
            queries.append(IndexQuery(p.ingest.topic, (p.ingest.readers[0].ack_group,)))
            if wal is not None:
                queries.append(IndexQuery(wal.topic, tuple(r.ack_group for r in wal.readers)))
        ix = self.kafka.channel_indexes(queries) if queries else {}
        self.read_at = time.time()
        for i, p, wal in lagging:
            ingest = ix.get(p.ingest.topic)
            wal_ix = None if wal is None else ix.get(wal.topic)
            if ingest is None or wal is None or wal_ix is None:
                self._last[i] = PartitionProgress(1, None, 0, None, ())
                continue
            self._last[i] = PartitionProgress(
                ingest_end=ingest.append,
                accepted=ingest.ack(p.ingest.readers[0].ack_group),
                wal_append=wal_ix.append,
                wal_covered=None,
                unacked_segments=(),
                wal_acks=tuple(wal_ix.ack(r.ack_group) for r in wal.readers),
            )
            if final and durable_on_every_replica(self._last[i]):
                self._durable.add(i)
        return [self._last[i] for i in range(len(parts))]

    def done(self) -> bool:
        parts = self.progress()
        return bool(parts) and all(fully_replicated(p) for p in parts)

    def preferred_leaders(self) -> bool:
        """Every partition led by its preferred leader (no handover left to happen during a measurement)."""
        from monitor.topology import read_topology

        parts = read_topology(self.topics, self.client.coordinator, TABLE)
        return bool(parts) and all(p.leader_alive and p.leader_server_id == p.preferred_server_id for p in parts)


# -- P1: shoal throughput ---------------------------------------------------------------------------


def build_rows(start: int, end: int, total: int, value_bytes: int, key_offset: int = 0) -> Any:
    """Rows ``start..end`` of ``total``: key ``i * (2**64 // total) + key_offset``, spread over every partition."""
    import numpy as np
    import pyarrow as pa

    from bench.write_path import build_rows as full

    rows = full(end - start, value_bytes)
    step = (2**64 - 1) // total
    keys = pa.array(np.arange(start, end, dtype=np.uint64) * np.uint64(step) + np.uint64(key_offset), pa.uint64())
    n = pa.array(np.arange(start, end, dtype=np.int64))
    return rows.set_column(0, "k", keys).set_column(2, "n", n)


def _producer_config(c: Cluster, args: argparse.Namespace, **extra: Any) -> Any:
    from producer import ProducerConfig

    return ProducerConfig(
        c.connection(),
        linger_ms=args.linger_ms,
        max_message_bytes=args.max_message_bytes,
        kafka_config={"batch.size": args.batch_bytes},
        **extra,
    )


def _shoal_writer(
    c: Cluster, args: argparse.Namespace, span: tuple[int, int], total: int, key_offset: int, go: Any, out: Any
) -> None:  # a child process
    from producer import Producer

    rows = build_rows(span[0], span[1], total, args.value_bytes, key_offset=key_offset)
    with Producer(_producer_config(c, args)) as producer:
        producer.partition_map(TABLE)
        out.put(("ready", 0.0, 0))
        go.wait()
        t0 = time.time()
        producer.write(TABLE, rows)
        producer.flush()
        out.put(("done", t0, time.time()))


def _raw_payloads(args: argparse.Namespace, span: tuple[int, int], total: int) -> list[bytes]:
    from producer.batching import split_messages
    from producer.validation import to_ingest

    rows = build_rows(span[0], span[1], total, args.value_bytes)
    messages = split_messages(TABLE, to_ingest(rows, deleted=False), max_bytes=args.max_message_bytes, max_rows=100_000)
    return [m.payload for m in messages]


def _children(ctx: Any, targets: list[tuple[Callable[..., None], tuple[Any, ...]]]) -> list[Any]:
    procs = [ctx.Process(target=fn, args=a, daemon=True) for fn, a in targets]
    for p in procs:
        p.start()
    return procs


def _stop_children(procs: list[Any]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join(5)


def _collect(out: Any, kind: str, n: int, procs: list[Any], timeout_s: float) -> list[tuple[Any, ...]]:
    got: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"benchmark: {n - len(got)} child process(es) did not report {kind!r}")
        dead = [p for p in procs if p.exitcode not in (None, 0)]
        if dead:
            raise RuntimeError(f"benchmark: child process exited with {dead[0].exitcode}")
        with contextlib.suppress(Exception):
            msg = out.get(timeout=0.5)
            if msg[0] == kind:
                got.append(msg)
    return got


def run_shoal(
    c: Cluster, args: argparse.Namespace, say: Callable[[str], None], rows: int, key_offset: int = 0
) -> dict[str, Any]:
    """``rows`` rows written by ``--producers`` processes, timed until every replica acked their segments.

    ``key_offset`` moves every key (a warm-up writes rows of its own, not the measured run's)."""
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    spans = split_evenly(rows, args.producers)
    procs = _children(ctx, [(_shoal_writer, (c, args, s, rows, key_offset, go, out)) for s in spans])
    check = ReplicationCheck(c)
    try:
        _collect(out, "ready", len(procs), procs, 180)
        # the check's offset readers (a consumer per group) are made here, not by the first timed poll
        check.durable_progress(final=False)
        say(f"shoal: {args.producers} producer processes writing {rows:,} rows into {args.partitions} partitions")
        go.set()
        done: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + 1800
        polls = 0
        poll_s: list[float] = []
        stages: dict[str, float] = {}
        t_end: float | None = None
        confirm_retries = 0
        parts: list[PartitionProgress] = []
        while t_end is None:
            # polls while the producers write too, so the manifests are read as they come (incrementally),
            # but at most once a second: the check shares the cores with what it measures
            if time.monotonic() > deadline:
                raise TimeoutError("benchmark: rows not replicated to every replica within 1800 s")
            with contextlib.suppress(queue.Empty):
                while len(done) < len(procs):
                    msg = out.get(timeout=max(args.poll_s, WRITING_POLL_S))
                    if msg[0] == "done":
                        done.append(msg)
            if any(p.exitcode not in (None, 0) for p in procs):
                raise RuntimeError("benchmark: a producer process failed")
            polls += 1
            began = time.monotonic()
            progress = check.durable_progress(final=len(done) == len(procs))
            poll_s.append(time.monotonic() - began)
            reached = _stages(progress)
            if len(done) == len(procs):
                for stage in (s for s, ok in reached.items() if ok):
                    stages.setdefault(stage, check.read_at)
            at = check.read_at if all(reached.values()) else None
            if len(done) == len(procs) and at is not None and at > max(d[2] for d in done):
                if check.topology_changed():  # a leader or replica moved meanwhile: poll again with it
                    stages.clear()
                    continue
                # confirmed the monitor's way (manifests on the segments channels), after the clock
                parts = check.progress()
                if not all(fully_replicated(p) for p in parts):  # not expected: poll again, time from then
                    say("shoal: the replicas' WAL Acks are at the end but a segment is not acked yet; polling on")
                    confirm_retries += 1
                    check.forget()
                    continue
                t_end = at
            elif len(done) == len(procs):
                time.sleep(args.poll_s)
        t_first = min(d[1] for d in done)
        t_produced = max(d[2] for d in done)
    finally:
        check.close()
        _stop_children(procs)
    payload = sum(len(m) for s in spans for m in _raw_payloads(args, s, rows))
    seconds = t_end - t_first
    return {
        "pipeline": "shoal RF 3 (write -> segments acked by every replica)",
        "rows": rows,
        "MB": payload / 1e6,
        "seconds": seconds,
        "rows/s": rows / seconds,
        "MB/s": payload / 1e6 / seconds,
        "produced s": t_produced - t_first,
        "wal records": sum(p.wal_append for p in parts),
        "polls": polls,
        "longest poll s": max(poll_s, default=0.0),
        "confirm retries": confirm_retries,
        "clock": [t_first, t_end],
        # first poll (after the producers finished) that found each stage done, from the first write
        **{f"{stage} s": at - t_first for stage, at in stages.items()},
    }


# -- P1: the raw Kafka baseline ------------------------------------------------------------------


def _raw_writer(
    c: Cluster, args: argparse.Namespace, topic: str, span: tuple[int, int], total: int, go: Any, out: Any
) -> None:  # a child process
    from confluent_kafka import Producer

    payloads = _raw_payloads(args, span, total)
    producer = Producer(common.raw_producer_config(c.bootstrap_servers, args))
    producer.list_topics(topic, timeout=30)
    out.put(("ready", 0.0, sum(len(p) for p in payloads)))
    go.wait()
    t0 = time.time()
    for i, payload in enumerate(payloads):
        while True:
            try:
                producer.produce(topic, payload, partition=(span[0] + i) % args.partitions)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush()
    out.put(("done", t0, time.time()))


def _raw_reader(c: Cluster, args: argparse.Namespace, topic: str, expect_bytes: Any, go: Any, out: Any) -> None:
    consumer = common.raw_consumer(c.bootstrap_servers, topic, args.partitions)
    out.put(("ready", 0.0, 0))
    go.wait()
    got = 0
    deadline = time.monotonic() + 1800
    while (expect_bytes.value == 0 or got < expect_bytes.value) and time.monotonic() < deadline:
        for msg in consumer.consume(100, 0.2):
            if msg.error() is None:
                got += len(msg.value() or b"")
    consumer.close()
    out.put(("read", time.time(), got))


def run_raw(c: Cluster, args: argparse.Namespace, say: Callable[[str], None], rows: int) -> dict[str, Any]:
    """The same messages as ``rows`` shoal rows, to a new topic, timed until every consumer read them all."""
    from shoal.kafka import clients
    from shoal.kafka.admin import create_topic
    from shoal.kafka.settings import KafkaSettings, TopicPolicy

    topic = f"bench-raw-{uuid.uuid4().hex[:10]}"
    create_topic(
        clients.admin(KafkaSettings(c.bootstrap_servers)), topic, policy=TopicPolicy(), partitions=args.partitions
    )
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    expect = ctx.Value("q", 0)
    spans = split_evenly(rows, args.producers)
    writers = [(_raw_writer, (c, args, topic, s, rows, go, out)) for s in spans]
    readers = [(_raw_reader, (c, args, topic, expect, go, out)) for _ in range(args.raw_consumers)]
    procs = _children(ctx, writers + readers)
    try:
        ready = _collect(out, "ready", len(procs), procs, 180)
        total = sum(r[2] for r in ready)
        expect.value = total
        say(f"raw: {args.producers} producers, {args.raw_consumers} consumers, {total / 1e6:,.1f} MB")
        go.set()
        msgs = _collect(out, "done", len(writers), procs, 1800)
        reads = _collect(out, "read", len(readers), procs, 1800)
    finally:
        _stop_children(procs)
    if any(r[2] < total for r in reads):
        raise TimeoutError(f"raw consumers read {[r[2] for r in reads]} of {total} bytes")
    t_first = min(m[1] for m in msgs)
    seconds = max(r[1] for r in reads) - t_first
    return {
        "pipeline": f"raw acks=all produce + {args.raw_consumers} consumers (RF 3 topic)",
        "rows": rows,
        "MB": total / 1e6,
        "seconds": seconds,
        "rows/s": rows / seconds,
        "MB/s": total / 1e6 / seconds,
        "produced s": max(m[2] for m in msgs) - t_first,
        "clock": [t_first, t_first + seconds],
    }


# -- P4: latency at half the measured rate -----------------------------------------------------------


def _schedule(rate_rows_s: float, batches_per_s: float, seconds: float) -> tuple[int, float, int]:
    """(rows per batch, interval s, batches) for the latency runs."""
    batch = max(1, int(rate_rows_s / batches_per_s))
    return batch, 1.0 / batches_per_s, max(1, int(seconds * batches_per_s))


def latency_rows(i: int, batch: int, count: int, value_bytes: int) -> Any:
    """Batch ``i`` of ``count``: keys strided over the whole key space (every partition gets some, as
    in P1), odd so that none is one of P1's keys."""
    import numpy as np
    import pyarrow as pa

    rows = build_rows(0, batch, batch, value_bytes)
    step = (2**64 - 1) // (batch * count)
    index = np.arange(batch, dtype=np.uint64) * np.uint64(count) + np.uint64(i)
    return rows.set_column(0, "k", pa.array(index * np.uint64(step) | np.uint64(1), pa.uint64()))


def shoal_latency(
    c: Cluster, args: argparse.Namespace, rate: float, say: Callable[[str], None], *, probe: bool = True
) -> dict[str, Any]:
    """Per batch: write -> ``sync()`` returned, and (``probe``) write -> the batch's last key scanned
    on every node.

    Each batch's ``sync()`` is called right after its write, on its own thread (as a writer
    calling ``write`` then ``sync`` would see it; a ``sync()`` returns once everything written
    before it is accepted; concurrent calls share their offset reads). With ``probe``, one thread
    scans for the sampled keys, oldest first (three key scans per pending sample and round): a key
    is visible once a scan of every node returns it. That probe is a read load on the nodes the raw
    baseline does not have, so :func:`main` measures ``accepted`` in a run without it and
    ``visible_every_replica`` in a second run with it (keys of their own: ``probe`` picks the odd
    keys of one half of the key space)."""
    from producer import Producer
    from shoal.scan import ScanRequest, scan_remote

    batch, interval, count = _schedule(rate, args.batches_per_s, args.latency_seconds)
    what = "accepted and visible on every node" if probe else "accepted"
    say(f"P4 shoal ({what}): {count} batches of {batch:,} rows every {interval * 1e3:.0f} ms ({rate:,.0f} rows/s)")
    locations = node_locations(c)
    samples: list[tuple[float, int, str]] = []  # (write time, the batch's last key, its partition id)
    lock = threading.Lock()
    accepted: list[float] = []
    visible: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + args.latency_seconds + 300

    def pending(done: int) -> list[tuple[float, int, str]]:
        with lock:
            return samples[done:]

    def accept(producer: Any, t0: float) -> None:
        producer.sync(300)
        accepted.append(time.perf_counter() - t0)

    def see() -> None:
        done = 0
        seen: dict[int, set[str]] = {}
        while done < count and time.monotonic() < deadline:
            waiting = pending(done)
            if not waiting:
                time.sleep(0.005)
                continue
            for _t0, key, pid in waiting:
                for loc in set(locations) - seen.setdefault(key, set()):
                    try:
                        if scan_remote(loc, ScanRequest(TABLE, partition_id=pid, key=key), timeout_s=30).num_rows:
                            seen[key].add(loc)
                    except Exception as exc:  # reported; the scan is retried next round
                        errors.append(str(exc)[:200])
            now = time.perf_counter()
            while done < count and done < len(samples) and len(seen.get(samples[done][1], ())) == len(locations):
                visible.append(now - samples[done][0])
                done += 1
            time.sleep(0.01)  # resolution of the visibility latency; finer polling loads the nodes

    with (
        Producer(_producer_config(c, args)) as producer,
        ThreadPoolExecutor(1) as pool,
        ThreadPoolExecutor(count) as syncs,  # one per batch: no sync() waits for a thread
    ):
        pmap = producer.partition_map(TABLE)
        probes = [pool.submit(see)] if probe else []
        start = time.perf_counter()
        for i in range(count):
            wait = start + i * interval - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            rows = latency_rows(i + count * probe, batch, 2 * count, args.value_bytes)
            last_key = int(rows.column("k")[-1].as_py())
            t0 = time.perf_counter()
            producer.write(TABLE, rows)
            probes.append(syncs.submit(accept, producer, t0))
            with lock:
                samples.append((t0, last_key, pmap.lookup(last_key).partition_id))
        for f in probes:
            f.result()
    if probe and len(visible) < count:
        errors.append(f"{count - len(visible)} of {count} batches not visible on every node in time")
    out = {
        "batch_rows": batch,
        "rate_rows_s": batch / interval,
        "accepted": latency_summary(accepted),
        "errors": errors[:5],
    }
    return {**out, "visible_every_replica": latency_summary(visible)} if probe else out


def raw_latency(c: Cluster, args: argparse.Namespace, rate: float, say: Callable[[str], None]) -> dict[str, Any]:
    """acks=all produce -> consume of the same message sizes at the same rate (one consumer)."""
    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

    from shoal.kafka import clients
    from shoal.kafka.admin import create_topic
    from shoal.kafka.settings import KafkaSettings, TopicPolicy

    batch, interval, count = _schedule(rate, args.batches_per_s, args.latency_seconds)
    payload = _raw_payloads(args, (0, batch), args.rows)
    say(
        f"P4 raw: {count} x {len(payload)} message(s) of {sum(map(len, payload)):,} bytes every {interval * 1e3:.0f} ms"
    )
    topic = f"bench-rawlat-{uuid.uuid4().hex[:10]}"
    create_topic(
        clients.admin(KafkaSettings(c.bootstrap_servers)), topic, policy=TopicPolicy(), partitions=args.partitions
    )
    consumer = Consumer(
        {
            "bootstrap.servers": c.bootstrap_servers,
            "group.id": f"bench-rawlat-{uuid.uuid4().hex}",
            "fetch.wait.max.ms": 5,
        }
    )
    consumer.assign([TopicPartition(topic, i, OFFSET_END) for i in range(args.partitions)])
    consumer.poll(1.0)
    producer = Producer(common.raw_producer_config(c.bootstrap_servers, args))
    producer.list_topics(topic, timeout=30)
    sent: dict[int, float] = {}
    lat: list[float] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            for msg in consumer.consume(100, 0.05):
                key = msg.key() if msg.error() is None else None
                if key is not None:
                    t0 = sent.get(int(key))
                    if t0 is not None:
                        lat.append(time.perf_counter() - t0)

    reader = threading.Thread(target=consume, name="rawlat-consumer")
    reader.start()
    try:
        start = time.perf_counter()
        for i in range(count):
            wait = start + i * interval - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            sent[i] = time.perf_counter()
            for j, p in enumerate(payload):  # the batch's last message carries the sample key
                key = str(i).encode() if j == len(payload) - 1 else None
                producer.produce(topic, p, key=key, partition=i % args.partitions)
            producer.poll(0)
        producer.flush(60)
        common.wait_for(lambda: len(lat) >= count, 60, "raw latency samples consumed", 0.05)
    finally:
        stop.set()
        reader.join(10)
        consumer.close()
    return {"batch_rows": batch, "rate_rows_s": batch / interval, "produce_consume": latency_summary(lat)}


# -- main -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    p = common.parser(__doc__.splitlines()[0], cluster=False)
    p.add_argument("--rows", type=common.positive_int, default=200_000, help="rows to write (the issue: 2M)")
    p.add_argument("--value-bytes", type=common.positive_int, default=84, help="string bytes per row (~100 B rows)")
    p.add_argument("--partitions", type=common.positive_int, default=8, help="table partitions")
    p.add_argument("--producers", type=common.positive_int, default=2, help="producer processes")
    p.add_argument("--raw-consumers", type=common.positive_int, default=3, help="raw baseline consumer processes")
    p.add_argument("--brokers", type=common.positive_int, default=3, help="Kafka brokers")
    p.add_argument("--nodes", type=int, choices=(3,), default=3, help="storage nodes (RF 3)")
    p.add_argument("--kafka-heap-mb", type=common.positive_int, default=384, help="heap per broker")
    p.add_argument("--flush-age", type=float, default=1.0, help="nodes' memtable flush age in seconds")
    p.add_argument("--linger-ms", type=int, default=5, help="producer linger.ms (both pipelines)")
    p.add_argument("--batch-bytes", type=common.positive_int, default=1_000_000, help="librdkafka batch.size")
    p.add_argument("--max-message-bytes", type=common.positive_int, default=1_000_000, help="largest ingest message")
    p.add_argument("--poll-s", type=float, default=0.25, help="replication check interval")
    p.add_argument("--latency-seconds", type=float, default=15.0, help="P4: seconds of writes per pipeline")
    p.add_argument(
        "--batches-per-s",
        type=float,
        default=4.0,
        help="P4: batches per second (each batch is one ingest message per partition, one leader transaction each)",
    )
    p.add_argument(
        "--warmup-rows",
        type=common.non_negative_int,
        default=None,
        help="rows of the unmeasured first run of each pipeline (default: --rows, at most 500,000; 0: none)",
    )
    p.add_argument(
        "--repeat",
        type=common.positive_int,
        default=3,
        help="P1: measured runs of each pipeline, alternated; the ratio compares the median runs",
    )
    p.add_argument("--skip-latency", action="store_true", help="P1 only")
    p.add_argument(
        "--broker-requests",
        action="store_true",
        help="the brokers log every request; report their handler time per Kafka API during each "
        "pipeline's measured P1 runs (bench.broker_requests; the logging slows the brokers: not for the ratio)",
    )
    p.add_argument(
        "--latency-rate",
        type=float,
        default=None,
        help="P4 only, at this many rows/s (skips P1 and its raw baseline; for profiling the latency path)",
    )
    args = p.parse_args(argv)
    say = common.progress_printer(args.output)
    common.unwind_on_sigterm()
    with rf3_cluster(args, say, request_log=args.broker_requests) as c:
        create_table(c, args.partitions)
        say("waiting for every partition to accept a first write")
        _warm_up(c, args)
        warmup = warmup_rows(args.rows, args.warmup_rows)
        if warmup:
            say(f"warm-up (not measured): each pipeline once with {warmup:,} rows")
            run_raw(c, args, say, warmup)
            run_shoal(c, args, say, warmup, key_offset=WARMUP_KEY_OFFSET)
        latency: dict[str, Any] = {}

        def measure_latency(rate: float) -> None:
            accepted = shoal_latency(c, args, rate, say, probe=False)
            visible = shoal_latency(c, args, rate, say, probe=True)
            both = {
                **accepted,
                "visible_every_replica": visible["visible_every_replica"],
                "accepted_while_probing": visible["accepted"],
                "errors": accepted["errors"] + visible["errors"],
            }
            latency.update(rate_rows_s=rate, shoal=both, raw=raw_latency(c, args, rate, say))

        shoal: dict[str, Any] = {}
        raw: dict[str, Any] = {}
        requests: dict[str, Any] = {}
        if args.latency_rate is not None:
            measure_latency(args.latency_rate)
        else:
            raws, shoals = [], []
            for i in range(args.repeat):  # alternated, so a slow spell of the machine hits both
                raws.append(run_raw(c, args, say, args.rows))
                shoals.append(run_shoal(c, args, say, args.rows, key_offset=0 if i == 0 else WARMUP_KEY_OFFSET + i))
                if i == 0 and not args.skip_latency:
                    # P4 on the table as the first run left it, as before there were repeats: after three
                    # runs its visible p50 was 26 s against 6.8 s after one (2026-11-26), likely the minors
                    # each run adds, which every key scan of the visibility probe reads (not profiled)
                    measure_latency(0.5 * shoals[0]["rows/s"])
            raw, shoal = median_run(raws), median_run(shoals)
            if args.broker_requests and c.data_dir is not None:
                say("reading the brokers' request logs")
                requests = {
                    "shoal": broker_requests.read_profile(c.data_dir, [tuple(r["clock"]) for r in shoals]),
                    "raw": broker_requests.read_profile(c.data_dir, [tuple(r["clock"]) for r in raws]),
                }
    report(args, shoal, raw, latency, requests)


def _warm_up(c: Cluster, args: argparse.Namespace) -> None:
    """One row per partition written and accepted (topics, leaders and replicas up) before the clock starts."""
    from producer import Producer

    with Producer(_producer_config(c, args)) as producer:
        producer.write(TABLE, build_rows(0, args.partitions, args.partitions, args.value_bytes, key_offset=2**40))
        producer.sync(300)
    check = ReplicationCheck(c)
    try:
        common.wait_for(check.preferred_leaders, 300, "every partition led by its preferred leader", 0.5)
        common.wait_for(check.done, 300, "the warm-up rows replicated", 0.5)
    finally:
        check.close()


def report(
    args: argparse.Namespace,
    shoal: dict[str, Any],
    raw: dict[str, Any],
    latency: dict[str, Any],
    requests: dict[str, Any] | None = None,
) -> None:
    ratio = throughput_ratio(shoal["MB/s"], raw["MB/s"]) if shoal and raw else None
    settings = {
        "rows": args.rows,
        "warmup_rows": warmup_rows(args.rows, args.warmup_rows),
        "row_bytes": 16 + args.value_bytes,
        "partitions": args.partitions,
        "replication_factor": 3,
        "brokers": args.brokers,
        "nodes": args.nodes,
        "producer_processes": args.producers,
        "raw_consumers": args.raw_consumers,
        "flush_age_s": args.flush_age,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_bytes,
        "max_message_bytes": args.max_message_bytes,
        "repeat": args.repeat,
    }
    notes = [
        f"P1 shoal RF 3 / raw Kafka RF 3 throughput ratio: {ratio:.2f}" if ratio is not None else "P1 ratio: -",
    ]
    p4: dict[str, Any] = {}
    if latency:
        s, r = latency["shoal"], latency["raw"]["produce_consume"]
        acc, vis = s["accepted"], s["visible_every_replica"]
        rate_source = "--latency-rate" if args.latency_rate is not None else "50% of shoal's first measured run"
        p4 = {
            "p99_accepted_over_raw": _div(acc["p99_ms"], r["p99_ms"]),
            "p99_visible_over_raw": _div(vis["p99_ms"], r["p99_ms"]),
        }
        notes += [
            f"P4 at {latency['rate_rows_s']:,.0f} rows/s ({rate_source}), ms p50/p99: "
            f"accepted {_ms(acc)}, visible on every replica {_ms(vis)}, raw produce->consume {_ms(r)}",
            f"P4 p99 accepted / raw: {_fmt(p4['p99_accepted_over_raw'])}x, "
            f"p99 visible everywhere / raw: {_fmt(p4['p99_visible_over_raw'])}x",
        ]
        if "accepted_while_probing" in s:
            notes.append(
                "P4 accepted in the visibility run (its key scans loading the nodes): "
                + _ms(s["accepted_while_probing"])
            )
        if s["errors"]:
            notes.append(f"P4 shoal sample errors: {s['errors']}")
    for name, profile in (requests or {}).items():
        notes.append(broker_requests.describe(f"{name}'s measured P1 runs", profile))
    if args.output == "json":
        import json

        print(
            json.dumps(
                {
                    "benchmark": "replicated",
                    "ratio": ratio,
                    "settings": settings,
                    "results": [r for r in (shoal, raw) if r],
                    "latency": latency,
                    "latency_ratios": p4,
                    **({"broker_requests": requests} if requests else {}),
                    "notes": notes,
                },
                indent=2,
                default=str,
            )
        )
        return
    common.report(
        "replicated writes at RF 3 vs raw Kafka at RF 3",
        ["pipeline", "rows", "MB", "seconds", "rows/s", "MB/s", "produced s"],
        [r for r in (shoal, raw) if r],
        settings,
        "table",
        notes,
    )


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _ms(s: dict[str, Any]) -> str:
    return f"{_fmt(s['p50_ms'])}/{_fmt(s['p99_ms'])} (n={s['n']})"


if __name__ == "__main__":
    main()
