"""Malformed source records of the ingest job: to the deadletter topic with a reason, counted.

Runs on executors inside the ingest job's ``mapInArrow`` step. The reason of every row is computed
columnar (pyarrow compute): a parse error from the decoder, a null primary-key / not-null column,
a negative value for a uint64 column, then anything the producer's validation would refuse when the
sink writes the row (a primary key timestamp finer than a millisecond, a value out of range, an
oversized value: :func:`refusals`). Only the bad rows are visited one by one, to produce them
to ``<prefix>.deadletter`` with the same headers the leaders use (``shoal.reason``,
``shoal.detail``, ``shoal.source.topic`` / ``.partition`` / ``.offset``, ``shoal.table``). The
good rows go on to the sink. Replays may deadletter a record twice (at-least-once); never zero times.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from metadata.table import ColumnType, TableDefinition
from shoal.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)

ERROR_COLUMN = "_shoal_error"
VALUE_COLUMN = "_shoal_value"
META_COLUMNS = ("_shoal_topic", "_shoal_partition", "_shoal_offset")
REASON = "spark-ingest"


@dataclass(frozen=True)
class DeadletterTarget:
    kafka: KafkaSettings
    topic: str
    table: str


_MILLIS = r"^-?[0-9]{1,18}$"
"""The JSON text of an integer a timestamp column takes as milliseconds since 1970 (int64's range)."""


def json_times(batch: pa.RecordBatch, table: TableDefinition) -> pa.RecordBatch:
    """``batch`` with each timestamp column that arrives as JSON text (:func:`~spark_jobs.schema_map.
    spark_ddl_json`) in the form ``shoal write`` reads: an integer is milliseconds since 1970, written
    out as ISO 8601 text, and every other text stays for the producer's own parse (ISO 8601 with a zone
    offset), which refuses what it cannot read. Columns of any other type are returned as they are."""
    for col in table.columns:
        if col.type is not ColumnType.TIMESTAMP_MS or batch.column(col.name).type != pa.string():
            continue
        text = batch.column(col.name)
        millis = pc.fill_null(pc.match_substring_regex(text, _MILLIS), False)
        if not pc.any(millis).as_py():
            continue
        ints = pc.cast(pc.if_else(millis, text, pa.scalar(None, pa.string())), pa.int64())
        iso = pc.strftime(pc.cast(ints, pa.timestamp("ms", tz="UTC")), format="%Y-%m-%dT%H:%M:%S%z")
        batch = batch.set_column(batch.schema.get_field_index(col.name), col.name, pc.if_else(millis, iso, text))
    return batch


def reasons(batch: pa.RecordBatch, table: TableDefinition) -> pa.Array:
    """Per row: why it cannot be written (string), or null when it can."""
    out = batch.column(ERROR_COLUMN)
    if out.type != pa.string():
        out = pc.cast(out, pa.string())
    for col in table.columns:
        values = batch.column(col.name)
        if not col.nullable:
            out = pc.if_else(
                pc.and_(pc.is_null(out), pc.is_null(values)),
                pa.scalar(f"column {col.name!r} is null (a primary key / not-null column)"),
                out,
            )
        if col.type is ColumnType.UINT64 and pa.types.is_integer(values.type):
            negative = pc.fill_null(pc.less(values, pa.scalar(0, values.type)), False)
            why = pa.scalar(f"column {col.name!r} is negative but the table type is uint64")
            out = pc.if_else(pc.and_(pc.is_null(out), negative), why, out)
    return out


def refusals(batch: pa.RecordBatch, table: TableDefinition, why: pa.Array) -> pa.Array:
    """``why`` with a reason for every row :func:`producer.validation.validate_rows` would refuse
    (the sink runs it on every write: a row it refuses would fail the task, and Spark would retry
    the batch forever). One call when every row passes; otherwise the rows are halved until each
    refused row is alone, so a batch of ``n`` rows costs at most ``n log n`` row validations."""
    from producer.errors import RowValidationError
    from producer.validation import validate_rows

    names = [c.name for c in table.columns]
    rows = pa.Table.from_batches([batch]).select(names)
    found: dict[int, str] = {}

    def check(indices: pa.Array) -> None:
        try:
            validate_rows(table, rows.take(indices))
            return
        except RowValidationError as exc:
            if len(indices) == 1:
                column = f"column {exc.column!r}: " if exc.column else ""
                found[indices[0].as_py()] = f"{column}{exc.reason}"
                return
        half = len(indices) // 2
        check(indices.slice(0, half))
        check(indices.slice(half))

    candidates = pc.indices_nonzero(pc.is_null(why))
    if len(candidates):
        check(candidates)
    if not found:
        return why
    extra = pa.array([found.get(i) for i in range(batch.num_rows)], pa.string())
    return pc.coalesce(why, extra)


def split_and_deadletter(
    batches: Iterator[pa.RecordBatch], table: TableDefinition, target: DeadletterTarget, counter: Any = None
) -> Iterator[pa.RecordBatch]:
    """Yield the writable rows (table columns only); produce the others to deadletter first.

    Every deadletter record's delivery is checked: one that fails (or is not delivered within 60 s)
    fails the task, so Spark runs it again and the batch is not committed with a bad row in no topic.
    A value too large for a Kafka message is deadlettered cut to :data:`MAX_DEADLETTER_VALUE` bytes,
    with its length in the ``shoal.value.bytes`` header (it failed the query on every retry)."""
    producer = None
    failed: list[str] = []
    names = [c.name for c in table.columns]
    try:
        for batch in batches:
            batch = json_times(batch, table)
            why = refusals(batch, table, reasons(batch, table))
            bad = pc.is_valid(why)
            n_bad = pc.sum(bad).as_py() or 0
            if n_bad:
                if producer is None:
                    producer = _producer(target)
                    on_delivery = _delivery_check(failed)
                rejected = pa.Table.from_batches([batch]).filter(bad)
                _produce(producer, target, rejected, why.filter(bad), on_delivery)
                if counter is not None:
                    counter.add(n_bad)
                log.warning("spark ingest: %d malformed source records of %s -> %s", n_bad, target.table, target.topic)
            good = batch.filter(pc.invert(bad)) if n_bad else batch
            yield pa.RecordBatch.from_arrays(
                [_declared(good.column(c.name), c.type) for c in table.columns], names=names
            )
        if producer is not None:
            remaining = producer.flush(60)
            if remaining:
                raise RuntimeError(f"{remaining} deadletter records not delivered to {target.topic}")
            if failed:
                raise RuntimeError(f"{len(failed)} deadletter records to {target.topic} failed: {failed[0]}")
    finally:
        producer = None


def _declared(values: pa.Array, ctype: ColumnType) -> pa.Array:
    """A parsed column in the Arrow type of its Spark type (a float32 column parsed as double, its
    out-of-range values already refused)."""
    from spark_jobs.schema_map import spark_arrow_type

    target = spark_arrow_type(ctype)
    return values if values.type == target else pc.cast(values, target, safe=False)


def _producer(target: DeadletterTarget) -> Any:
    from shoal.kafka import clients
    from shoal.kafka.admin import create_topic

    create_topic(clients.admin(target.kafka), target.topic, policy=target.kafka.topics)
    return clients.producer(target.kafka)


MAX_DEADLETTER_VALUE = 512 * 1024
"""The most bytes of a refused source value a deadletter record carries (a Kafka message is at most
``message.max.bytes``, 1 MB by default, headers included)."""


def _delivery_check(failed: list[str]) -> Any:
    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    return on_delivery


def _produce(
    producer: Any, target: DeadletterTarget, rejected: pa.Table, why: pa.Array, on_delivery: Any = None
) -> None:
    values = rejected.column(VALUE_COLUMN).to_pylist()
    topics = rejected.column(META_COLUMNS[0]).to_pylist()
    partitions = rejected.column(META_COLUMNS[1]).to_pylist()
    offsets = rejected.column(META_COLUMNS[2]).to_pylist()
    for value, reason, topic, partition, offset in zip(
        values, why.to_pylist(), topics, partitions, offsets, strict=True
    ):
        size = len(value) if value is not None else 0
        headers = [("shoal.value.bytes", str(size).encode())] if size > MAX_DEADLETTER_VALUE else []
        if size > MAX_DEADLETTER_VALUE:
            value = value[:MAX_DEADLETTER_VALUE]
        headers += [
            ("shoal.reason", REASON.encode()),
            ("shoal.detail", str(reason)[:2000].encode("utf-8", "replace")),
            ("shoal.source.topic", str(topic).encode()),
            ("shoal.source.partition", str(partition).encode()),
            ("shoal.source.offset", str(offset).encode()),
            ("shoal.table", target.table.encode()),
        ]
        while True:
            try:
                producer.produce(target.topic, value=value, headers=headers, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.5)
        producer.poll(0)
