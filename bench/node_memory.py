"""Node memory: the RSS of one storage node leading 50 partitions, idle and under a steady load.

Starts a throwaway local cluster (ZooKeeper, 1 KRaft broker) and ONE storage node process (the
node's default flush policy unless ``--flush-age``; its Arrow allocator ``--arrow-memory-pool``,
the node's default unless given, see :mod:`storage_node.allocator`), samples the node process's RSS (psutil) every
``--sample-s`` seconds from the moment it registered, and goes through these phases:

1. ``no table``: the node idle with no table, for ``--settle-s`` seconds;
2. ``creating``: a table of ``--partitions`` partitions at replication factor 1 on that node (so it
   leads every one), until one warm-up row per partition was accepted (``Producer.sync``);
3. ``idle``: the node leading every partition, no writes, for ``--settle-s`` seconds;
4. ``load``: ``--rate`` rows/s of ~100-byte rows for ``--duration`` seconds, written in
   ``--batches-per-s`` batches a second, each batch spread over every partition (one ingest message
   per partition); every ``--sync-every`` seconds a ``sync()`` on its own thread measures how long
   the node takes to accept what was written before it (its lag);
5. ``drain``: the last ``sync()``: every row written is accepted;
6. ``stop``: SIGTERM to the node (as ``shoal stop`` sends it), idle or, with ``--stop-under-load``,
   while ``--rate`` rows/s are still written; ``stop s`` is the time until its process exited
   (``-`` if it still ran after ``--stop-timeout`` seconds; the cluster's cleanup kills it then).

It reports the RSS before the table exists, idle with every partition led (and the growth per
partition between the two), peak and final RSS under load, rows written and accepted, the node's
CPU during the load, its stop time, and whether the RSS is bounded under load: the slope of a
least-squares line through the last third of the load's samples, in MiB per minute, at most
``--bound-mib-per-min``.
``ratio`` = peak RSS under load / idle RSS with every partition led (what a steady load costs on top
of the partitions' fixed cost; DESIGN.md section 5 for what a leader keeps in memory).

Every process it starts (ZooKeeper, the broker, the node) is stopped by pid at the end, also on
Ctrl-C, SIGTERM or a failure.

    python -m bench.node_memory                     # ~3-4 minutes on 2 cores
    python -m bench.node_memory --duration 600 --rate 20000 --output json
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import common
from storage_node.allocator import ARROW_MEMORY_POOLS, DEFAULT_ARROW_MEMORY_POOL

TABLE = "bench"
SERVER_ID = "node-1"
MIB = 1 << 20

# -- pure parts (unit-tested) ----------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    t: float
    """Seconds since sampling started."""
    phase: str
    rss: int
    """Bytes."""
    threads: int


def slope_per_min(points: Sequence[tuple[float, float]]) -> float | None:
    """The slope of the least-squares line through ``(seconds, value)`` points, per minute; None if
    fewer than 2 points or no time span."""
    if len(points) < 2:
        return None
    ts = [t for t, _ in points]
    vs = [v for _, v in points]
    mt, mv = statistics.fmean(ts), statistics.fmean(vs)
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0:
        return None
    return 60.0 * sum((t - mt) * (v - mv) for t, v in zip(ts, vs, strict=True)) / var


def last_third(samples: Sequence[Sample]) -> list[Sample]:
    """The last third of ``samples`` (at least 2 of them when there are 2)."""
    return list(samples[len(samples) - max(2, len(samples) // 3) :]) if len(samples) >= 2 else list(samples)


def phase(samples: Sequence[Sample], name: str) -> list[Sample]:
    return [s for s in samples if s.phase == name]


def summarize(samples: Sequence[Sample], partitions: int, bound_mib_per_min: float) -> dict[str, Any]:
    """The memory figures of a run from its samples (RSS in MiB; medians of the idle phases)."""

    def median_mib(name: str) -> float | None:
        got = phase(samples, name)
        return statistics.median(s.rss for s in got) / MIB if got else None

    before, idle = median_mib("no table"), median_mib("idle")
    load = phase(samples, "load")
    tail = last_third(load)
    slope = slope_per_min([(s.t, s.rss / MIB) for s in tail])
    peak = max(s.rss for s in load) / MIB if load else None
    final = load[-1].rss / MIB if load else None
    return {
        "RSS no table MiB": before,
        "RSS idle MiB": idle,
        "per partition MiB": (idle - before) / partitions if idle is not None and before is not None else None,
        "RSS peak load MiB": peak,
        "RSS final load MiB": final,
        "load growth MiB": final - idle if final is not None and idle is not None else None,
        "last third slope MiB/min": slope,
        "bounded": None if slope is None else slope <= bound_mib_per_min,
        "threads idle": max((s.threads for s in phase(samples, "idle")), default=None),
        "threads load": max((s.threads for s in load), default=None),
        "ratio": peak / idle if peak is not None and idle else None,
    }


# -- the node's RSS --------------------------------------------------------------------------------


class Sampler:
    """Samples one process's RSS and thread count every ``every_s`` seconds on its own thread, each
    sample tagged with the phase set last (:meth:`enter`)."""

    def __init__(self, pid: int, every_s: float) -> None:
        import psutil

        self.process = psutil.Process(pid)
        self.every_s = every_s
        self.samples: list[Sample] = []
        self.phase = "start"
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.take()

    def take(self) -> None:
        import psutil

        try:
            with self.process.oneshot():
                rss, threads = self.process.memory_info().rss, self.process.num_threads()
        except psutil.Error as exc:
            raise RuntimeError(f"benchmark: the storage node process is gone ({exc})") from exc
        self.samples.append(Sample(time.monotonic() - self._t0, self.phase, rss, threads))

    def cpu_s(self) -> float:
        times = self.process.cpu_times()
        return float(times.user + times.system)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.take()
            except RuntimeError:
                return  # the main thread finds the node gone at its next step


# -- the run --------------------------------------------------------------------------------------


def _producer(c: common.NodeCluster) -> Any:
    from producer import Producer, ProducerConfig

    return Producer(ProducerConfig(c.connection()))


def create_and_lead(c: common.NodeCluster, args: argparse.Namespace, producer: Any) -> float:
    """Create the table on the one node, wait until every partition accepted a first row; the seconds it took."""
    from bench.replicated import build_rows

    with common.timer() as elapsed:
        common.create_table(c, common.table_definition(TABLE, 1), [SERVER_ID], args.partitions)
        producer.write(TABLE, build_rows(0, args.partitions, args.partitions, args.value_bytes, key_offset=2**40))
        producer.sync(300)
        return elapsed()


def steady_load(
    producer: Any, args: argparse.Namespace, say: Callable[[str], None]
) -> tuple[int, float, list[tuple[float, float]]]:
    """``--rate`` rows/s for ``--duration`` s; (rows written, seconds, (when, sync seconds) per lag probe)."""
    from bench.replicated import latency_rows

    batch = max(1, int(args.rate / args.batches_per_s))
    interval = 1.0 / args.batches_per_s
    count = max(1, int(args.duration * args.batches_per_s))
    say(f"load: {count} batches of {batch:,} rows every {interval * 1e3:.0f} ms ({batch / interval:,.0f} rows/s)")
    lags: list[tuple[float, float]] = []
    probes: list[Future[None]] = []

    def probe(t: float) -> None:
        t0 = time.perf_counter()
        producer.sync(args.duration + 300)
        lags.append((t, time.perf_counter() - t0))

    written = 0
    next_probe = args.sync_every
    with ThreadPoolExecutor(1) as pool, common.timer() as elapsed:
        start = time.perf_counter()
        for i in range(count):
            wait = start + i * interval - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            producer.write(TABLE, latency_rows(i, batch, count, args.value_bytes))
            written += batch
            now = elapsed()
            if now >= next_probe and (not probes or probes[-1].done()):
                probes.append(pool.submit(probe, now))
                next_probe = now + args.sync_every
            if i % max(1, int(10 * args.batches_per_s)) == 0 and i:
                say(f"load: {written:,} rows in {now:.0f} s")
        seconds = elapsed()
        for f in probes:
            f.result()
    return written, seconds, lags


def measure(c: common.NodeCluster, args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    node = c.nodes[0]
    with Sampler(node.pid, args.sample_s) as sampler, _producer(c) as producer:
        sampler.enter("no table")
        say(f"node {node.name} (pid {node.pid}) idle without a table for {args.settle_s:.0f} s")
        time.sleep(args.settle_s)  # the measurement window itself, not a synchronisation
        sampler.enter("creating")
        say(f"creating a table of {args.partitions} partitions at RF 1 on {node.name}")
        lead_s = create_and_lead(c, args, producer)
        sampler.enter("idle")
        say(f"{args.partitions} leaders accepted a first row in {lead_s:.1f} s; idle for {args.settle_s:.0f} s")
        time.sleep(args.settle_s)
        cpu0 = sampler.cpu_s()
        sampler.enter("load")
        written, load_s, lags = steady_load(producer, args, say)
        cpu_s = sampler.cpu_s() - cpu0
        sampler.enter("drain")
        say("waiting until every row written is accepted")
        with common.timer() as elapsed:
            producer.sync(600)
            drain_s = elapsed()
        sampler.enter("accepted")
        sampler.enter("stop")
        stop_s, stop_log = stop_node(c, args, producer, say)
    result = summarize(sampler.samples, args.partitions, args.bound_mib_per_min)
    accepted = written + args.partitions  # sync() returned: every row written, warm-up rows too
    result.update(
        {
            "leaders ready s": lead_s,
            "rows written": written + args.partitions,
            "rows accepted": accepted,
            "load rows/s": written / load_s,
            "load s": load_s,
            "max accept lag s": max((lag for _, lag in lags), default=None),
            "last accept lag s": lags[-1][1] if lags else None,
            "drain s": drain_s,
            "node CPU %": 100.0 * cpu_s / load_s,
            "RSS accepted MiB": next(s.rss for s in reversed(sampler.samples) if s.phase == "accepted") / MIB,
            "stop s": stop_s,
        }
    )
    return {"result": result, "samples": sampler.samples, "lags": lags, "stop_log": stop_log}


def stop_node(
    c: common.NodeCluster, args: argparse.Namespace, producer: Any, say: Callable[[str], None]
) -> tuple[float | None, list[str]]:
    """SIGTERM the node (rows still written with ``--stop-under-load``); the seconds until it exited
    (None if not within ``--stop-timeout``) and its log lines from the signal on."""
    from bench.replicated import latency_rows

    node = c.nodes[0]
    writing = threading.Event()
    done = threading.Event()

    def write() -> None:
        batch = max(1, int(args.rate / args.batches_per_s))
        i = 0
        while not done.wait(1.0 / args.batches_per_s):
            producer.write(TABLE, latency_rows(i, batch, 1_000_000, args.value_bytes))
            i += 1
            writing.set()

    with ThreadPoolExecutor(1) as pool:
        if args.stop_under_load:
            writer = pool.submit(write)
            writing.wait(30)
        say(f"SIGTERM to {node.name}" + (" under load" if args.stop_under_load else " (idle)"))
        try:
            stop_s = common.stop_seconds(node, args.stop_timeout)
        finally:
            done.set()
        if args.stop_under_load:
            writer.result()
    say(f"{node.name} exited {stop_s:.1f} s after SIGTERM" if stop_s is not None else f"{node.name} still runs")
    lines = Path(node.log_path).read_text(errors="replace").splitlines()
    start = max((i for i, line in enumerate(lines) if f"node {node.name} stopping" in line), default=0)
    return stop_s, lines[start:]


# -- main -------------------------------------------------------------------------------------------


COLUMNS = (
    "RSS no table MiB",
    "RSS idle MiB",
    "per partition MiB",
    "RSS peak load MiB",
    "RSS final load MiB",
    "last third slope MiB/min",
    "bounded",
    "rows written",
    "load rows/s",
    "max accept lag s",
    "node CPU %",
    "stop s",
)


def main(argv: list[str] | None = None) -> None:
    p = common.parser(__doc__.splitlines()[0], cluster=False)
    p.add_argument("--partitions", type=common.positive_int, default=50, help="partitions the one node leads")
    p.add_argument("--duration", type=float, default=90.0, help="seconds of load")
    p.add_argument("--rate", type=common.positive_int, default=5_000, help="rows written per second")
    p.add_argument("--batches-per-s", type=float, default=2.0, help="batches per second (each over every partition)")
    p.add_argument("--value-bytes", type=common.positive_int, default=84, help="string bytes per row (~100 B rows)")
    p.add_argument("--sample-s", type=float, default=1.0, help="RSS sampling interval")
    p.add_argument("--settle-s", type=float, default=10.0, help="seconds of each idle measurement")
    p.add_argument("--sync-every", type=float, default=5.0, help="seconds between accept-lag probes under load")
    p.add_argument(
        "--bound-mib-per-min",
        type=float,
        default=2.0,
        help="the RSS counts as bounded if its slope over the last third of the load is at most this",
    )
    p.add_argument("--flush-age", type=float, default=None, help="the node's memtable flush age (default: its own)")
    p.add_argument("--stop-timeout", type=float, default=120.0, help="seconds to wait for the node to exit")
    p.add_argument("--stop-under-load", action="store_true", help="SIGTERM the node while rows are written")
    p.add_argument("--kafka-heap-mb", type=common.positive_int, default=512, help="the broker's heap")
    p.add_argument(
        "--arrow-memory-pool",
        choices=sorted(ARROW_MEMORY_POOLS),
        default=DEFAULT_ARROW_MEMORY_POOL,
        help="the node's Arrow allocator (shoal node --arrow-memory-pool)",
    )
    args = p.parse_args(argv)
    say = common.progress_printer(args.output)
    common.unwind_on_sigterm()
    with common.node_cluster(
        say,
        brokers=1,
        nodes=1,
        kafka_heap_mb=args.kafka_heap_mb,
        flush_age=args.flush_age,
        prefix="shoal-bench-mem-",
        node_args=("--arrow-memory-pool", args.arrow_memory_pool),
    ) as c:
        run = measure(c, args, say)
    result = run["result"]
    settings = {
        "partitions": args.partitions,
        "replication_factor": 1,
        "brokers": 1,
        "rate_rows_s": args.rate,
        "row_bytes": 16 + args.value_bytes,
        "duration_s": args.duration,
        "batches_per_s": args.batches_per_s,
        "flush_age_s": args.flush_age or "node default",
        "arrow_memory_pool": args.arrow_memory_pool,
        "bound_mib_per_min": args.bound_mib_per_min,
        "stop": "under load" if args.stop_under_load else "idle",
    }
    notes = [
        "RSS of the storage node process alone (psutil), sampled every "
        f"{args.sample_s:g} s; idle figures are medians over {args.settle_s:g} s",
        "per partition = (idle with every partition led - idle without a table) / partitions",
        "bounded = the least-squares slope of the RSS over the last third of the load <= "
        f"{args.bound_mib_per_min:g} MiB/min",
        f"rows accepted: {result['rows accepted']:,} of {result['rows written']:,} "
        f"(every row accepted {result['drain s']:.1f} s after the load stopped)",
        "stop s = SIGTERM to the node's process group -> its process exited"
        + (" (rows still written)" if args.stop_under_load else " (idle)"),
    ]
    common.report(
        f"storage node RSS leading {args.partitions} partitions, idle and under load",
        list(COLUMNS),
        [result],
        settings,
        args.output,
        notes,
        ratio=result["ratio"],
        ratio_meaning=f"peak RSS under load / idle RSS leading {args.partitions} partitions (goal <= 1.5)",
        extra={
            "samples": [[round(s.t, 1), s.phase, round(s.rss / MIB, 1), s.threads] for s in run["samples"]],
            "accept_lags": [[round(t, 1), round(lag, 3)] for t, lag in run["lags"]],
            "stop_log": run["stop_log"],
        },
    )


if __name__ == "__main__":
    main()
