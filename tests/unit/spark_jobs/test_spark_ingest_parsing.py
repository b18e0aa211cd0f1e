"""Ingest helpers without Spark: per-row reasons (columnar), Avro decoding, Kafka offset JSON."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from metadata.table import Column, ColumnType, TableDefinition
from spark_jobs.avro_source import decode_batches, parse_schema
from spark_jobs.deadletter import ERROR_COLUMN, reasons, refusals
from spark_jobs.errors import IngestError
from spark_jobs.offsets_mirror import parse_end_offsets

TABLE = TableDefinition("t", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1)


def test_reasons_keep_the_decoder_error_then_check_nulls_and_signs() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "k": pa.array([1, None, -3, None, 5], pa.int64()),
            "v": ["a", "b", "c", "d", None],
            ERROR_COLUMN: pa.array([None, None, None, "bad json", None], pa.string()),
        }
    )
    assert reasons(batch, TABLE).to_pylist() == [
        None,
        "column 'k' is null (a primary key / not-null column)",
        "column 'k' is negative but the table type is uint64",
        "bad json",
        None,
    ]


def test_rows_the_sink_would_refuse_are_deadlettered_not_written() -> None:
    """The sink validates every write with the producer's rules; a row those refuse (here a primary key
    timestamp with microseconds, and a value over the size limit) failed the task, and Spark retried
    the batch forever. The ingest gives each such row its reason, so it goes to the deadletter topic
    and the rest are written."""
    table = TableDefinition(
        "t",
        (
            Column("k", ColumnType.UINT64, False),
            Column("at", ColumnType.TIMESTAMP_MS, False),
            Column("v", ColumnType.STRING),
        ),
        ("k", "at"),
        "k",
        1,
    )
    n = 9
    at = [1000 * i for i in range(n)]
    at[2], at[7] = 2500, 7001  # microseconds: finer than the key's milliseconds
    values = ["ok"] * n
    values[5] = "x" * 300_000
    batch = pa.RecordBatch.from_pydict(
        {
            "k": pa.array([*range(n - 1), None], pa.int64()),
            "at": pa.array(at, pa.timestamp("us", tz="UTC")),
            "v": values,
            ERROR_COLUMN: pa.array([None] * n, pa.string()),
        }
    )
    why = refusals(batch, table, reasons(batch, table)).to_pylist()
    refused = {i: w for i, w in enumerate(why) if w is not None}
    assert sorted(refused) == [2, 5, 7, 8], why
    assert refused[2].startswith("column 'at': ") and "would lose data" in refused[2]
    assert refused[5].startswith("column 'v': value is longer than")
    assert refused[8] == "column 'k' is null (a primary key / not-null column)"
    assert refusals(batch.slice(0, 2), table, reasons(batch.slice(0, 2), table)).to_pylist() == [None, None]


def _avro(schema: dict[str, object], rec: dict[str, object]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), rec)
    return buf.getvalue()


def test_avro_decoding_marks_bad_records_instead_of_failing() -> None:
    import json

    schema = TABLE.avro_schema()
    good = _avro(schema, {"k": (7).to_bytes(8, "big"), "v": "x"})
    huge = _avro(schema, {"k": (2**64 - 1).to_bytes(8, "big"), "v": "y"})
    batch = pa.RecordBatch.from_pydict(
        {
            "value": pa.array([good, b"\x01", None, huge], pa.binary()),
            "topic": ["s"] * 4,
            "partition": pa.array([0] * 4, pa.int32()),
            "offset": pa.array([0, 1, 2, 3], pa.int64()),
        }
    )
    out = pa.Table.from_batches(list(decode_batches(iter([batch]), json.dumps(schema), TABLE)))
    assert out.column("k").to_pylist() == [7, None, None, None]
    errors = out.column(ERROR_COLUMN).to_pylist()
    assert errors[0] is None and "Avro decoding failed" in errors[1] and "null" in errors[2]
    assert "does not fit uint64" in errors[3]
    assert out.column("_shoal_offset").to_pylist() == [0, 1, 2, 3]


def test_avro_epoch_milliseconds_as_a_plain_long_keep_every_millisecond() -> None:
    """A source whose Avro schema gives a timestamp_ms column as a plain ``long`` of epoch
    milliseconds: each value lands on its own millisecond (a float division landed most dates after
    2100 and before 1970 a microsecond early, so the sink's cast to milliseconds stored the one
    before), and one outside the years 1-9999 marks its row instead of failing the batch."""
    import json

    table = TableDefinition(
        "t", (Column("k", ColumnType.UINT64, False), Column("ts", ColumnType.TIMESTAMP_MS)), ("k",), "k", 1
    )
    schema = {"type": "record", "name": "r", "fields": [{"name": "k", "type": "long"}, {"name": "ts", "type": "long"}]}
    millis = [253402300799999, -62135596800000, 10413792000001, -2208988800001, -1, 0, 1, 2**62]
    batch = pa.RecordBatch.from_pydict(
        {
            "value": pa.array([_avro(schema, {"k": i, "ts": ms}) for i, ms in enumerate(millis)], pa.binary()),
            "topic": ["s"] * len(millis),
            "partition": pa.array([0] * len(millis), pa.int32()),
            "offset": pa.array(range(len(millis)), pa.int64()),
        }
    )
    out = pa.Table.from_batches(list(decode_batches(iter([batch]), json.dumps(schema), table)))
    stored = out.column("ts").cast(pa.timestamp("ms", tz="UTC"), safe=True).cast(pa.int64()).to_pylist()
    assert stored == [*millis[:-1], None]
    errors = out.column(ERROR_COLUMN).to_pylist()
    assert errors[:-1] == [None] * (len(millis) - 1)
    assert errors[-1] == f"column 'ts': {2**62} ms from the epoch is outside the years 1-9999"
    assert out.column("k").to_pylist() == [*range(len(millis) - 1), None]


def test_a_bad_avro_schema_is_a_clear_error() -> None:
    with pytest.raises(IngestError, match="Avro schema is not valid"):
        parse_schema('{"type": "no-such-type"}')
    with pytest.raises(IngestError, match="Avro schema is not valid"):
        parse_schema("not json")


def test_kafka_end_offsets() -> None:
    assert parse_end_offsets('{"a": {"0": 5, "1": 7}, "b": {"0": 0}}') == {("a", 0): 5, ("a", 1): 7, ("b", 0): 0}
    assert parse_end_offsets({"a": {"0": -2}}) == {}
    assert parse_end_offsets("not json") == {} and parse_end_offsets('{"a": 1}') == {}


def test_progress_reports_are_mirrored_as_objects_or_dicts() -> None:
    from types import SimpleNamespace

    from spark_jobs.offsets_mirror import OffsetsMirror

    mirror = OffsetsMirror("q", "p.spark.q", "127.0.0.1:1")
    seen: list[dict[tuple[str, int], int]] = []
    mirror.mirror = seen.append  # type: ignore[method-assign]
    kafka = SimpleNamespace(description="KafkaV2[Subscribe[src]]", endOffset='{"src": {"0": 12}}')
    other = SimpleNamespace(description="FileStreamSource[x]", endOffset='{"logOffset": 3}')
    mirror.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(name="q", sources=[kafka, other])))
    mirror.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(name="other-query", sources=[kafka])))
    mirror.mirror_progress({"sources": [{"description": "KafkaV2", "endOffset": {"src": {"0": 20}}}]})
    mirror.mirror_progress(None)
    assert seen == [{("src", 0): 12}, {("src", 0): 20}] and mirror.batches == 1


def test_a_float32_column_is_parsed_as_double_and_its_range_checked() -> None:
    """Spark's JSON parser and Arrow's float cast turn a number beyond a float's range into an
    infinity; the ingest parses float32 columns as double, so the producer's range check refuses the
    row (deadletter), and the rows that pass go on as float32."""
    import json

    from spark_jobs.deadletter import split_and_deadletter
    from spark_jobs.schema_map import spark_ddl_parsed

    table = TableDefinition(
        "t", (Column("k", ColumnType.UINT64, False), Column("f", ColumnType.FLOAT32)), ("k",), "k", 1
    )
    assert spark_ddl_parsed(table) == "`k` bigint, `f` double"
    schema = {"type": "record", "name": "r", "fields": [{"name": "k", "type": "long"}, {"name": "f", "type": "double"}]}
    batch = pa.RecordBatch.from_pydict(
        {
            "value": pa.array([_avro(schema, {"k": 1, "f": 0.5}), _avro(schema, {"k": 2, "f": 1e300})], pa.binary()),
            "topic": ["s"] * 2,
            "partition": pa.array([0] * 2, pa.int32()),
            "offset": pa.array([0, 1], pa.int64()),
        }
    )
    parsed = next(decode_batches(iter([batch]), json.dumps(schema), table))
    assert parsed.column("f").type == pa.float64() and parsed.column("f").to_pylist() == [0.5, 1e300]
    why = refusals(parsed, table, reasons(parsed, table)).to_pylist()
    assert why[0] is None and why[1] is not None and "outside the range of float" in why[1]
    good = list(split_and_deadletter(iter([parsed.slice(0, 1)]), table, target=None))  # type: ignore[arg-type]
    assert good[0].schema.field("f").type == pa.float32() and good[0].column("f").to_pylist() == [0.5]


def test_avro_values_shoal_write_refuses_are_deadlettered_not_truncated() -> None:
    """A source schema of doubles for integer and timestamp columns: Arrow truncated 1.2 and 1.7 to
    key 1 (one row overwrote the other), 2.99 to 2, and read 1700000000123.0 as microseconds."""
    import json

    table = TableDefinition(
        "t",
        (
            Column("k", ColumnType.UINT64, False),
            Column("ts", ColumnType.TIMESTAMP_MS),
            Column("f", ColumnType.FLOAT32),
            Column("g", ColumnType.FLOAT64),
        ),
        ("k",),
        "k",
        1,
    )
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "k", "type": ["long", "double"]},
            {"name": "ts", "type": ["null", "long", "double"]},
            {"name": "f", "type": ["null", "long", "double"]},
            {"name": "g", "type": ["null", "boolean", "long", "double"]},
        ],
    }
    records = [
        {"k": 1.2},
        {"k": 1, "ts": 1700000000123.0},
        {"k": 2, "f": 16_777_217},  # 2**24 + 1: a float32 would round it
        {"k": 3, "g": True},
        {"k": 4, "g": 2**53 + 1},
        {"k": 5, "ts": 1700000000123, "f": 16_777_216, "g": 2.5},  # every value as it is
    ]
    batch = pa.RecordBatch.from_pydict(
        {
            "value": pa.array([_avro(schema, r) for r in records], pa.binary()),
            "topic": ["s"] * len(records),
            "partition": pa.array([0] * len(records), pa.int32()),
            "offset": pa.array(range(len(records)), pa.int64()),
        }
    )
    out = pa.Table.from_batches(list(decode_batches(iter([batch]), json.dumps(schema), table)))
    errors = out.column(ERROR_COLUMN).to_pylist()
    assert errors[0] == "column 'k': a float (1.2) is not a uint64 value; it would be truncated"
    assert errors[1] == "column 'ts': a float (1700000000123.0) is not a timestamp_ms value; it would be truncated"
    assert errors[2] == "column 'f': the integer 16777217 cannot be stored exactly as float32"
    assert errors[3] == "column 'g': a boolean (True) is not a float64 value"
    assert errors[4] == "column 'g': the integer 9007199254740993 cannot be stored exactly as float64"
    assert errors[5] is None
    assert out.slice(5).to_pylist()[0]["f"] == 16_777_216.0 and out.slice(5).to_pylist()[0]["g"] == 2.5


class _Recorder:
    """A deadletter producer that records what it is given and delivers it at once."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, dict[str, bytes]]] = []

    def produce(self, _topic: str, *, value: bytes, headers: list[tuple[str, bytes]], on_delivery: Any) -> None:
        self.sent.append((value, dict(headers)))
        on_delivery(None, None)

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        return 0


def _malformed(values: list[bytes]) -> pa.RecordBatch:
    """Parsed ingest rows that all failed to parse (the deadletter path)."""
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "k": pa.array([None] * n, pa.int64()),
            "v": pa.array([None] * n, pa.string()),
            ERROR_COLUMN: pa.array(["not a JSON object"] * n, pa.string()),
            "_shoal_value": pa.array(values, pa.binary()),
            "_shoal_topic": ["src"] * n,
            "_shoal_partition": pa.array([0] * n, pa.int32()),
            "_shoal_offset": pa.array(range(n), pa.int64()),
        }
    )


def test_a_deadletter_record_that_is_not_delivered_fails_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its row was then in no topic while the batch committed. A real librdkafka producer to a
    closed port; its message timeout stands for any delivery failure."""
    from confluent_kafka import Producer

    from spark_jobs import deadletter

    table = TableDefinition("t", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k")
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 1000, "log_level": 0})
    monkeypatch.setattr(deadletter, "_producer", lambda _target: producer)
    target = deadletter.DeadletterTarget(kafka=None, topic="p.deadletter", table="t")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"1 deadletter records to p\.deadletter failed: .*timed out"):
        list(deadletter.split_and_deadletter(iter([_malformed([b"{oops"])]), table, target))


def test_a_source_value_too_large_for_a_message_is_deadlettered_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """``produce`` raised MSG_SIZE_TOO_LARGE for it, and the query failed on every retry."""
    from spark_jobs import deadletter

    recorder = _Recorder()
    table = TableDefinition("t", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k")
    monkeypatch.setattr(deadletter, "_producer", lambda _target: recorder)
    target = deadletter.DeadletterTarget(kafka=None, topic="p.deadletter", table="t")  # type: ignore[arg-type]
    big = b"{" + b"x" * 1_100_000
    list(deadletter.split_and_deadletter(iter([_malformed([big, b"{small"])]), table, target))
    (cut, cut_headers), (small, small_headers) = recorder.sent
    assert cut == big[: deadletter.MAX_DEADLETTER_VALUE] and cut_headers["shoal.value.bytes"] == b"1100001"
    assert small == b"{small" and "shoal.value.bytes" not in small_headers


def test_json_times_and_binary_are_read_as_shoal_write_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark's JSON parser reads an integer in a timestamp column as seconds and a string in a
    binary column as base64; ``shoal write`` reads milliseconds and UTF-8 text. The ingest parses
    both as text and converts it as ``shoal write`` does; a time it cannot read is deadlettered."""
    import datetime as dt

    from spark_jobs.deadletter import split_and_deadletter
    from spark_jobs.schema_map import spark_ddl_json

    table = TableDefinition(
        "t",
        (Column("k", ColumnType.UINT64, False), Column("ts", ColumnType.TIMESTAMP_MS), Column("b", ColumnType.BINARY)),
        ("k",),
        "k",
        1,
    )
    assert spark_ddl_json(table) == "`k` bigint, `ts` string, `b` string"
    times = ["1700000000123", "2020-01-01T00:00:00+05:00", "-5", None, "garbage", "2020-01-01T00:00:00"]
    n = len(times)
    batch = pa.RecordBatch.from_pydict(
        {
            "k": pa.array(range(n), pa.int64()),
            "ts": pa.array(times, pa.string()),
            "b": pa.array(["héllo", "aGk=", None, "x", "x", "x"], pa.string()),
            ERROR_COLUMN: pa.array([None] * n, pa.string()),
            "_shoal_value": pa.array([b"{}"] * n, pa.binary()),
            "_shoal_topic": ["src"] * n,
            "_shoal_partition": pa.array([0] * n, pa.int32()),
            "_shoal_offset": pa.array(range(n), pa.int64()),
        }
    )
    recorder = _Recorder()
    from spark_jobs import deadletter

    monkeypatch.setattr(deadletter, "_producer", lambda _target: recorder)
    target = deadletter.DeadletterTarget(kafka=None, topic="p.deadletter", table="t")  # type: ignore[arg-type]
    good = pa.Table.from_batches(list(split_and_deadletter(iter([batch]), table, target)))
    utc = dt.UTC
    assert good.column("k").to_pylist() == [0, 1, 2, 3]
    assert good.column("ts").to_pylist() == [
        dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=utc),  # milliseconds, not seconds
        dt.datetime(2019, 12, 31, 19, 0, tzinfo=utc),
        dt.datetime(1969, 12, 31, 23, 59, 59, 995000, tzinfo=utc),
        None,
    ]
    assert good.column("b").to_pylist() == ["héllo".encode(), b"aGk=", None, b"x"]  # UTF-8, not base64
    details = [headers["shoal.detail"].decode() for _value, headers in recorder.sent]
    assert len(details) == 2 and all("is not a time shoal reads" in d for d in details)


def test_an_avro_value_with_bytes_after_its_record_is_refused_not_cut() -> None:
    """Two records back to back (a batching producer), or a record followed by garbage, decoded as
    their first record: written as a good row, the rest lost."""
    import json

    schema = TABLE.avro_schema()
    first = _avro(schema, {"k": (1).to_bytes(8, "big"), "v": "first"})
    two = first + _avro(schema, {"k": (2).to_bytes(8, "big"), "v": "second"})
    batch = pa.RecordBatch.from_pydict(
        {
            "value": pa.array([first, two, first + b"\xde\xad"], pa.binary()),
            "topic": ["s"] * 3,
            "partition": pa.array([0] * 3, pa.int32()),
            "offset": pa.array([0, 1, 2], pa.int64()),
        }
    )
    (out,) = list(decode_batches(iter([batch]), json.dumps(schema), TABLE))
    errors = out.column(ERROR_COLUMN).to_pylist()
    assert errors[0] is None
    assert "bytes after its record" in errors[1] and "bytes after its record" in errors[2]
    assert refusals(out, TABLE, reasons(out, TABLE)).to_pylist()[0] is None


def test_avro_bytes_are_an_integer_only_as_eight_bytes_of_a_uint64_column() -> None:
    """Any bytes value of any integer column was read as an unsigned big-endian integer: empty
    bytes became primary key 0, the text b"42" 13362, a 4-byte -1 4294967295."""
    import json

    table = TableDefinition("t", (Column("k", ColumnType.UINT64, False), Column("n", ColumnType.INT64)), ("k",), "k", 1)
    writer = {
        "type": "record",
        "name": "t",
        "fields": [{"name": "k", "type": "bytes"}, {"name": "n", "type": ["null", "bytes"]}],
    }
    values = [
        _avro(writer, {"k": (7).to_bytes(8, "big"), "n": None}),
        _avro(writer, {"k": b"", "n": None}),
        _avro(writer, {"k": (7).to_bytes(8, "big"), "n": b"42"}),
        _avro(writer, {"k": b"\xff\xff\xff\xff", "n": None}),
    ]
    batch = pa.RecordBatch.from_pydict(
        {
            "value": pa.array(values, pa.binary()),
            "topic": ["s"] * 4,
            "partition": pa.array([0] * 4, pa.int32()),
            "offset": pa.array([0, 1, 2, 3], pa.int64()),
        }
    )
    (out,) = list(decode_batches(iter([batch]), json.dumps(writer), table))
    why = refusals(out, table, reasons(out, table)).to_pylist()
    assert out.column("k").to_pylist()[0] == 7 and why[0] is None
    assert all(w is not None for w in why[1:]), why
