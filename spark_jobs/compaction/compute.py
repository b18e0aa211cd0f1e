"""Computing a major segment with Spark: segment chunks from Kafka -> rows -> newest version per key.

Inputs are the segments the major folds (:func:`shoal.segments.segments_to_compact`: the
latest major and the minors after it), read from the leader's segments channel, where each
manifest is followed by its chunks. Steps:

1. Spark reads the channel's offset range holding those chunks (Kafka source, ``read_committed``)
   and decodes each chunk (``mapInArrow``);
2. chunks are grouped per segment and ordered by index; each segment is reassembled on an
   executor, its size and sha256 checked against the manifest, and its Parquet rows emitted
   (Spark types: uint64 as bigint, timestamps as microseconds);
3. Spark keeps, per primary key, the version with the highest GTID ``(_shoal_epoch, _shoal_seq)``,
   a tombstone first on a tied GTID, as ``shoal.segments.merge`` does (a hash aggregate
   with ``max_by``, no sort); tombstones are dropped only in a full compaction;
4. the result comes back as Arrow and is written with ``write_segment`` (sorted by key, page
   checksums, the same Parquet layout as a flushed segment).

Small inputs skip the Spark job (:func:`compute_major_local`): the same chunk range is read with one
consumer in this process, each segment reassembled and checked the same way, and the versions merged
by ``shoal.segments.lww_merge`` (the same order: newest GTID, a tombstone first on a tie). A Spark
job costs seconds whatever its size (``bench/compaction.py``: 13 s for 5 MB of minors, 0.16 s for
pyarrow alone), so below the service's ``local_max_bytes`` the local path wins by far; above it
Spark's parallelism pays (DESIGN.md section 9).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from metadata.table import ColumnType, TableDefinition
from shoal.kafka.settings import KafkaSettings
from shoal.segments.versioned import DELETED_COLUMN, EPOCH_COLUMN, SEQ_COLUMN
from shoal.wire.records import ManifestRecord as WireManifest
from shoal.wire.records import SegmentChunk
from spark_jobs.errors import CompactionJobError
from spark_jobs.schema_map import spark_arrow_type, spark_ddl_nullable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KIND_HEADER = "shoal.kind"
SYSTEM_DDL = f"`{EPOCH_COLUMN}` bigint, `{SEQ_COLUMN}` bigint, `{DELETED_COLUMN}` boolean"


@dataclass(frozen=True)
class SegmentSource:
    """Where one input segment is: its manifest's offset on ``topic``, and what its file must be."""

    segment_id: str
    topic: str
    manifest_offset: int
    chunk_count: int
    size_bytes: int
    sha256: str

    @classmethod
    def of(cls, topic: str, offset: int, m: WireManifest) -> SegmentSource:
        return cls(m.segment_id, topic, offset, m.chunk_count, m.size_bytes, m.checksum)


def versioned_schema(table: TableDefinition) -> pa.Schema:
    """The Arrow schema of a stored segment: the table's columns, then the GTID system columns. Columns
    outside the primary key are nullable whatever the table declares: a tombstone (a major keeps them)
    has no values, as in the node's own flushes."""
    base = table.arrow_schema()
    keys = set(table.primary_key)
    fields = [
        *(f if f.name in keys else f.with_nullable(True) for f in base),
        pa.field(EPOCH_COLUMN, pa.int64(), nullable=False),
        pa.field(SEQ_COLUMN, pa.int64(), nullable=False),
        pa.field(DELETED_COLUMN, pa.bool_(), nullable=False),
    ]
    return pa.schema(fields, metadata=base.metadata)


def _to_spark_types(t: pa.Table, table: TableDefinition) -> pa.Table:
    """A stored segment's rows in the Arrow types of the Spark schema. A uint64 becomes the int64 of
    the same bits (Spark has no unsigned long: a key above 2**63 - 1 is negative in the job, which
    only groups by key, and :func:`from_spark` gives back the same uint64); other casts are checked."""
    arrays = []
    names = []
    for c in table.columns:
        col = t.column(c.name)
        target = spark_arrow_type(c.type)
        arrays.append(col if col.type == target else pc.cast(col, target, safe=c.type is not ColumnType.UINT64))
        names.append(c.name)
    for name in (EPOCH_COLUMN, SEQ_COLUMN, DELETED_COLUMN):
        arrays.append(t.column(name))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def decode_chunks(batches: Iterable[pa.RecordBatch], wanted: frozenset[str]) -> Iterator[pa.RecordBatch]:
    """Kafka chunk records -> (segment_id, index, data) rows of the wanted segments."""
    for batch in batches:
        sids: list[str] = []
        idx: list[int] = []
        data: list[bytes] = []
        for value in batch.column("value").to_pylist():
            chunk = SegmentChunk.from_bytes(value)
            if chunk.segment_id in wanted:
                sids.append(chunk.segment_id)
                idx.append(chunk.index)
                data.append(chunk.data)
        arrays = [pa.array(sids, pa.string()), pa.array(idx, pa.int32()), pa.array(data, pa.binary())]
        yield pa.RecordBatch.from_arrays(arrays, names=["segment_id", "idx", "data"])


def reassemble(
    batches: Iterable[pa.RecordBatch],
    sources: Mapping[str, SegmentSource],
    table: TableDefinition,
    on_segment: Callable[[str], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Rows sorted by (segment_id, idx) -> each segment's file checked and read, as versioned rows;
    ``on_segment(segment_id)`` after each whole segment (a segment with no chunk in the read never
    gets here: :func:`check_all_read` is what notices it)."""
    current: str | None = None
    parts: list[bytes] = []
    next_index = 0

    def finish(sid: str) -> Iterator[pa.RecordBatch]:
        src = sources[sid]
        blob = b"".join(parts)
        if next_index != src.chunk_count:
            raise CompactionJobError(f"segment {sid}: {next_index} of {src.chunk_count} chunks on {src.topic}")
        if len(blob) != src.size_bytes or hashlib.sha256(blob).hexdigest() != src.sha256:
            raise CompactionJobError(f"segment {sid}: reassembled bytes do not match the manifest's size/sha256")
        rows = pq.read_table(io.BytesIO(blob))
        if on_segment is not None:
            on_segment(sid)
        return iter(_to_spark_types(rows, table).to_batches())

    for batch in batches:
        sids = batch.column("segment_id").to_pylist()
        idxs = batch.column("idx").to_pylist()
        datas = batch.column("data").to_pylist()
        for sid, index, data in zip(sids, idxs, datas, strict=True):  # one row per chunk, not per table row
            if sid != current:
                if current is not None:
                    yield from finish(current)
                current, parts, next_index = sid, [], 0
            if index < next_index:
                continue  # the same chunk twice (a re-published segment): keep the first
            if index != next_index:
                raise CompactionJobError(f"segment {sid}: chunk {next_index} is missing (got {index})")
            parts.append(data)
            next_index += 1
    if current is not None:
        yield from finish(current)


def _kafka_range(spark: SparkSession, kafka: KafkaSettings, sources: list[SegmentSource]) -> DataFrame:
    from pyspark.sql import functions as F

    from shoal.kafka.clients import spark_kafka_options

    topic, start, end = _chunk_range(kafka, sources)
    return (
        spark.read.format("kafka")
        .options(**spark_kafka_options(kafka))
        .option("kafka.isolation.level", "read_committed")
        .option("assign", json.dumps({topic: [0]}))
        .option("startingOffsets", json.dumps({topic: {"0": start}}))
        .option("endingOffsets", json.dumps({topic: {"0": end}}))
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "false")
        .load()
        .where(F.exists("headers", lambda h: (h["key"] == KIND_HEADER) & (h["value"].cast("string") == "chunk")))
        .select("value")
    )


def _chunk_range(kafka: KafkaSettings, sources: list[SegmentSource]) -> tuple[str, int, int]:
    """(topic, first offset, end offset) of the manifests and chunks of ``sources`` on their one channel."""
    from shoal.kafka.admin import log_start_and_end

    topic, start, end = _local_range(sources)
    log_start, log_end = log_start_and_end(kafka, topic)
    if start < log_start:
        raise CompactionJobError(f"{topic} was truncated to {log_start}, above segment data at {start}")
    return topic, start, min(end, log_end)


LOCAL_FETCH_BYTES = 16 * 1024 * 1024
"""``fetch.message.max.bytes`` of the in-process chunk reader (inputs up to ``local_max_bytes``)."""


def _local_range(sources: list[SegmentSource]) -> tuple[str, int, int]:
    """(topic, first offset, end offset) of the manifests and chunks of ``sources``, without asking
    Kafka (:func:`_chunk_range` also checks the log start, at the cost of one more consumer)."""
    topic = sources[0].topic
    if any(s.topic != topic for s in sources):
        raise CompactionJobError("the segments of one compaction must come from one channel")
    start = min(s.manifest_offset for s in sources)
    return topic, start, max(s.manifest_offset + s.chunk_count for s in sources) + 2  # + the transaction marker


def compute_major_local(
    kafka: KafkaSettings, sources: list[SegmentSource], table: TableDefinition, *, drop_tombstones: bool
) -> pa.Table:
    """What :func:`compute_major` computes, in this process: for small inputs (no Spark job)."""
    from shoal.kafka.readers import read_to_end
    from shoal.segments import lww_merge
    from shoal.segments.channel import KIND_CHUNK, message_kind

    if not sources:
        raise CompactionJobError("nothing to compact")
    by_id = {s.segment_id: s for s in sources}
    topic, start, end = _local_range(sources)
    chunks: dict[str, dict[int, bytes]] = {sid: {} for sid in by_id}
    missing = sum(s.chunk_count for s in sources)
    # one consumer reads the range (its own watermarks; a range truncated by Tail shows as missing
    # chunks below), with fetches large enough for every chunk of a small major in a few requests
    fetch: dict[str, Any] = {"fetch.message.max.bytes": LOCAL_FETCH_BYTES}
    reading = read_to_end(kafka, topic, start, what="segments channel", group_id="shoal-compaction-local", **fetch)
    try:
        for msg in reading:
            if int(msg.offset() or 0) >= end:
                break
            if message_kind(msg.headers()) != KIND_CHUNK:
                continue
            chunk = SegmentChunk.from_bytes(msg.value())
            held = chunks.get(chunk.segment_id)
            if held is None or chunk.index in held or chunk.index >= by_id[chunk.segment_id].chunk_count:
                continue  # another segment's, a re-published chunk (the first is kept), or out of range
            held[chunk.index] = chunk.data
            missing -= 1
            if missing == 0:
                break  # every chunk is here: no need to wait for the end of the channel (a fetch timeout)
    finally:
        close = getattr(reading, "close", None)  # a generator: closes its consumer now
        if close is not None:
            close()
    tables = []
    for sid, src in by_id.items():
        parts = chunks[sid]
        absent = [i for i in range(src.chunk_count) if i not in parts]
        if absent:
            raise CompactionJobError(
                f"segment {sid}: chunk {absent[0]} of {src.chunk_count} missing on {src.topic} "
                "(truncated by Tail, or not committed)"
            )
        blob = b"".join(parts[i] for i in range(src.chunk_count))
        if len(blob) != src.size_bytes or hashlib.sha256(blob).hexdigest() != src.sha256:
            raise CompactionJobError(f"segment {sid}: reassembled bytes do not match the manifest's size/sha256")
        tables.append(pq.ParquetFile(pa.BufferReader(blob)).read())  # one in-memory file: no dataset layer
    merged = lww_merge(tables, list(table.primary_key), drop_tombstones=drop_tombstones)
    schema = versioned_schema(table)
    return pa.Table.from_arrays([merged.column(f.name) for f in schema], schema=schema)


def compute_major(
    spark: SparkSession,
    kafka: KafkaSettings,
    sources: list[SegmentSource],
    table: TableDefinition,
    *,
    drop_tombstones: bool,
) -> pa.Table:
    """The folded rows, newest version per key, in the stored segment schema (not yet sorted/written)."""
    from pyspark.sql import functions as F

    if not sources:
        raise CompactionJobError("nothing to compact")
    by_id = {s.segment_id: s for s in sources}
    wanted = frozenset(by_id)
    chunks = _kafka_range(spark, kafka, sources).mapInArrow(
        lambda it: decode_chunks(it, wanted), "segment_id string, idx int, data binary"
    )
    ordered = chunks.repartition(min(len(sources), 8), "segment_id").sortWithinPartitions("segment_id", "idx")
    # duck-typed AccumulatorParam: this module is imported without pyspark too (the CLI's models)
    read: Any = spark.sparkContext.accumulator(frozenset(), _SetParam())  # type: ignore[arg-type]

    def mark(sid: str) -> None:
        read.add(frozenset((sid,)))

    rows = ordered.mapInArrow(
        lambda it: reassemble(it, by_id, table, mark), f"{spark_ddl_nullable(table)}, {SYSTEM_DDL}"
    )
    # per key, the version with the greatest (epoch, seq, deleted): a hash aggregate, no sort of the rows
    gtid = F.struct(F.col(EPOCH_COLUMN), F.col(SEQ_COLUMN), F.col(DELETED_COLUMN))
    values = [c for c in rows.columns if c not in table.primary_key]
    newest = F.max_by(F.struct(*[F.col(c) for c in values]), gtid).alias("_newest")
    result = rows.groupBy(*table.primary_key).agg(newest).select(*table.primary_key, "_newest.*")
    if drop_tombstones:
        result = result.where(~F.col(DELETED_COLUMN))
    out = from_spark(result.toArrow(), table)
    check_all_read(read.value, sources)
    return out


def check_all_read(read: Iterable[str], sources: Sequence[SegmentSource]) -> None:
    """CompactionJobError unless every input segment was reassembled. The channel is read with
    ``failOnDataLoss=false`` (Spark's Kafka source skips offsets the Tail deleted instead of failing),
    so a segment whose chunks are gone yields no row at all, and the major would leave its rows out."""
    missing = sorted({s.segment_id for s in sources} - set(read))
    if missing:
        where = {s.segment_id: s.topic for s in sources}
        raise CompactionJobError(
            f"{len(missing)} input segment(s) had no chunk in the read, e.g. {missing[0]} on {where[missing[0]]} "
            "(truncated by the Tail, or not committed): the major would miss their rows"
        )


class _SetParam:
    """A Spark accumulator of segment ids (a union; a task run twice adds the same ids again)."""

    def zero(self, _value: frozenset[str]) -> frozenset[str]:
        return frozenset()

    def addInPlace(self, a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
        return a | b


def from_spark(t: pa.Table, table: TableDefinition) -> pa.Table:
    """Spark's Arrow result back in the stored segment schema (bigint -> uint64 by its bits, us -> ms)."""
    schema = versioned_schema(table)
    arrays = []
    for f in schema:
        col = t.column(f.name)
        if col.type != f.type:
            ctype = table.column(f.name).type if f.name in {c.name for c in table.columns} else None
            try:
                col = pc.cast(col, f.type, safe=ctype not in (ColumnType.TIMESTAMP_MS, ColumnType.UINT64))
            except pa.ArrowInvalid as exc:
                raise CompactionJobError(f"column {f.name}: {exc}") from exc
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=schema)


def write_major(directory: Path, segment_id: str, rows: pa.Table, table: TableDefinition) -> Any:
    """Write the major with the stored-segment layout; returns ``WrittenSegment``."""
    from shoal.segments import write_segment

    return write_segment(directory, segment_id, rows, key_columns=list(table.primary_key))
