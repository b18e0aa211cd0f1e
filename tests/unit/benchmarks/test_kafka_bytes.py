"""bench.kafka_bytes' pure parts: Kafka log parsing, the by-reference WAL sizes, the per-row table."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import fastavro

from bench import kafka_bytes as kb
from shoal.wire.records import Gtid, IngestOffset, WalRecord

PID = "0123456789abcdef0123456789abcdef"


def _varint(value: int) -> bytes:
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _record(value: bytes | None, key: bytes | None = None, offset_delta: int = 0) -> bytes:
    body = b"\x00" + _varint(0) + _varint(offset_delta)
    body += _varint(-1) if key is None else _varint(len(key)) + key
    body += _varint(-1) if value is None else _varint(len(value)) + value
    body += _varint(0)  # no headers
    return _varint(len(body)) + body


def _batch(values: list[bytes | None], *, control: bool = False) -> bytes:
    records = b"".join(_record(v, offset_delta=i) for i, v in enumerate(values))
    attributes = 0x30 if control else 0x10  # transactional (+ control)
    count = len(values)
    header = struct.pack(">qiiBIhiqqqhii", 0, 49 + len(records), 0, 2, 0, attributes, count - 1, 0, 0, 7, 0, 0, count)
    return header + records


def _wal(payload: bytes, seq: int = 0) -> WalRecord:
    return WalRecord.create(
        partition_id=PID,
        placement_id=3,
        gtid=Gtid(2, seq),
        row_count=10,
        payload=payload,
        ingest_offsets=(IngestOffset(f"shoal.ingest.{PID}", 0, 41),),
        created_at_ms=1_700_000_000_000,
    )


def test_varints_round_trip_and_sizes() -> None:
    for v in (0, 1, -1, 63, 64, -65, 300, 2**31 - 1, -(2**40)):
        data = _varint(v)
        assert kb.varint_size(v) == len(data)
        assert kb.read_varint(data + b"\xff", 0) == (v, len(data))


def test_payload_hash_field_size_is_fastavros() -> None:
    sha = {"type": "fixed", "name": "Sha256", "size": 32}
    schema = fastavro.parse_schema({"type": "record", "name": "R", "fields": [{"name": "h", "type": ["null", sha]}]})
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, {"h": bytes(32)})
    assert len(buf.getvalue()) == kb.PAYLOAD_HASH_BYTES


def test_batches_and_records_are_read_back_and_a_partial_batch_ends_the_list() -> None:
    first, second = _batch([b"a" * 10, None, b"b" * 200]), _batch([b"c"], control=True)
    data = first + second + second[:30]
    batches, end = kb.read_batches(data)
    assert end == len(first) + len(second)
    assert [(b.size, b.records, b.control, b.compressed) for b in batches] == [
        (len(first), 3, False, False),
        (len(second), 1, True, False),
    ]
    assert [v for _n, v in kb.read_records(batches[0])] == [b"a" * 10, None, b"b" * 200]
    assert kb.read_batches(data, end) == ([], end)
    assert kb.read_batches(first + bytes(100))[1] == len(first)  # zero fill is not a batch


def test_record_size_with_value_matches_a_re_encoded_record() -> None:
    for old, new in ((200_000, 180), (100, 10), (10, 10), (127, 128)):
        (length, _v), *_ = kb.read_records(kb.read_batches(_batch([b"x" * old]))[0][0])
        assert kb.record_size_with_value(length, old, new) == len(_record(b"y" * new))


def test_wal_batch_by_reference_drops_the_payloads_and_keeps_the_rest() -> None:
    payloads = [b"p" * 5000, b"q" * 70_000]
    records = [_wal(payloads[0]), _wal(payloads[1], seq=10)]
    batch = kb.read_batches(_batch([r.to_bytes() for r in records]))[0][0]
    tally = kb.Tally()
    size = kb.wal_batch_by_reference(batch, tally)
    # each value loses its payload and payload length, gains an empty payload (1 byte) and the hash field
    headers = [
        len(r.to_bytes()) - len(p) - len(_varint(len(p))) + 1 + kb.PAYLOAD_HASH_BYTES
        for r, p in zip(records, payloads, strict=True)
    ]
    assert size == len(_batch([b"h" * n for n in headers]))
    assert tally.wal_payload_bytes == sum(map(len, payloads))
    control = kb.read_batches(_batch([b"\x00\x00\x00\x00\x00\x00"], control=True))[0][0]
    assert kb.wal_batch_by_reference(control, tally) == control.size
    foreign = kb.read_batches(_batch([b"not a WAL record", None]))[0][0]
    assert kb.wal_batch_by_reference(foreign, tally) == foreign.size  # counted as it is


def test_topic_kinds_and_log_dir_names() -> None:
    assert kb.topic_kind(f"shoal.ingest.{PID}", "shoal") == "ingest"
    assert kb.topic_kind(f"shoal.wal.{PID}.7", "shoal") == "wal"
    assert kb.topic_kind(f"shoal.segments.{PID}.7", "shoal") == "segments"
    assert kb.topic_kind("shoal.metadata", "shoal") == "metadata"
    assert kb.topic_kind("__transaction_state", "shoal") == "transaction state"
    assert kb.topic_kind("__consumer_offsets", "x") == "consumer offsets"
    assert kb.topic_kind("shoal.replica.x", "shoal") == "other"
    assert kb.split_log_dir(f"shoal.wal.{PID}.7-0") == (f"shoal.wal.{PID}.7", 0)
    assert kb.split_log_dir("bench-raw-abc-12") == ("bench-raw-abc", 12)
    assert kb.split_log_dir("meta.properties") is None


def test_scan_reads_what_was_appended_since_the_first_scan(tmp_path: Path) -> None:
    wal = tmp_path / "b1" / f"shoal.wal.{PID}.3-0"
    ingest = tmp_path / "b1" / f"shoal.ingest.{PID}-0"
    for d in (wal, ingest):
        d.mkdir(parents=True)
    (ingest / "00000000000000000000.log").write_bytes(_batch([b"i" * 50]))
    (wal / "00000000000000000000.log").write_bytes(b"")
    before, _, _ = kb.scan([tmp_path / "b1"], "shoal", None)
    assert before[ingest / "00000000000000000000.log"] == len(_batch([b"i" * 50]))
    appended = _batch([b"i" * 1000])
    with (ingest / "00000000000000000000.log").open("ab") as f:
        f.write(appended)
    (wal / "00000000000000000000.log").write_bytes(_batch([_wal(b"i" * 1000).to_bytes()]))
    _, tallies, notes = kb.scan([tmp_path / "b1"], "shoal", before)
    assert notes == []
    assert tallies["ingest"].bytes == len(appended) == tallies["ingest"].by_reference_bytes
    assert tallies["wal"].wal_payload_bytes == 1000 and tallies["wal"].by_reference_bytes < tallies["wal"].bytes
    rows = kb.bytes_per_row(tallies, 10)
    assert [r["kind"] for r in rows] == ["ingest", "wal", "total"]
    assert rows[-1]["bytes/row"] == (tallies["ingest"].bytes + tallies["wal"].bytes) / 10
    ratio = kb.ratio_of(rows)
    assert ratio is not None and 0.5 < ratio < 1.0
