"""Kafka bytes per row at RF 3: what each kind of topic receives today, and with WAL records by reference.

Every accepted row crosses Kafka three times today (DESIGN.md sections 3, 4 and 6): the producer's
Arrow IPC message on the ingest topic, the same bytes again as the payload of the leader's WAL
record (LinDB's channel), and the row inside a Parquet segment on the segments channel (EventQL's
segment replication); each topic has three replicas. The alternative evaluated here
(``docs/wal-by-reference.md``) keeps the ingest record as the only copy of the payload: a WAL record
names the ingest offset it accepted and carries the GTID, the chain link and a hash of the payload
(TokuMX's hash chain) instead of the payload.

Starts the same throwaway cluster as :mod:`bench.replicated` (ZooKeeper, 3 KRaft brokers, 3 storage
nodes, a table of ``--partitions`` partitions at RF 3), writes ``--rows`` rows of ~100 bytes once per
``--batch-rows`` value (each write spans every partition, as P4's batches do; one ingest message per
partition and write), waits until every row is in a segment acked by every replica, and reads what
the brokers appended to their log directories (found with DescribeConfigs ``log.dirs``; they must be
on this machine) during each phase:

- per kind of topic (ingest, WAL, segments, compaction, metadata, deadletter, consumer offsets,
  transaction state, other): bytes appended to the ``.log`` files of every replica (so times the
  replication factor, Kafka's batch and record framing and transaction markers included), record
  batches and records (control records counted apart);
- the by-reference figures from the measured WAL records: every WAL data record is decoded
  (:class:`shoal.wire.records.WalRecord`), re-encoded with shoal's own codec with an empty payload,
  plus :data:`PAYLOAD_HASH_BYTES` for the payload hash field, and the Kafka record framing
  recomputed for the smaller value; every other topic is unchanged (same records, same bytes).

Only ``.log`` bytes count: index files are preallocated. A phase's bytes are read from the active
log segments, which Tail's ``delete_records`` never frees (Kafka deletes whole inactive log segments
only); a topic whose log start moved past a segment file while measured is reported in the notes.

``ratio`` = by-reference bytes per row / today's bytes per row, for the first ``--batch-rows`` value
(all replicas, every topic kind). Progress goes to stderr; every process started is stopped by pid.

    python -m bench.kafka_bytes                               # 100k rows twice: writes of 50k and of 800 rows
    python -m bench.kafka_bytes --rows 200000 --batch-rows 100000,2000,200 --output json
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import signal
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import common

if TYPE_CHECKING:
    from shoal.wire.records import WalRecord

PAYLOAD_HASH_BYTES = 33
"""Avro size of the by-reference record's extra field, ``payload_hash: ["null", Sha256]`` (a union
branch index, then the 32 fixed bytes; null for records that keep their payload inline, such as
merged rows that have no ingest record): checked against fastavro in the unit tests."""

KINDS = (
    "ingest",
    "wal",
    "segments",
    "compaction",
    "metadata",
    "deadletter",
    "consumer offsets",
    "transaction state",
    "other",
)

_BATCH_HEADER = 61
"""Size of a Kafka record batch header (message format v2)."""
_BATCH = struct.Struct(">qiiBIhiqqqhii")


# -- pure parts (unit-tested) ----------------------------------------------------------------------


def varint_size(value: int) -> int:
    """Bytes of ``value`` as a zigzag varint (Kafka's record fields, Avro's int and long)."""
    z = (value << 1) ^ (value >> 63)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The zigzag varint at ``pos`` and the position after it."""
    shift = result = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


@dataclass(frozen=True)
class Batch:
    """One record batch of a Kafka log file (message format v2)."""

    size: int
    records: int
    control: bool
    compressed: bool
    body: memoryview
    """The batch's records (uncompressed batches only)."""


def read_batches(data: bytes, start: int = 0) -> tuple[list[Batch], int]:
    """The complete record batches of ``data`` from ``start``, and where the next batch begins (a
    batch still being written, or zero fill, ends the list)."""
    out: list[Batch] = []
    pos, view = start, memoryview(data)
    while pos + _BATCH_HEADER <= len(data):
        (_base, length, _epoch, magic, _crc, attributes, _delta, _t0, _t1, _pid, _pe, _seq, count) = _BATCH.unpack_from(
            data, pos
        )
        end = pos + 12 + length
        if length <= 0 or end > len(data) or magic != 2:
            break
        out.append(Batch(end - pos, count, bool(attributes & 0x20), bool(attributes & 0x07), view[pos + 61 : end]))
        pos = end
    return out, pos


def read_records(batch: Batch) -> Iterator[tuple[int, bytes | None]]:
    """(length of the record after its length varint, value) of every record of an uncompressed batch."""
    body, pos = batch.body, 0
    for _ in range(batch.records):
        length, p = read_varint(body, pos)
        end = p + length
        p += 1  # attributes
        _ts, p = read_varint(body, p)
        _od, p = read_varint(body, p)
        key_len, p = read_varint(body, p)
        p += max(key_len, 0)
        value_len, p = read_varint(body, p)
        yield length, (None if value_len < 0 else bytes(body[p : p + value_len]))
        pos = end


def record_size_with_value(length: int, old_value: int, new_value: int) -> int:
    """The size of a Kafka record (its length varint included) of ``length`` bytes after the length
    varint, once its value of ``old_value`` bytes becomes ``new_value`` bytes."""
    new = length - old_value - varint_size(old_value) + new_value + varint_size(new_value)
    return new + varint_size(new)


def by_reference_size(record: WalRecord) -> int:
    """Size of the by-reference form of a WAL record: the same record encoded by shoal's own codec
    with an empty payload, plus the payload hash field."""
    return len(dataclasses.replace(record, payload=b"").to_bytes()) + PAYLOAD_HASH_BYTES


def topic_kind(topic: str, prefix: str) -> str:
    """Which of :data:`KINDS` a topic is (shoal's names are ``<prefix>.<kind>...``, DESIGN.md section 3)."""
    if topic == "__consumer_offsets":
        return "consumer offsets"
    if topic == "__transaction_state":
        return "transaction state"
    if topic.startswith(prefix + "."):
        kind = topic[len(prefix) + 1 :].split(".", 1)[0]
        if kind in KINDS:
            return kind
    return "other"


def split_log_dir(name: str) -> tuple[str, int] | None:
    """``<topic>-<partition>`` -> (topic, partition); None for a directory that is not a partition."""
    topic, _, part = name.rpartition("-")
    return (topic, int(part)) if topic and part.isdigit() else None


@dataclass
class Tally:
    """What one kind of topic received in one phase, summed over every replica."""

    bytes: int = 0
    batches: int = 0
    records: int = 0
    control_records: int = 0
    by_reference_bytes: int = 0
    wal_payload_bytes: int = 0
    """Sum of the WAL records' payload fields (the copies by-reference removes)."""
    topics: set[str] = field(default_factory=set)
    copies: int = 0
    """The most replicas seen of one of its topic partitions."""

    def add_batch(self, batch: Batch, by_reference: int | None = None) -> None:
        self.bytes += batch.size
        self.batches += 1
        self.records += batch.records
        self.control_records += batch.records if batch.control else 0
        self.by_reference_bytes += batch.size if by_reference is None else by_reference


def wal_batch_by_reference(batch: Batch, tally: Tally) -> int:
    """The by-reference size of one WAL record batch (its header and control records unchanged)."""
    if batch.control:
        return batch.size
    if batch.compressed:
        raise ValueError("a WAL record batch is compressed: the by-reference sizes need uncompressed batches")
    from shoal.errors import WireFormatError
    from shoal.wire.records import WalRecord

    size = _BATCH_HEADER
    for length, value in read_records(batch):
        try:
            record = None if value is None else WalRecord.from_bytes(value)
        except WireFormatError:
            record = None
        if record is None or value is None:  # not a WAL record (nothing shoal wrote): counted as it is
            size += length + varint_size(length)
            continue
        tally.wal_payload_bytes += len(record.payload)
        size += record_size_with_value(length, len(value), by_reference_size(record))
    return size


def tally_file(data: bytes, start: int, kind: str, tally: Tally) -> int:
    """Add the batches of one log file from ``start`` to ``tally``; the position after the last one."""
    batches, end = read_batches(data, start)
    for b in batches:
        tally.add_batch(b, wal_batch_by_reference(b, tally) if kind == "wal" else None)
    return end


def bytes_per_row(tallies: Mapping[str, Tally], rows: int) -> list[dict[str, Any]]:
    """The table's rows: per kind and in total, bytes per row (one copy, all copies, by reference)."""
    out: list[dict[str, Any]] = []
    total, total_ref, total_records = 0, 0, 0
    for kind in KINDS:
        t = tallies.get(kind)
        if t is None or t.bytes == 0:
            continue
        copies = max(t.copies, 1)
        total, total_ref, total_records = total + t.bytes, total_ref + t.by_reference_bytes, total_records + t.records
        out.append(
            {
                "kind": kind,
                "topics": len(t.topics),
                "replicas": copies,
                "records/1k rows": t.records / copies * 1000 / rows,
                "bytes/row one copy": t.bytes / copies / rows,
                "bytes/row": t.bytes / rows,
                "by-ref bytes/row": t.by_reference_bytes / rows,
                "batches": t.batches // copies,
                "records": t.records // copies,
                "control records": t.control_records // copies,
                "wal payload bytes/row": t.wal_payload_bytes / copies / rows if kind == "wal" else None,
            }
        )
    out.append(
        {
            "kind": "total",
            "records/1k rows": sum(r["records/1k rows"] for r in out),
            "bytes/row one copy": sum(r["bytes/row one copy"] for r in out),
            "bytes/row": total / rows,
            "by-ref bytes/row": total_ref / rows,
            "records": total_records,
        }
    )
    return out


def ratio_of(rows: Sequence[dict[str, Any]]) -> float | None:
    """By-reference bytes per row / today's, from :func:`bytes_per_row`'s total line."""
    total = rows[-1]
    return total["by-ref bytes/row"] / total["bytes/row"] if total["bytes/row"] else None


# -- reading the brokers' log directories ------------------------------------------------------------


def broker_log_dirs(bootstrap: str) -> list[Path]:
    """Every broker's ``log.dirs`` (DescribeConfigs), which must be readable here."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    from shoal.kafka import clients
    from shoal.kafka.settings import KafkaSettings

    admin = clients.admin(KafkaSettings(bootstrap))
    dirs: list[Path] = []
    for broker in sorted(admin.list_topics(timeout=30).brokers):  # one broker resource per request
        resource = ConfigResource(ResourceType.BROKER, str(broker))
        entries = admin.describe_configs([resource], request_timeout=30)[resource].result(timeout=30)
        entry = entries.get("log.dirs") or entries.get("log.dir")
        value = None if entry is None else entry.value
        for d in (value or "").split(","):
            if d.strip():
                dirs.append(Path(d.strip()))
    missing = [d for d in dirs if not d.is_dir()]
    if not dirs or missing:
        raise SystemExit(f"kafka_bytes reads the brokers' log directories; not on this machine: {missing or dirs}")
    return dirs


Positions = dict[Path, int]
"""Log file -> offset in it where the next unread record batch begins."""


def scan(dirs: Sequence[Path], prefix: str, since: Positions | None) -> tuple[Positions, dict[str, Tally], list[str]]:
    """Read every partition's ``.log`` files from ``since`` (None: only find the ends). Returns the new
    positions, the tallies by kind and notes (a log file gone since, a log start moved)."""
    positions: Positions = {}
    tallies: dict[str, Tally] = {}
    notes: list[str] = []
    copies: dict[tuple[str, int], int] = {}
    for log_dir in dirs:
        for part in sorted(p for p in log_dir.iterdir() if p.is_dir()):
            name = split_log_dir(part.name)
            if name is None:
                continue
            kind = topic_kind(name[0], prefix)
            tally = tallies.setdefault(kind, Tally())
            copies[name] = copies.get(name, 0) + 1
            for log_file in sorted(part.glob("*.log")):
                data = log_file.read_bytes()
                start = 0 if since is None or log_file not in since else since[log_file]
                if since is None:
                    positions[log_file] = read_batches(data)[1]
                else:
                    positions[log_file] = tally_file(data, start, kind, tally)
                if positions[log_file] > start:
                    tally.topics.add(name[0])  # the topics that received something
    gone = sorted({f.parent.name for f in since or () if f not in positions})
    notes += [f"{name}: a log segment was deleted while measured (its bytes are missing)" for name in gone]
    for (topic, _p), n in copies.items():
        tally = tallies[topic_kind(topic, prefix)]
        tally.copies = max(tally.copies, n)
    return positions, tallies, notes


# -- the run --------------------------------------------------------------------------------------


def phase_rows(phase: int, i: int, batch_rows: int, count: int, value_bytes: int) -> Any:
    """Write ``i`` of ``count`` of a phase: P4's keys strided over every partition
    (:func:`bench.replicated.latency_rows`), with values of their own (random, seeded by phase and
    write), so that no two writes repeat values a segment's dictionary encoding would fold."""
    from bench import replicated, write_path

    rows = replicated.latency_rows(i, batch_rows, count, value_bytes)
    values = write_path.build_rows(batch_rows, value_bytes, seed=(phase + 1) * 1_000_003 + i).column("v")
    return rows.set_column(rows.schema.get_field_index("v"), "v", values)


def write_phase(c: Any, run: argparse.Namespace, phase: int, batch_rows: int, say: Callable[[str], None]) -> float:
    """Write ``run.rows`` rows in writes of ``batch_rows`` rows spread over every partition, wait until
    every row is in a segment acked by every replica; the seconds it took."""
    from bench import replicated
    from producer import Producer

    count = math.ceil(run.rows / batch_rows)
    say(f"writing {count * batch_rows:,} rows in {count:,} writes of {batch_rows:,} rows")
    t0 = time.perf_counter()
    with Producer(replicated._producer_config(c, run)) as producer:
        for i in range(count):
            producer.write(replicated.TABLE, phase_rows(phase, i, batch_rows, count, run.value_bytes))
        producer.flush()
        producer.sync(600)
    check = replicated.ReplicationCheck(c)
    try:
        common.wait_for(check.done, 600, "every row in a segment acked by every replica", 0.25)
    finally:
        check.close()
    return time.perf_counter() - t0


def measure(c: Any, run: argparse.Namespace, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """One phase per ``--batch-rows`` value: what the log directories received while it ran."""
    dirs = broker_log_dirs(c.bootstrap_servers)
    say(f"reading {len(dirs)} broker log directories")
    phases = []
    for phase, batch_rows in enumerate(run.batch_rows):
        before, _, _ = scan(dirs, c.topic_prefix, None)
        seconds = write_phase(c, run, phase, batch_rows, say)
        rows = math.ceil(run.rows / batch_rows) * batch_rows
        _, tallies, notes = scan(dirs, c.topic_prefix, before)
        table = bytes_per_row(tallies, rows)
        phases.append(
            {"batch_rows": batch_rows, "rows": rows, "seconds": seconds, "kinds": table, "ratio": ratio_of(table)}
        )
        phases[-1]["notes"] = notes
    return phases


def _unwind(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> None:
    p = common.parser(__doc__.splitlines()[0], cluster=False)
    p.add_argument("--rows", type=common.positive_int, default=100_000, help="rows written per phase")
    p.add_argument(
        "--batch-rows",
        type=common.int_list,
        default=[50_000, 800],
        help="one phase per value: rows per write (each write = one ingest message per partition)",
    )
    p.add_argument("--value-bytes", type=common.positive_int, default=84, help="string bytes per row (~100 B rows)")
    p.add_argument("--partitions", type=common.positive_int, default=8, help="table partitions")
    p.add_argument("--flush-age", type=float, default=1.0, help="nodes' memtable flush age in seconds")
    args = p.parse_args(argv)
    # the rest as bench.replicated runs it: 3 brokers, 3 nodes (RF 3), its producer settings
    run = argparse.Namespace(
        **vars(args),
        brokers=3,
        nodes=3,
        kafka_heap_mb=384,
        linger_ms=5,
        batch_bytes=1_000_000,
        max_message_bytes=1_000_000,
    )
    say = common.progress_printer(args.output)
    signal.signal(signal.SIGTERM, _unwind)  # SIGTERM unwinds like Ctrl-C: every finally stops its processes
    from bench import replicated

    with replicated.rf3_cluster(run, say) as c:
        replicated.create_table(c, args.partitions)
        say("waiting for every partition to accept a first write")
        replicated._warm_up(c, run)
        phases = measure(c, run, say)
    report(args, phases)


def report(args: argparse.Namespace, phases: list[dict[str, Any]]) -> None:
    rows = [{"rows per write": ph["batch_rows"], **r} for ph in phases for r in ph["kinds"]]
    settings = {
        "rows": args.rows,
        "row_bytes": 16 + args.value_bytes,
        "partitions": args.partitions,
        "replication_factor": 3,
        "brokers": 3,
        "nodes": 3,
        "flush_age_s": args.flush_age,
        "payload_hash_bytes": PAYLOAD_HASH_BYTES,
    }
    notes = [
        f"writes of {ph['batch_rows']:,} rows: {ph['kinds'][-1]['bytes/row']:,.0f} bytes/row today, "
        f"{ph['kinds'][-1]['by-ref bytes/row']:,.0f} by reference (ratio {ph['ratio']:.2f}), "
        f"{ph['seconds']:.1f} s to replicate"
        for ph in phases
        if ph["ratio"] is not None
    ]
    notes += [n for ph in phases for n in ph["notes"]]
    common.report(
        "Kafka bytes per row at RF 3 (every replica): today and with WAL records by reference",
        ["rows per write", "kind", "topics", "replicas", "records/1k rows", "bytes/row", "by-ref bytes/row"],
        rows,
        settings,
        args.output,
        notes,
        ratio=phases[0]["ratio"] if phases else None,
        ratio_meaning="bytes per row with WAL records by reference / bytes per row today (all topics, all replicas), "
        f"writes of {args.batch_rows[0]:,} rows",
        extra={"phases": phases},
    )


if __name__ == "__main__":
    main()
