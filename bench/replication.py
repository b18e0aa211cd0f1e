"""Segment replication benchmark: fast-forward cost by segment size, and CPU per replicated row.

Two measurements, both in-process through the real code paths (no Kafka: the messages a follower
would fetch are built by the leader code and handed over as bytes):

(a) **fast-forward by segment size** (1k..1M rows): a follower receives a segment as the leader's
    segments channel carries it (Avro manifest + 512 KiB chunks of a real segment file) and applies
    it with :func:`storage_node.replication.receive.apply_segment` (decide, stream chunks to disk,
    sha256, fsync, rename, footer check, one SQLite transaction). Shown next to the cost of only
    writing the same bytes (sha256 + write + fsync + rename): the rest must stay flat.
(b) **CPU per replicated row**: process CPU time (``time.process_time``: all threads, user + system)
    per row of

    - the leader: re-validate each ingest Arrow IPC message, create the hash-chained WAL record,
      GTID-stamp the rows, append to the memtable, flush to Parquet, frame the manifest and chunks;
    - a follower: decode the manifest and chunks and ``apply_segment`` (never reads a row); the
      same plus tailing the leader's WAL records into its in-memory overlay (fresh reads: each
      record's hash chain is checked as it arrives, its rows are decoded by the first read that
      wants them, :mod:`storage_node.replica.overlay`); and the same again with every record read
      once before its segment arrives (the most a read can cost: each record decoded once);
    - the row-based baseline, measured in the same run: every replica decodes the ingest Arrow IPC
      messages itself, stamps and inserts the rows into its memtable and flushes its own segments,
      the design EventQL (seed 000) section 6.1 rejects.

Seed 000 sections 3.3-3.5 (followers fast-forward, never re-apply rows) and 6.1.

    python -m bench.replication --sizes 1000,10000,100000,1000000 --rows 200000
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench import common
from bench.fast_forward import versioned_rows

LEADER, FOLLOWER = 1, 2
"""Placement ids: the leader publishes, the follower receives."""


def make_table() -> Any:
    from metadata.table import Column, ColumnType, TableDefinition

    return TableDefinition(
        "bench", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 3
    )


def cpu_time() -> float:
    """CPU seconds of this process so far (every thread, user + system)."""
    return time.process_time()


@dataclass
class SegmentMessages:
    """What the leader's segments channel carries for one segment: the manifest and its chunks, as bytes."""

    manifest: bytes
    chunks: list[bytes]
    rows: int


# -- (a) fast-forward by segment size ------------------------------------------------------------------


def segment_messages(
    directory: Path, rows: pa.Table, partition_id: str, base: str | None, wal_offset: int, topics: Any
) -> SegmentMessages:
    """Write ``rows`` as a real segment and frame it as the leader publishes it (manifest + chunks)."""
    from shoal.ids import new_segment_id
    from shoal.segments import SegmentEntry, SegmentRecord, WalRange, write_segment
    from shoal.segments.channel import DEFAULT_CHUNK_BYTES, to_wire
    from shoal.wire.records import SegmentChunk

    sid = new_segment_id()
    written = write_segment(directory, sid, rows, key_columns=["k"])
    entry = SegmentEntry(
        segment_id=sid,
        base_segment_id=base,
        placement_id=LEADER,
        epoch=1,
        is_major=base is None,
        covered=(WalRange(partition_id, LEADER, wal_offset, wal_offset + 1),),
    )
    record = SegmentRecord(
        entry=entry, sha256=written.sha256, row_count=written.row_count, size_bytes=written.size_bytes
    )
    wire = to_wire(record, table="bench", partition_id=partition_id, topics=topics, latest_major_offset=0)
    data = written.path.read_bytes()
    chunks = [
        SegmentChunk(sid, i, wire.chunk_count, data[i * DEFAULT_CHUNK_BYTES : (i + 1) * DEFAULT_CHUNK_BYTES]).to_bytes()
        for i in range(wire.chunk_count)
    ]
    return SegmentMessages(wire.to_bytes(), chunks, written.row_count)


def follower_receive(replica: Any, msgs: SegmentMessages, topics: Any) -> Any:
    """The follower's handling of one segment's messages (storage_node.roles.follower ``_handle``)."""
    from shoal.segments.channel import from_wire
    from shoal.wire.records import ManifestRecord as WireManifest
    from shoal.wire.records import SegmentChunk
    from storage_node.replication.receive import apply_segment

    wire = WireManifest.from_bytes(msgs.manifest)
    manifest = from_wire(wire, sender_placement_id=LEADER, topics=topics)
    chunks = (SegmentChunk.from_bytes(c).data for c in msgs.chunks)
    result = apply_segment(replica, manifest, chunks, leader_placement_id=LEADER)
    if result.outcome.value not in ("FAST_FORWARD", "FAST_FORWARD_ADD"):
        raise RuntimeError(f"benchmark: the follower answered {result.outcome.value}: {result.reason}")
    return result


def bytes_only(directory: Path, msgs: SegmentMessages, name: str) -> None:
    """Only storing the bytes: sha256 while writing, fsync, rename (what any receiver must pay)."""
    digest = hashlib.sha256()
    tmp, final = directory / f".{name}.tmp", directory / name
    with open(tmp, "wb") as f:
        for chunk in msgs.chunks:
            digest.update(chunk)
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    digest.hexdigest()


def measure_size(size: int, repeat: int, value_bytes: int, workdir: Path) -> dict[str, Any]:
    from shoal.ids import new_partition_id
    from shoal.topics import TopicNames
    from storage_node.replica import PartitionReplica

    topics = TopicNames("bench")
    pid = new_partition_id()
    src = workdir / f"leader-{size}"
    src.mkdir()
    replica = PartitionReplica(make_table(), pid, FOLLOWER, workdir / f"follower-{size}")
    raw_dir = workdir / f"raw-{size}"
    raw_dir.mkdir()
    apply_s: list[float] = []
    apply_cpu: list[float] = []
    raw_s: list[float] = []
    try:
        base = segment_messages(src, versioned_rows(1000, 0, value_bytes, 0), pid, None, 0, topics)
        follower_receive(replica, base, topics)  # the base major: later segments fast-forward onto it
        rows = versioned_rows(size, 500, value_bytes, 1000)
        seg_bytes = 0
        for i in range(repeat):
            msgs = segment_messages(src, rows, pid, replica.chain.root, i + 1, topics)
            seg_bytes = sum(len(c) for c in msgs.chunks)
            t0, c0 = time.perf_counter(), cpu_time()
            follower_receive(replica, msgs, topics)
            apply_s.append(time.perf_counter() - t0)
            apply_cpu.append(cpu_time() - c0)
            t0 = time.perf_counter()
            bytes_only(raw_dir, msgs, f"{i}.bin")
            raw_s.append(time.perf_counter() - t0)
    finally:
        replica.close()
    a, c, r = statistics.median(apply_s), statistics.median(apply_cpu), statistics.median(raw_s)
    return {
        "rows": size,
        "segment MB": seg_bytes / 1e6,
        "apply ms": a * 1e3,
        "bytes only ms": r * 1e3,
        "apply - bytes ms": (a - r) * 1e3,
        "apply CPU ms": c * 1e3,
        "apply us/row": a / size * 1e6,
        "rows decoded": 0,
    }


# -- (b) CPU per replicated row ------------------------------------------------------------------------


def ingest_messages(rows: int, batch_rows: int, value_bytes: int) -> list[bytes]:
    """The ingest topic's messages as the producer writes them: one Arrow IPC stream per batch."""
    from shoal.wire.arrow_ipc import encode_batch
    from shoal.wire.ingest import ingest_schema

    schema = ingest_schema(make_table().arrow_schema(), ("k",))
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    rng = np.random.default_rng(7)
    out = []
    for first in range(0, rows, batch_rows):
        n = min(batch_rows, rows - first)
        data = alphabet[rng.integers(0, len(alphabet), size=n * value_bytes)].tobytes()
        offsets = pa.array(np.arange(0, (n + 1) * value_bytes, value_bytes, dtype=np.int32), pa.int32())
        values = pa.StringArray.from_buffers(n, offsets.buffers()[1], pa.py_buffer(data))
        keys = pa.array(np.arange(first, first + n, dtype=np.uint64), pa.uint64())
        table = pa.table({"k": keys, "v": values, "_shoal_deleted": pa.array(np.zeros(n, dtype=bool))}, schema=schema)
        out.append(encode_batch(table))
    return out


@dataclass
class LeaderOutput:
    wal_records: list[bytes] = field(default_factory=list)
    segments: list[SegmentMessages] = field(default_factory=list)


def run_leader(directory: Path, partition_id: str, messages: list[bytes], segment_rows: int) -> LeaderOutput:
    """The leader's work for these ingest messages (storage_node.roles.leader ``_process`` + publish)."""
    from shoal.segments import SegmentRecord
    from shoal.segments.channel import DEFAULT_CHUNK_BYTES, to_wire
    from shoal.segments.parquet_io import segment_path
    from shoal.topics import TopicNames
    from shoal.wire.ingest import TABLE_HEADER
    from shoal.wire.records import GENESIS_HASH, Gtid, IngestOffset, SegmentChunk, WalRecord
    from storage_node.replica import PartitionReplica
    from storage_node.replica import versioned_rows as stamp_rows
    from storage_node.replica.validate import IngestValidator, Rejected

    topics = TopicNames("bench")
    table = make_table()
    replica = PartitionReplica(table, partition_id, LEADER, directory)
    validator = IngestValidator(table)
    headers = [(TABLE_HEADER, table.name.encode())]
    out = LeaderOutput()
    seq, prev = 0, GENESIS_HASH
    ingest_topic = topics.ingest(partition_id)

    def publish(record: SegmentRecord) -> None:
        wire = to_wire(record, table=table.name, partition_id=partition_id, topics=topics, latest_major_offset=0)
        chunks = []
        with open(segment_path(replica.directory, record.segment_id), "rb") as f:
            for i in range(wire.chunk_count):
                chunks.append(
                    SegmentChunk(record.segment_id, i, wire.chunk_count, f.read(DEFAULT_CHUNK_BYTES)).to_bytes()
                )
        out.segments.append(SegmentMessages(wire.to_bytes(), chunks, record.row_count))

    try:
        for offset, payload in enumerate(messages):
            rows = validator.validate(payload, headers)
            if isinstance(rows, Rejected):
                raise RuntimeError(f"benchmark: ingest message refused: {rows}")
            gtid = Gtid(1, seq)
            record = WalRecord.create(
                partition_id=partition_id,
                placement_id=LEADER,
                gtid=gtid,
                row_count=rows.num_rows,
                payload=payload,
                prev_hash=prev,
                ingest_offsets=(IngestOffset(ingest_topic, 0, offset),),
            )
            out.wal_records.append(record.to_bytes())
            seq, prev = seq + rows.num_rows, record.hash
            replica.append(stamp_rows(rows, gtid), offset)
            if replica.memtable.rows >= segment_rows or offset == len(messages) - 1:
                flushed = replica.flush(epoch=1)
                if flushed is not None:
                    publish(flushed)
    finally:
        replica.close()
    return out


def run_follower(
    directory: Path, partition_id: str, leader: LeaderOutput, *, overlay: bool, read_all: bool = False
) -> int:
    """A follower's work: apply each published segment; with ``overlay`` also tail the WAL records
    into it (as ``PartitionFollower._tail_wal`` does); with ``read_all`` every record's rows are
    decoded (as a scan does) before the segment covering them arrives."""
    from shoal.topics import TopicNames
    from shoal.wire.ingest import ingest_schema
    from shoal.wire.records import WalRecord, verify_chain
    from storage_node.replica import PartitionReplica, PendingRows
    from storage_node.replica import versioned_rows as stamp_rows
    from storage_node.replica.overlay import WalOverlay

    def rows_of(record: WalRecord) -> Any:
        return stamp_rows(record.rows(schema), record.gtid)

    topics = TopicNames("bench")
    table = make_table()
    replica = PartitionReplica(table, partition_id, FOLLOWER, directory)
    schema = ingest_schema(table.arrow_schema(), table.primary_key)
    channel = (partition_id, LEADER)
    replica.overlay = WalOverlay() if overlay else None
    prev: bytes | None = None
    applied = 0
    try:
        wal = iter(enumerate(leader.wal_records))
        for msgs in leader.segments:
            if overlay:  # the WAL records this segment covers arrive (and are tailed) before the segment
                assert replica.overlay is not None
                covered_rows = 0
                for offset, data in wal:
                    record = WalRecord.from_bytes(data)
                    verify_chain([record], prev_hash=prev)
                    prev = record.hash
                    replica.overlay.add(
                        channel,
                        offset,
                        PendingRows(record.row_count, partial(rows_of, record)),
                        replica.chain.coverage(),
                    )
                    covered_rows += record.row_count
                    if covered_rows >= msgs.rows:
                        break
                if read_all:
                    replica.overlay.decode_pending()
            follower_receive(replica, msgs, topics)
            applied += msgs.rows
        if overlay:
            assert replica.overlay is not None and replica.overlay.records == 0, "overlay not emptied by segments"
    finally:
        replica.close()
    return applied


def run_row_based(
    directory: Path, partition_id: str, placement_id: int, messages: list[bytes], segment_rows: int
) -> int:
    """One replica of the rejected design: decode every ingest message, stamp, insert, flush its own segments."""
    from shoal.wire.ingest import TABLE_HEADER
    from shoal.wire.records import Gtid
    from storage_node.replica import PartitionReplica
    from storage_node.replica import versioned_rows as stamp_rows
    from storage_node.replica.validate import IngestValidator, Rejected

    table = make_table()
    replica = PartitionReplica(table, partition_id, placement_id, directory)
    validator = IngestValidator(table)
    headers = [(TABLE_HEADER, table.name.encode())]
    seq = 0
    try:
        for offset, payload in enumerate(messages):
            rows = validator.validate(payload, headers)
            if isinstance(rows, Rejected):
                raise RuntimeError(f"benchmark: ingest message refused: {rows}")
            replica.append(stamp_rows(rows, Gtid(1, seq)), offset)
            seq += rows.num_rows
            if replica.memtable.rows >= segment_rows or offset == len(messages) - 1:
                replica.flush(epoch=1)
    finally:
        replica.close()
    return seq


def cpu_of(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(CPU seconds, wall seconds, result) of one call."""
    c0, t0 = cpu_time(), time.perf_counter()
    result = fn()
    return cpu_time() - c0, time.perf_counter() - t0, result


def measure_cpu(
    rows: int, batch_rows: int, segment_rows: int, value_bytes: int, repeat: int, workdir: Path
) -> list[dict[str, Any]]:
    from shoal.ids import new_partition_id

    messages = ingest_messages(rows, batch_rows, value_bytes)
    samples: dict[str, list[tuple[float, float]]] = {}
    runs = iter(range(1_000_000))

    def fresh() -> tuple[Path, str]:
        d = workdir / f"run-{next(runs)}"
        d.mkdir()
        return d, new_partition_id()

    # a small warm-up of every path (imports, first-call costs), not measured
    d, pid = fresh()
    warm = run_leader(d, pid, messages[:5], segment_rows)
    run_follower(d, pid, warm, overlay=True)
    run_row_based(fresh()[0], pid, 3, messages[:5], segment_rows)
    for _ in range(repeat):
        d, pid = fresh()
        cpu, wall, out = cpu_of(partial(run_leader, d, pid, messages, segment_rows))
        samples.setdefault("leader", []).append((cpu, wall))
        cpu, wall, n = cpu_of(partial(run_follower, d, pid, out, overlay=False))
        assert n == rows, (n, rows)
        samples.setdefault("follower (segments)", []).append((cpu, wall))
        cpu, wall, n = cpu_of(partial(run_follower, workdir / f"overlay-{next(runs)}", pid, out, overlay=True))
        assert n == rows, (n, rows)
        samples.setdefault("follower + WAL overlay", []).append((cpu, wall))
        read = partial(run_follower, workdir / f"read-{next(runs)}", pid, out, overlay=True, read_all=True)
        cpu, wall, n = cpu_of(read)
        assert n == rows, (n, rows)
        samples.setdefault("follower + WAL overlay, every record read", []).append((cpu, wall))
        rb_dir, rb_pid = fresh()
        cpu, wall, n = cpu_of(partial(run_row_based, rb_dir, rb_pid, 2, messages, segment_rows))
        assert n == rows, (n, rows)
        samples.setdefault("row-based replica", []).append((cpu, wall))
    out_rows = []
    for role, values in samples.items():
        cpu = statistics.median(v[0] for v in values)
        wall = statistics.median(v[1] for v in values)
        out_rows.append(
            {
                "role": role,
                "CPU s": cpu,
                "wall s": wall,
                "CPU us/row": cpu / rows * 1e6,
                "rows/s (CPU)": rows / cpu if cpu else None,
            }
        )
    return out_rows


def main(argv: list[str] | None = None) -> None:
    p: argparse.ArgumentParser = common.parser(__doc__.splitlines()[0], cluster=False)
    p.add_argument(
        "--sizes",
        type=common.int_list,
        default=[1000, 10_000, 100_000, 1_000_000],
        help="(a) segment sizes in rows (comma-separated)",
    )
    p.add_argument("--repeat", type=common.positive_int, default=3, help="runs per measurement (median reported)")
    p.add_argument("--rows", type=common.positive_int, default=200_000, help="(b) rows replicated")
    p.add_argument("--batch-rows", type=common.positive_int, default=1000, help="(b) rows per ingest message")
    p.add_argument("--segment-rows", type=common.positive_int, default=50_000, help="(b) rows per flushed segment")
    p.add_argument("--value-bytes", type=common.positive_int, default=32, help="bytes of the string column per row")
    p.add_argument(
        "--replication-factor",
        type=common.positive_int,
        default=3,
        help="(b) replicas, for the whole-cluster CPU ratio",
    )
    p.add_argument("--dir", type=Path, default=None, help="where to write segments (default: a temp dir)")
    args = p.parse_args(argv)
    say = common.progress_printer(args.output)
    with tempfile.TemporaryDirectory(prefix="shoal-bench-repl-", dir=args.dir) as tmp:
        sizes = []
        for size in args.sizes:
            say(f"(a) fast-forward of a {size:,}-row segment")
            sizes.append(measure_size(size, args.repeat, args.value_bytes, Path(tmp)))
        say(f"(b) CPU per row: {args.rows:,} rows through leader, follower and the row-based baseline")
        cpu = measure_cpu(args.rows, args.batch_rows, args.segment_rows, args.value_bytes, args.repeat, Path(tmp))
    report(args, sizes, cpu)


def report(args: argparse.Namespace, sizes: list[dict[str, Any]], cpu: list[dict[str, Any]]) -> None:
    first, last = sizes[0], sizes[-1]
    per = {r["role"]: r["CPU us/row"] for r in cpu}
    leader, follower = per["leader"], per["follower (segments)"]
    overlay, row_based = per["follower + WAL overlay"], per["row-based replica"]
    rf = args.replication_factor
    segment_cluster = leader + (rf - 1) * follower
    row_cluster = rf * row_based
    ratios = {
        "leader / follower CPU per row": leader / follower,
        "row-based replica / follower CPU per row": row_based / follower,
        "row-based replica / follower+overlay CPU per row": row_based / overlay,
        f"cluster CPU per row, RF {rf}: row-based / segment replication": row_cluster / segment_cluster,
        f"fast-forward {first['rows']:,} -> {last['rows']:,} rows: apply - bytes grew": (
            last["apply - bytes ms"] / first["apply - bytes ms"] if first["apply - bytes ms"] > 0 else None
        ),
        f"fast-forward {first['rows']:,} -> {last['rows']:,} rows: apply us/row shrank": (
            first["apply us/row"] / last["apply us/row"]
        ),
    }
    p3 = overlay / leader
    p3_meaning = "P3: follower with fresh reads (segments + WAL overlay) CPU per row / leader CPU per row (goal <= 0.2)"
    notes = [f"{k}: {v:,.2f}x" if v is not None else f"{k}: -" for k, v in ratios.items()]
    notes.append(f"{p3_meaning}: {p3:,.3f}")
    notes.append(
        "the same with every WAL record read once before its segment arrived (rows decoded by a scan): "
        f"{per['follower + WAL overlay, every record read'] / leader:,.3f}"
    )
    notes.append(
        "apply = manifest/chunk decode + apply_segment (decide, stream to disk, sha256, fsync, rename, "
        "footer check, SQLite fast-forward); bytes only = sha256 + write + fsync + rename of the same bytes"
    )
    notes.append(
        "leader = validate + WAL record (hash chain) + GTID stamp + memtable + flush to Parquet + framing; "
        "row-based replica = decode + stamp + memtable + flush on every replica (seed 000 section 6.1)"
    )
    settings = {
        "sizes": ",".join(str(s) for s in args.sizes),
        "repeat": args.repeat,
        "rows": args.rows,
        "batch_rows": args.batch_rows,
        "segment_rows": args.segment_rows,
        "value_bytes": args.value_bytes,
        "replication_factor": rf,
    }
    if args.output == "json":
        import json

        print(
            json.dumps(
                {
                    "benchmark": "replication",
                    "ratio": p3,
                    "ratio_meaning": p3_meaning,
                    "settings": settings,
                    "fast_forward": sizes,
                    "cpu_per_row": cpu,
                    "ratios": ratios,
                    "notes": notes[-3:],
                },
                indent=2,
                default=str,
            )
        )
        return
    common.report("(a) fast-forward by segment size (follower apply path)", list(sizes[0]), sizes, settings, "table")
    print()
    common.report("(b) CPU per replicated row", list(cpu[0]), cpu, settings, "table", notes)


if __name__ == "__main__":
    main()
