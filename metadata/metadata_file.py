"""The METADATA file (EventQL table partitioning, section 2.1) and its Avro encoding.

A file is one immutable version of a table's partitioning: the table definition and, per
partition, ``begin``, ``partition_id``, ``servers``, ``servers_joining``, ``servers_leaving`` and
the split fields. Every server is recorded with its placement id (the ABA rule of the
replication design). Each version has a random SHA1 ``txnid``, a ``sequence`` and the txnid it was
built from (``parent_txnid``), so the committed versions form one chain.

``MetadataFile.validate`` checks every invariant; ``decode`` runs it, so a file that decodes is a
file that makes sense.
"""

from __future__ import annotations

import enum
import hashlib
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from metadata.errors import InvalidKeyError, MetadataDecodeError, UnknownPartitionError
from metadata.keyspace import UNBOUNDED, KeyRange
from metadata.table import TableDefinition
from shoal.errors import InvalidIdError, SchemaError, WireFormatError
from shoal.ids import validate_partition_id, validate_placement_id, validate_server_id, validate_table_name
from shoal.wire.avro import codec

FORMAT_VERSION = 1
_TXNID = re.compile(r"^[0-9a-f]{40}$")
MAX_PARTITIONS = 100_000


def new_txnid() -> str:
    """A fresh METADATA transaction id: a random SHA1 (40 hex digits), as the source specifies."""
    return hashlib.sha1(os.urandom(32), usedforsecurity=False).hexdigest()


def validate_txnid(value: object) -> str:
    if not isinstance(value, str) or not _TXNID.fullmatch(value):
        raise InvalidIdError(f"metadata txnid must be 40 lowercase hex digits (a SHA1), got {value!r:.80}")
    return value


class ChangeType(enum.Enum):
    CREATE_TABLE = "CREATE_TABLE"
    SPLIT_PARTITION = "SPLIT_PARTITION"
    FINALIZE_SPLIT = "FINALIZE_SPLIT"
    JOIN_SERVER = "JOIN_SERVER"
    FINALIZE_JOIN = "FINALIZE_JOIN"
    LEAVE_SERVER = "LEAVE_SERVER"
    FINALIZE_LEAVE = "FINALIZE_LEAVE"
    FORCE_JOIN = "FORCE_JOIN"


@dataclass(frozen=True, order=True)
class Placement:
    """One assignment of a server to a partition; a new assignment always gets a new placement id."""

    server_id: str
    placement_id: int

    def __post_init__(self) -> None:
        validate_server_id(self.server_id)
        validate_placement_id(self.placement_id)

    def to_record(self) -> dict[str, Any]:
        return {"server_id": self.server_id, "placement_id": self.placement_id}

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> Placement:
        return cls(rec["server_id"], rec["placement_id"])

    def __str__(self) -> str:
        return f"{self.server_id}#{self.placement_id}"


@dataclass(frozen=True)
class PartitionEntry:
    """One partition of the METADATA file; its end is the next entry's begin."""

    begin: bytes
    partition_id: str
    servers: tuple[Placement, ...] = ()
    servers_joining: tuple[Placement, ...] = ()
    servers_leaving: tuple[Placement, ...] = ()
    splitting: bool = False
    split_point: bytes = b""
    split_partition_id_low: str | None = None
    split_partition_id_high: str | None = None
    split_servers_low: tuple[Placement, ...] = ()
    split_servers_high: tuple[Placement, ...] = ()

    def __post_init__(self) -> None:
        for name in (
            "servers",
            "servers_joining",
            "servers_leaving",
            "split_servers_low",
            "split_servers_high",
        ):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        validate_partition_id(self.partition_id)
        if not isinstance(self.begin, bytes) or not isinstance(self.split_point, bytes):
            raise InvalidKeyError("begin and split_point must be bytes")

    @property
    def replicas(self) -> tuple[Placement, ...]:
        """Every placement that holds or receives the partition's data: servers, then joining."""
        return self.servers + self.servers_joining

    def all_placements(self) -> Iterator[Placement]:
        yield from self.servers
        yield from self.servers_joining
        yield from self.servers_leaving
        yield from self.split_servers_low
        yield from self.split_servers_high

    def find(self, server_id: str) -> tuple[str, Placement] | None:
        """Where ``server_id`` is listed: ("servers" | "servers_joining" | "servers_leaving", placement)."""
        for list_name in ("servers", "servers_joining", "servers_leaving"):
            for p in getattr(self, list_name):
                if p.server_id == server_id:
                    return list_name, p
        return None

    def to_record(self) -> dict[str, Any]:
        return {
            "begin": self.begin,
            "partition_id": self.partition_id,
            "servers": [p.to_record() for p in self.servers],
            "servers_joining": [p.to_record() for p in self.servers_joining],
            "servers_leaving": [p.to_record() for p in self.servers_leaving],
            "splitting": self.splitting,
            "split_point": self.split_point,
            "split_partition_id_low": self.split_partition_id_low,
            "split_partition_id_high": self.split_partition_id_high,
            "split_servers_low": [p.to_record() for p in self.split_servers_low],
            "split_servers_high": [p.to_record() for p in self.split_servers_high],
        }

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> PartitionEntry:
        def placements(name: str) -> tuple[Placement, ...]:
            return tuple(Placement.from_record(r) for r in rec[name])

        return cls(
            begin=rec["begin"],
            partition_id=rec["partition_id"],
            servers=placements("servers"),
            servers_joining=placements("servers_joining"),
            servers_leaving=placements("servers_leaving"),
            splitting=rec["splitting"],
            split_point=rec["split_point"],
            split_partition_id_low=rec["split_partition_id_low"],
            split_partition_id_high=rec["split_partition_id_high"],
            split_servers_low=placements("split_servers_low"),
            split_servers_high=placements("split_servers_high"),
        )


@dataclass(frozen=True)
class MetadataFile:
    """One version of a table's METADATA file."""

    table: TableDefinition
    txnid: str
    sequence: int
    partitions: tuple[PartitionEntry, ...]
    parent_txnid: str | None = None
    change: ChangeType = ChangeType.CREATE_TABLE
    change_summary: str = ""
    created_at_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", tuple(self.partitions))

    # -- invariants -----------------------------------------------------------------------------

    def validate(self) -> MetadataFile:
        """Check every invariant; raise MetadataDecodeError naming the first that fails."""
        try:
            self._validate()
        except (InvalidIdError, SchemaError) as exc:
            raise MetadataDecodeError(f"METADATA file {self.table.name}@{self.sequence}: {exc}") from exc
        return self

    def _validate(self) -> None:
        validate_txnid(self.txnid)
        if isinstance(self.sequence, bool) or not isinstance(self.sequence, int) or self.sequence < 1:
            raise MetadataDecodeError(f"sequence must be a positive int, got {self.sequence!r:.40}")
        if self.sequence == 1:
            if self.parent_txnid is not None or self.change is not ChangeType.CREATE_TABLE:
                raise MetadataDecodeError("sequence 1 must be a CREATE_TABLE file without a parent")
        else:
            if self.parent_txnid is None or self.change is ChangeType.CREATE_TABLE:
                raise MetadataDecodeError(f"sequence {self.sequence} must name its parent txnid and a change")
            validate_txnid(self.parent_txnid)
        ks = self.table.keyspace
        if not self.partitions:
            raise MetadataDecodeError("a METADATA file needs at least one partition")
        if len(self.partitions) > MAX_PARTITIONS:
            raise MetadataDecodeError(f"{len(self.partitions)} partitions, at most {MAX_PARTITIONS}")
        if self.partitions[0].begin != UNBOUNDED:
            raise MetadataDecodeError("the first partition must begin at the lowest key (empty begin)")
        ids: set[str] = set()
        placement_ids: set[int] = set()
        prev: bytes | None = None
        for i, entry in enumerate(self.partitions):
            ks.validate_boundary(entry.begin, "partition begin")
            if prev is not None and entry.begin <= prev:
                raise MetadataDecodeError(f"partition {i} does not begin after partition {i - 1} (overlap or disorder)")
            prev = entry.begin
            own_ids = [entry.partition_id]
            if entry.splitting:
                if entry.split_partition_id_low is None or entry.split_partition_id_high is None:
                    raise MetadataDecodeError(f"partition {entry.partition_id} is splitting without child ids")
                own_ids += [
                    validate_partition_id(entry.split_partition_id_low),
                    validate_partition_id(entry.split_partition_id_high),
                ]
                if not self.range_of(i).strictly_inside(entry.split_point):
                    raise MetadataDecodeError(f"partition {entry.partition_id}: split point outside its range")
                ks.validate_boundary(entry.split_point, "split point")
                if not entry.split_servers_low or not entry.split_servers_high:
                    raise MetadataDecodeError(f"partition {entry.partition_id}: split without servers")
            elif (
                entry.split_point
                or entry.split_partition_id_low
                or entry.split_partition_id_high
                or entry.split_servers_low
                or entry.split_servers_high
            ):
                raise MetadataDecodeError(f"partition {entry.partition_id}: split fields set but not splitting")
            for pid in own_ids:
                if pid in ids:
                    raise MetadataDecodeError(f"partition id {pid} appears twice")
                ids.add(pid)
            if not entry.servers:
                raise MetadataDecodeError(f"partition {entry.partition_id} has no live server")
            active = [p.server_id for p in entry.replicas]
            if len(set(active)) != len(active):
                raise MetadataDecodeError(f"partition {entry.partition_id}: a server is listed twice")
            for lst in (entry.split_servers_low, entry.split_servers_high):
                names = [p.server_id for p in lst]
                if len(set(names)) != len(names):
                    raise MetadataDecodeError(f"partition {entry.partition_id}: a split server is listed twice")
            for p in entry.all_placements():
                if p.placement_id in placement_ids:
                    raise MetadataDecodeError(f"placement id {p.placement_id} is used twice")
                placement_ids.add(p.placement_id)

    # -- lookups --------------------------------------------------------------------------------

    def index_of(self, partition_id: str) -> int:
        for i, entry in enumerate(self.partitions):
            if entry.partition_id == partition_id:
                return i
        raise UnknownPartitionError(f"table {self.table.name}@{self.sequence} has no partition {partition_id!r:.80}")

    def partition(self, partition_id: str) -> PartitionEntry:
        return self.partitions[self.index_of(partition_id)]

    def range_of(self, index: int) -> KeyRange:
        begin = self.partitions[index].begin
        end = self.partitions[index + 1].begin if index + 1 < len(self.partitions) else UNBOUNDED
        return KeyRange(begin, end)

    def ranges(self) -> Iterator[tuple[PartitionEntry, KeyRange]]:
        for i, entry in enumerate(self.partitions):
            yield entry, self.range_of(i)

    def placement_ids(self) -> set[int]:
        return {p.placement_id for e in self.partitions for p in e.all_placements()}

    def derive(
        self,
        partitions: Iterable[PartitionEntry],
        change: ChangeType,
        summary: str,
        *,
        txnid: str | None = None,
        now_ms: int | None = None,
    ) -> MetadataFile:
        """The next version: new txnid, sequence + 1, parent = this file. Validated."""
        return replace(
            self,
            txnid=txnid or new_txnid(),
            sequence=self.sequence + 1,
            partitions=tuple(partitions),
            parent_txnid=self.txnid,
            change=change,
            change_summary=summary,
            created_at_ms=int(time.time() * 1000) if now_ms is None else now_ms,
        ).validate()

    # -- encoding -------------------------------------------------------------------------------

    def to_record(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "txnid": self.txnid,
            "sequence": self.sequence,
            "parent_txnid": self.parent_txnid,
            "change": self.change.value,
            "change_summary": self.change_summary,
            "created_at_ms": self.created_at_ms,
            "table": self.table.to_record(),
            "partitions": [e.to_record() for e in self.partitions],
        }

    def encode(self) -> bytes:
        self.validate()
        try:
            return codec("metadata_file").encode(self.to_record())
        except WireFormatError as exc:
            raise MetadataDecodeError(f"cannot encode METADATA file {self.table.name}@{self.sequence}: {exc}") from exc

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | None) -> MetadataFile:
        """Decode and validate; any failure is a MetadataDecodeError (never a half-built file)."""
        try:
            rec = codec("metadata_file").decode(data)
        except WireFormatError as exc:
            raise MetadataDecodeError(f"METADATA file does not decode: {exc}") from exc
        if rec.get("format_version") != FORMAT_VERSION:
            raise MetadataDecodeError(f"METADATA file format_version {rec.get('format_version')!r} is not supported")
        try:
            file = cls(
                table=TableDefinition.from_record(rec["table"]),
                txnid=rec["txnid"],
                sequence=rec["sequence"],
                partitions=tuple(PartitionEntry.from_record(p) for p in rec["partitions"]),
                parent_txnid=rec["parent_txnid"],
                change=ChangeType(rec["change"]),
                change_summary=rec["change_summary"],
                created_at_ms=rec["created_at_ms"],
            )
        except (KeyError, TypeError, ValueError, InvalidIdError, SchemaError) as exc:
            raise MetadataDecodeError(f"METADATA file is inconsistent: {exc}") from exc
        return file.validate()


@dataclass(frozen=True)
class RetiredPartition:
    """A partition that SPLIT_FINALIZE replaced by its two children (seed 002 section 4.1), as the
    last METADATA version that listed it had it: its entry (servers, split point, children) and
    key range. Its channels and ingest topic outlive it (verify reads them; its stragglers are
    forwarded to the children)."""

    entry: PartitionEntry
    key_range: KeyRange

    @property
    def partition_id(self) -> str:
        return self.entry.partition_id

    @property
    def split_point(self) -> bytes:
        assert self.entry.split_point is not None  # retired_partitions keeps split entries only
        return self.entry.split_point

    @property
    def low(self) -> str:
        assert self.entry.split_partition_id_low is not None
        return self.entry.split_partition_id_low

    @property
    def high(self) -> str:
        assert self.entry.split_partition_id_high is not None
        return self.entry.split_partition_id_high


def retired_partitions(history: Sequence[MetadataFile]) -> list[RetiredPartition]:
    """Every partition of ``history`` (a table's METADATA versions, oldest first, as
    ``MetadataCoordinator.history`` gives them) that its last version no longer lists, oldest first.
    A partition leaves METADATA only by SPLIT_FINALIZE, so its last entry records the split."""
    if not history:
        return []
    listed = {e.partition_id for e in history[-1].partitions}
    last: dict[str, RetiredPartition] = {}
    for file in history:
        for entry, key_range in file.ranges():
            parts = (entry.split_point, entry.split_partition_id_low, entry.split_partition_id_high)
            if entry.partition_id not in listed and entry.splitting and None not in parts:
                last[entry.partition_id] = RetiredPartition(entry, key_range)
    return list(last.values())


def store_key(table: str, txnid: str) -> bytes:
    """The compacted-topic key of one file version: ``<table>/<txnid>``."""
    return f"{validate_table_name(table)}/{validate_txnid(txnid)}".encode("ascii")


def parse_store_key(key: bytes | None) -> tuple[str, str]:
    """Inverse of :func:`store_key`; raise MetadataDecodeError for a key of another shape."""
    if key is None:
        raise MetadataDecodeError("metadata topic record without a key")
    try:
        table, _, txnid = key.decode("ascii").partition("/")
        return validate_table_name(table), validate_txnid(txnid)
    except (UnicodeDecodeError, InvalidIdError) as exc:
        raise MetadataDecodeError(f"metadata topic key {key[:100]!r} is not <table>/<txnid>: {exc}") from exc
