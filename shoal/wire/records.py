"""Typed control records and the WAL hash chain.

Each class mirrors one ``.avsc`` schema field for field, validates its values when built (so an
invalid record can be neither sent nor received), and converts to and from the framed Avro bytes
of :mod:`shoal.wire.avro`:

- :class:`ManifestRecord` (``segment_manifest.avsc``) and :class:`SegmentChunk`
  (``segment_chunk.avsc``) travel on a placement's segments channel: a manifest, then its chunks.
- :class:`WalRecord` (``wal_record.avsc``) is the envelope of one row batch on a WAL channel.

Errors: building a record with a bad value raises :class:`~shoal.errors.InvalidIdError` (ids) or
:class:`~shoal.errors.SchemaError` (other fields); ``from_bytes`` turns everything wrong with
received bytes, including well-formed Avro holding invalid values, into
:class:`~shoal.errors.WireFormatError`.

The hash chain (TokuMX): every WAL record carries ``hash = chain_hash(prev_hash, gtid, payload)``
and the ``prev_hash`` of the record before it on the same channel; the first record of a channel
has ``prev_hash = GENESIS_HASH`` (32 zero bytes). :func:`verify_chain` checks a run of records.
The hash covers the GTID and the payload; the other envelope fields are not hashed.

A WAL record carries its payload: a copy of the accepted ingest record's value (DESIGN.md section
4), so a WAL channel alone holds what its leader accepted. Records that reference the ingest offset
and chain a payload hash instead were evaluated and not adopted for now: the decision, the measured
Kafka bytes per row of both designs (``bench/kafka_bytes.py``), what each guarantee would need and
the steps to build it are in ``docs/wal-by-reference.md``.
"""

from __future__ import annotations

import hashlib
import re
import struct
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from shoal.errors import SchemaError, ShoalError, WireFormatError
from shoal.ids import validate_hex128, validate_partition_id, validate_placement_id, validate_table_name
from shoal.wire.arrow_ipc import decode_batch
from shoal.wire.avro import codec

HASH_LEN = 32
GENESIS_HASH = bytes(HASH_LEN)
"""``prev_hash`` of the first record of a WAL channel."""

_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")  # Kafka's legal topic names
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_GTID_BYTES = struct.Struct(">qq")


def _count(what: str, value: object, maximum: int = _LONG_MAX, minimum: int = 0) -> int:
    """``value`` if it is an int in [minimum, maximum] (not a bool), else SchemaError."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise SchemaError(f"{what} must be an integer in [{minimum}, {maximum}], got {value!r:.80}")
    return value


def _topic(what: str, value: object) -> str:
    if not isinstance(value, str) or not _TOPIC.fullmatch(value):
        raise SchemaError(f"{what} must be a Kafka topic name ([A-Za-z0-9._-], 1-249 chars), got {value!r:.80}")
    return value


def _hash(what: str, value: object) -> bytes:
    if not isinstance(value, bytes) or len(value) != HASH_LEN:
        raise SchemaError(f"{what} must be {HASH_LEN} bytes, got {value!r:.80}")
    return value


def _from_wire(kind: str, build: Any, data: bytes | bytearray | memoryview | None) -> Any:
    """Decode ``data`` with ``kind``'s codec and build the typed record; every failure is a WireFormatError."""
    raw = codec(kind).decode(data)
    try:
        return build(raw)
    except WireFormatError:
        raise
    except (ShoalError, KeyError, TypeError, ValueError) as exc:
        raise WireFormatError(f"{kind}: invalid record: {exc}") from exc


@dataclass(frozen=True, order=True)
class Gtid:
    """Global transaction id ``(epoch, seq)``; ordered by epoch, then seq."""

    epoch: int
    seq: int

    def __post_init__(self) -> None:
        _count("gtid.epoch", self.epoch)
        _count("gtid.seq", self.seq)

    def __str__(self) -> str:
        return f"{self.epoch}:{self.seq}"

    def to_avro(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "seq": self.seq}

    @classmethod
    def from_avro(cls, raw: Mapping[str, Any]) -> Gtid:
        return cls(raw["epoch"], raw["seq"])


@dataclass(frozen=True)
class WalOffsetRange:
    """Offsets ``[start_offset, end_offset)`` of one WAL channel topic (end exclusive)."""

    topic: str
    start_offset: int
    end_offset: int

    def __post_init__(self) -> None:
        _topic("covered_wal_offsets.topic", self.topic)
        _count("covered_wal_offsets.start_offset", self.start_offset)
        _count("covered_wal_offsets.end_offset", self.end_offset, minimum=self.start_offset)

    def to_avro(self) -> dict[str, Any]:
        return {"topic": self.topic, "start_offset": self.start_offset, "end_offset": self.end_offset}

    @classmethod
    def from_avro(cls, raw: Mapping[str, Any]) -> WalOffsetRange:
        return cls(raw["topic"], raw["start_offset"], raw["end_offset"])


@dataclass(frozen=True)
class IngestOffset:
    """One ingest record (Kafka topic, partition, offset) that a WAL batch came from."""

    topic: str
    partition: int
    offset: int

    def __post_init__(self) -> None:
        _topic("ingest_offsets.topic", self.topic)
        _count("ingest_offsets.partition", self.partition, _INT_MAX)
        _count("ingest_offsets.offset", self.offset)

    def to_avro(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}

    @classmethod
    def from_avro(cls, raw: Mapping[str, Any]) -> IngestOffset:
        return cls(raw["topic"], raw["partition"], raw["offset"])


@dataclass(frozen=True)
class ManifestRecord:
    """Announces one segment file on a segments channel; ``chunk_count`` chunks follow it."""

    table: str
    partition_id: str
    segment_id: str
    base_segment_id: str | None
    included_segment_ids: tuple[str, ...]
    is_major: bool
    placement_id: int
    epoch: int
    checksum: str
    size_bytes: int
    row_count: int
    chunk_count: int
    covered_wal_offsets: tuple[WalOffsetRange, ...]
    latest_major_offset: int | None
    created_at_ms: int
    min_gtid: Gtid | None = None
    max_gtid: Gtid | None = None

    def __post_init__(self) -> None:
        validate_table_name(self.table)
        validate_partition_id(self.partition_id)
        validate_hex128(self.segment_id, "segment_id")
        if self.base_segment_id is not None:
            validate_hex128(self.base_segment_id, "base_segment_id")
            if self.base_segment_id == self.segment_id:
                raise SchemaError(f"segment {self.segment_id} cannot be its own base")
        object.__setattr__(self, "included_segment_ids", tuple(self.included_segment_ids))
        for sid in self.included_segment_ids:
            validate_hex128(sid, "included_segment_ids[]")
        if not isinstance(self.is_major, bool):
            raise SchemaError(f"is_major must be a bool, got {self.is_major!r:.80}")
        validate_placement_id(self.placement_id)
        _count("epoch", self.epoch)
        if not isinstance(self.checksum, str) or not _SHA256_HEX.fullmatch(self.checksum):
            raise SchemaError(f"checksum must be a sha256 as 64 lowercase hex digits, got {self.checksum!r:.80}")
        _count("size_bytes", self.size_bytes)
        _count("row_count", self.row_count)
        _count("chunk_count", self.chunk_count, _INT_MAX)
        object.__setattr__(self, "covered_wal_offsets", tuple(self.covered_wal_offsets))
        if not all(isinstance(r, WalOffsetRange) for r in self.covered_wal_offsets):
            raise SchemaError("covered_wal_offsets must hold WalOffsetRange values")
        if self.latest_major_offset is not None:
            _count("latest_major_offset", self.latest_major_offset)
        _count("created_at_ms", self.created_at_ms)
        if (self.min_gtid is None) != (self.max_gtid is None):
            raise SchemaError("min_gtid and max_gtid must both be set or both be null")
        if self.min_gtid is not None and self.max_gtid is not None and self.min_gtid > self.max_gtid:
            raise SchemaError(f"min_gtid {self.min_gtid} is greater than max_gtid {self.max_gtid}")

    def to_avro(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "partition_id": self.partition_id,
            "segment_id": self.segment_id,
            "base_segment_id": self.base_segment_id,
            "included_segment_ids": list(self.included_segment_ids),
            "is_major": self.is_major,
            "placement_id": self.placement_id,
            "epoch": self.epoch,
            "checksum": self.checksum,
            "size_bytes": self.size_bytes,
            "row_count": self.row_count,
            "chunk_count": self.chunk_count,
            "covered_wal_offsets": [r.to_avro() for r in self.covered_wal_offsets],
            "latest_major_offset": self.latest_major_offset,
            "created_at_ms": self.created_at_ms,
            "min_gtid": None if self.min_gtid is None else self.min_gtid.to_avro(),
            "max_gtid": None if self.max_gtid is None else self.max_gtid.to_avro(),
        }

    @classmethod
    def from_avro(cls, raw: Mapping[str, Any]) -> ManifestRecord:
        return cls(
            table=raw["table"],
            partition_id=raw["partition_id"],
            segment_id=raw["segment_id"],
            base_segment_id=raw["base_segment_id"],
            included_segment_ids=tuple(raw["included_segment_ids"]),
            is_major=raw["is_major"],
            placement_id=raw["placement_id"],
            epoch=raw["epoch"],
            checksum=raw["checksum"],
            size_bytes=raw["size_bytes"],
            row_count=raw["row_count"],
            chunk_count=raw["chunk_count"],
            covered_wal_offsets=tuple(WalOffsetRange.from_avro(r) for r in raw["covered_wal_offsets"]),
            latest_major_offset=raw["latest_major_offset"],
            created_at_ms=raw["created_at_ms"],
            min_gtid=None if raw["min_gtid"] is None else Gtid.from_avro(raw["min_gtid"]),
            max_gtid=None if raw["max_gtid"] is None else Gtid.from_avro(raw["max_gtid"]),
        )

    def to_bytes(self) -> bytes:
        return codec("segment_manifest").encode(self.to_avro())

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview | None) -> ManifestRecord:
        result: ManifestRecord = _from_wire("segment_manifest", cls.from_avro, data)
        return result


@dataclass(frozen=True)
class SegmentChunk:
    """Chunk ``index`` of ``count`` of a segment file; the chunks' data concatenated is the file."""

    segment_id: str
    index: int
    count: int
    data: bytes

    def __post_init__(self) -> None:
        validate_hex128(self.segment_id, "segment_id")
        _count("count", self.count, _INT_MAX, minimum=1)
        _count("index", self.index, self.count - 1)
        if not isinstance(self.data, bytes):
            raise SchemaError(f"chunk data must be bytes, got {type(self.data).__name__}")

    def to_avro(self) -> dict[str, Any]:
        return {"segment_id": self.segment_id, "index": self.index, "count": self.count, "data": self.data}

    @classmethod
    def from_avro(cls, raw: Mapping[str, Any]) -> SegmentChunk:
        return cls(raw["segment_id"], raw["index"], raw["count"], raw["data"])

    def to_bytes(self) -> bytes:
        return codec("segment_chunk").encode(self.to_avro())

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview | None) -> SegmentChunk:
        result: SegmentChunk = _from_wire("segment_chunk", cls.from_avro, data)
        return result


@dataclass(frozen=True)
class WalRecord:
    """Envelope of one row batch on a WAL channel. ``gtid`` is the GTID of the batch's first row.

    The batch's rows have GTIDs ``(gtid.epoch, gtid.seq + i)`` for ``i < row_count``. Build new
    records with :meth:`create`, which computes ``hash``; a decoded record's hash is checked by
    :func:`verify_chain`, not here, so a broken chain can still be read and reported.
    """

    partition_id: str
    placement_id: int
    gtid: Gtid
    row_count: int
    prev_hash: bytes
    hash: bytes
    ingest_offsets: tuple[IngestOffset, ...]
    payload: bytes
    created_at_ms: int

    def __post_init__(self) -> None:
        validate_partition_id(self.partition_id)
        validate_placement_id(self.placement_id)
        if not isinstance(self.gtid, Gtid):
            raise SchemaError(f"gtid must be a Gtid, got {self.gtid!r:.80}")
        _count("row_count", self.row_count, _INT_MAX)
        _hash("prev_hash", self.prev_hash)
        _hash("hash", self.hash)
        object.__setattr__(self, "ingest_offsets", tuple(self.ingest_offsets))
        if not all(isinstance(o, IngestOffset) for o in self.ingest_offsets):
            raise SchemaError("ingest_offsets must hold IngestOffset values")
        if not isinstance(self.payload, bytes):
            raise SchemaError(f"payload must be bytes, got {type(self.payload).__name__}")
        _count("created_at_ms", self.created_at_ms)

    @classmethod
    def create(
        cls,
        *,
        partition_id: str,
        placement_id: int,
        gtid: Gtid,
        row_count: int,
        payload: bytes,
        prev_hash: bytes = GENESIS_HASH,
        ingest_offsets: Iterable[IngestOffset] = (),
        created_at_ms: int | None = None,
    ) -> WalRecord:
        """A new record chained after ``prev_hash`` (the previous record's ``hash``, or genesis)."""
        _hash("prev_hash", prev_hash)
        return cls(
            partition_id=partition_id,
            placement_id=placement_id,
            gtid=gtid,
            row_count=row_count,
            prev_hash=prev_hash,
            hash=chain_hash(prev_hash, gtid.epoch, gtid.seq, payload),
            ingest_offsets=tuple(ingest_offsets),
            payload=payload,
            created_at_ms=time.time_ns() // 1_000_000 if created_at_ms is None else created_at_ms,
        )

    @property
    def last_gtid(self) -> Gtid:
        """GTID of the batch's last row (``gtid`` itself for an empty batch)."""
        return Gtid(self.gtid.epoch, self.gtid.seq + max(self.row_count - 1, 0))

    def rows(self, expected_schema: pa.Schema | None = None) -> pa.Table:
        """Decode ``payload`` (see :func:`~shoal.wire.arrow_ipc.decode_batch`) and check ``row_count``."""
        table = decode_batch(self.payload, expected_schema)
        if table.num_rows != self.row_count:
            raise WireFormatError(
                f"WAL record {self.gtid}: payload holds {table.num_rows} rows but row_count says {self.row_count}"
            )
        return table

    def to_avro(self) -> dict[str, Any]:
        return {
            "partition_id": self.partition_id,
            "placement_id": self.placement_id,
            "gtid": self.gtid.to_avro(),
            "row_count": self.row_count,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
            "ingest_offsets": [o.to_avro() for o in self.ingest_offsets],
            "payload": self.payload,
            "created_at_ms": self.created_at_ms,
        }

    @classmethod
    def from_avro(cls, raw: Mapping[str, Any]) -> WalRecord:
        return cls(
            partition_id=raw["partition_id"],
            placement_id=raw["placement_id"],
            gtid=Gtid.from_avro(raw["gtid"]),
            row_count=raw["row_count"],
            prev_hash=raw["prev_hash"],
            hash=raw["hash"],
            ingest_offsets=tuple(IngestOffset.from_avro(o) for o in raw["ingest_offsets"]),
            payload=raw["payload"],
            created_at_ms=raw["created_at_ms"],
        )

    def to_bytes(self) -> bytes:
        return codec("wal_record").encode(self.to_avro())

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview | None) -> WalRecord:
        result: WalRecord = _from_wire("wal_record", cls.from_avro, data)
        return result


def chain_hash(prev_hash: bytes, epoch: int, seq: int, payload: bytes) -> bytes:
    """``sha256(prev_hash || epoch || seq || payload)``, epoch and seq as 8-byte big-endian signed.

    This is the canonical form of a WAL record for the chain: the two fixed-width GTID fields
    make the concatenation unambiguous. Raises :class:`SchemaError` for a ``prev_hash`` that is
    not 32 bytes or a GTID outside ``[0, 2**63)``.
    """
    _hash("prev_hash", prev_hash)
    _count("epoch", epoch)
    _count("seq", seq)
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise SchemaError(f"payload must be bytes, got {type(payload).__name__}")
    digest = hashlib.sha256(prev_hash)
    digest.update(_GTID_BYTES.pack(epoch, seq))
    digest.update(payload)
    return digest.digest()


class HashChainError(WireFormatError):
    """A run of WAL records is not a valid hash chain; ``index`` is the first broken record."""

    def __init__(self, index: int, gtid: Gtid | None, reason: str) -> None:
        self.index = index
        self.gtid = gtid
        self.reason = reason
        where = f"record {index}" + ("" if gtid is None else f" (gtid {gtid})")
        super().__init__(f"WAL hash chain broken at {where}: {reason}")


def verify_chain(records: Iterable[WalRecord | Mapping[str, Any]], *, prev_hash: bytes | None = GENESIS_HASH) -> None:
    """Check that ``records`` (in channel order) form one unbroken hash chain, or raise :class:`HashChainError`.

    ``prev_hash`` is what the first record must chain from: :data:`GENESIS_HASH` for a channel read
    from its first record, the hash of the last record already verified when continuing, or
    ``None`` to accept any (a channel whose head was truncated by ``delete_records``).

    For every record: same partition and placement as the first; ``prev_hash`` equals the previous
    record's ``hash``; ``hash`` equals :func:`chain_hash` of its own fields; and its GTID comes after
    every row of the previous record (a later epoch, or in the same epoch
    ``seq >= previous seq + previous row_count``). Records may be :class:`WalRecord` values or
    dicts as decoded by ``codec("wal_record")``. An empty run is a valid chain.
    """
    expected_prev = prev_hash
    first: WalRecord | None = None
    previous: WalRecord | None = None
    for index, item in enumerate(records):
        try:
            record = item if isinstance(item, WalRecord) else WalRecord.from_avro(item)
        except (ShoalError, KeyError, TypeError, ValueError) as exc:
            raise HashChainError(index, None, f"not a valid WAL record: {exc}") from exc
        gtid = record.gtid
        if first is None:
            first = record
        elif (record.partition_id, record.placement_id) != (first.partition_id, first.placement_id):
            raise HashChainError(
                index,
                gtid,
                f"belongs to partition {record.partition_id} placement {record.placement_id}, but the chain is "
                f"partition {first.partition_id} placement {first.placement_id}",
            )
        if expected_prev is not None and record.prev_hash != expected_prev:
            after = "the genesis hash" if previous is None and expected_prev == GENESIS_HASH else "the previous hash"
            raise HashChainError(
                index, gtid, f"prev_hash {record.prev_hash.hex()} does not match {after} {expected_prev.hex()}"
            )
        actual = chain_hash(record.prev_hash, gtid.epoch, gtid.seq, record.payload)
        if record.hash != actual:
            raise HashChainError(
                index, gtid, f"hash {record.hash.hex()} does not match its content (computed {actual.hex()})"
            )
        if previous is not None:
            next_seq = previous.gtid.seq + max(previous.row_count, 1)
            if gtid.epoch < previous.gtid.epoch or (gtid.epoch == previous.gtid.epoch and gtid.seq < next_seq):
                raise HashChainError(
                    index,
                    gtid,
                    f"gtid does not follow the previous record's rows {previous.gtid}..{previous.last_gtid}",
                )
        expected_prev = record.hash
        previous = record
