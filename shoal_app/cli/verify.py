"""``shoal verify TABLE``: do all replicas of every partition hold the same rows, and are the WAL chains intact?

For each partition and each of its placements: the replica's chain (segment ids
from the latest major to root), row count and content hash (``describe replica`` over Arrow
Flight, :mod:`storage_node.replication.describe`), and whether all replicas agree (same row count
and content hash). The channels read are those of every placement listed for the partition
(servers, joining and leaving: a leaving placement may have led, and its WAL channel holds accepted
writes until UNLOAD_FINAL). For each WAL channel the GTID hash chain (TokuMX, seed 003) is checked
from the channel's Tail to its end (from the genesis hash when nothing was truncated), every record
naming that channel's partition and placement, and the GTID order of every channel (DESIGN.md
section 10, :mod:`shoal_app.cli.verify_gtids`): each WAL channel's and each segments channel's GTIDs
in channel order, every WAL record above the segments before it, no epoch used by two placements,
and across placements, in the order of the ingest offsets their WAL records accepted, GTIDs that
increase and no ingest offset accepted twice. No WAL channel may have lost records that no
segment holds (DESIGN.md section 6): its Tail, read before any segments channel, is at most the
highest offset of it that a manifest on the partition's segments channels covers, and a channel
that is gone while manifests cover it is a mismatch. Every write still on the channels (the WAL
channels from their Tails, every segment on the segments channels) is in every replica, at its
GTID with the values it wrote, or newer (:mod:`shoal_app.cli.verify_coverage`), and a version
newer than the channels' must be one they hold when read again after the scans, unless nothing on
them can tell it from a write on a channel that is gone (:mod:`shoal_app.cli.verify_newer`):
replicas are compared with the channels, not only with each other. Channels are streamed, never loaded whole
(a segment's file is held while its rows are read). And each replica's lowest and highest
partition key lie inside the partition's key range:
replicas that agree on rows another partition owns (a wrong split, a misrouted write) are a mismatch.

A split parent's channels, which stay after SPLIT_FINALIZE until its replicas' UNLOAD_FINAL deletes
them, are read the same way, and every write on them must be on every replica of the partition
that holds its key now (:mod:`shoal_app.cli.verify_retired`).

Not checked: rows that no channel holds any more (a major that lost rows, once the Tail truncated
the minors it replaced from its channel), and an epoch that went back from one leader to the next
once the Tail truncated the predecessor's WAL records, a replica version newer than the channels at
an epoch that left no WAL record on them (:mod:`shoal_app.cli.verify_newer`), and a WAL channel
deleted before any segment covered it, whose placement then reads as one that never led (unless it
is ZooKeeper's current leader and a replica holds versions of its epoch no segment holds). A retired
partition's channel deleted while verify reads it shows as a read error: verify again. METADATA is
read once; a split or a leave finalized while verify runs shows as "METADATA changed": verify again.

Exit code 0 when everything agrees and every chain is intact, 1 otherwise, and 1 for an error too
(an unknown table, a cluster that cannot be reached): a script reads ``ok`` in ``--output json`` to
tell the two apart (nothing is printed on stdout for an error). Meant for a quiet table: rows still
in a leader's memtable and not yet in a follower's overlay show up as a disagreement while writes
are in flight.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar

import click
import pyarrow as pa
import pyarrow.compute as pc

from metadata.client import MetadataClient
from metadata.errors import InvalidKeyError
from metadata.keyspace import KeyRange, Keyspace
from metadata.metadata_file import MetadataFile, PartitionEntry, Placement, retired_partitions
from metadata.table import TableDefinition
from shoal.errors import KafkaOperationError, ShoalError, WireFormatError
from shoal.kafka.errors import TRANSIENT_CODES, ChannelTruncatedError
from shoal.kafka.readers import ChannelRecord
from shoal.kafka.settings import KafkaSettings
from shoal.segments.channel import AssembledSegment
from shoal.segments.versioned import EPOCH_COLUMN, SEQ_COLUMN
from shoal.topics import TopicNames
from shoal.wire.records import ManifestRecord as WireManifest
from shoal_app.cli.connection import connection_options, metadata_config
from shoal_app.cli.context import emit, new_table, output_option, show
from shoal_app.cli.models import (
    PartitionVerification,
    ReplicaDescription,
    ReplicaError,
    RetiredVerification,
    Verification,
    WalChannelCheck,
)
from shoal_app.cli.params import TABLE_NAME
from shoal_app.cli.verify_coverage import (
    ChannelSegment,
    Rows,
    WalFloors,
    floor_problems,
    lowest_and_highest_gtid,
    replicas_missing,
)
from shoal_app.cli.verify_gtids import (
    SegmentsOrder,
    WalOrder,
    accept_order,
    check_manifests,
    check_wal_records,
    covered_run,
    shared_epochs,
)
from shoal_app.cli.verify_ingest import IngestReader, IngestTopic, kafka_reader, unaccepted
from shoal_app.cli.verify_newer import newer_problems, newer_than_floors, to_read_again
from shoal_app.cli.verify_retired import epochs_not_above, retired_coverage

log = logging.getLogger(__name__)

T = TypeVar("T")


class ChannelSource(Protocol):
    """How verify reads channels (Kafka by default; tests pass their own)."""

    def bounds(self, topic: str) -> tuple[int, int] | None:
        """(Tail, Append) of a channel, or None when it does not exist (as listed since :meth:`refresh`)."""

    def refresh(self) -> None:
        """List the topics again at the next :meth:`bounds`: each read of a partition's channels
        sees those created since the last one (a leader elected meanwhile creates its WAL channel)."""

    def wal_records(self, topic: str, start: int) -> Iterator[ChannelRecord]:
        """A WAL channel's records from ``start`` to its end, one at a time."""

    def segments(self, topic: str, *, data: bool) -> Iterator[ChannelSegment]:
        """A segments channel's segments in channel order, one at a time; with ``data``, each one's
        file as its chunks carry it."""


class KafkaChannels:
    """:class:`ChannelSource` over Kafka: channels are streamed, never loaded whole."""

    #: how long a segments channel read goes on past the end it read first, for the chunks of a
    #: manifest it already holds
    resume_s = 10.0

    def __init__(self, kafka: KafkaSettings) -> None:
        from shoal.kafka import clients

        self.kafka = kafka
        self._topics: dict[str, Any] | None = None
        self._admin = clients.admin(kafka)

    #: how long a channel's bounds are asked for again while Kafka answers with a transient error
    #: (a partition without a leader for a moment after a broker went down or came back)
    transient_s = 15.0
    transient_pause_s = 1.0

    def bounds(self, topic: str) -> tuple[int, int] | None:
        deadline: float | None = None
        while True:
            try:
                return self._bounds_once(topic)
            except KafkaOperationError as exc:
                now = time.monotonic()
                deadline = now + self.transient_s if deadline is None else deadline
                if not _transient(exc) or now >= deadline:
                    raise
                log.info("%s: %s; asking again", topic, exc)
                self._topics = None  # listed again: the error was the listing's
                time.sleep(self.transient_pause_s)

    def refresh(self) -> None:
        self._topics = None

    def _bounds_once(self, topic: str) -> tuple[int, int] | None:
        from shoal.kafka.admin import log_start_and_end

        if self._topics is None:  # all topics, once: listing never auto-creates one
            self._topics = dict(self._admin.list_topics(timeout=30).topics)
        meta = self._topics.get(topic)
        if meta is None:
            return None
        if meta.error is not None:  # it exists, but its metadata says what cannot be read now
            raise KafkaOperationError(f"{topic}: {meta.error.str()}", meta.error)
        return log_start_and_end(self.kafka, topic)

    def ingest_reader(self) -> IngestReader:
        """How verify reads the ingest topics (:mod:`~shoal_app.cli.verify_ingest`), on this admin client."""
        return kafka_reader(self.kafka, self._admin)

    def time_retained(self, topics: Sequence[str]) -> dict[str, str]:
        """The topics of ``topics`` Kafka deletes records of by time or size (topic -> the settings)."""
        from shoal.kafka.admin import time_retained

        return time_retained(self._admin, topics)

    def wal_records(self, topic: str, start: int) -> Iterator[ChannelRecord]:
        from shoal.kafka.readers import read_wal_channel

        # from ``start`` exactly: a Tail that moved since verify read it is a read to do again (its
        # coverage check would otherwise judge the channel by the old Tail)
        return read_wal_channel(self.kafka, topic, start, exact_start=True)

    def _read_segments(self, topic: str, incomplete: Callable[[], bool]) -> Iterator[Any]:
        """A segments channel's committed messages from its start to the end read when the read
        starts, and on past that end while ``incomplete()`` (for up to :attr:`resume_s` more).

        That end can fall inside the transaction that publishes a segment (a manifest and its chunks:
        the end read while the chunks were still replicating, the manifest read once it committed).
        A read-committed consumer shows a manifest only once its transaction committed, so its
        chunks are on the channel: reading on finds them, where stopping reported the segment
        "undecodable" on a healthy channel."""
        from shoal.kafka.readers import read_to_end

        start, deadline = 0, None
        while True:
            last = None
            for msg in read_to_end(self.kafka, topic, start, what="segments channel", group_id="shoal-verify"):
                last = int(msg.offset() or 0)
                yield msg
            if not incomplete():
                return
            deadline = deadline or time.monotonic() + self.resume_s  # from the end of the first read
            if time.monotonic() >= deadline:
                return
            if last is None:
                time.sleep(0.2)  # nothing new yet: the end read again in a moment
            else:
                start = last + 1

    def segments(self, topic: str, *, data: bool) -> Iterator[ChannelSegment]:
        from shoal.segments.channel import KIND_CHUNK, KIND_MANIFEST, SegmentAssembler, message_kind

        assembler = SegmentAssembler()
        for msg in self._read_segments(topic, lambda: assembler.pending):
            kind, offset = message_kind(msg.headers()), int(msg.offset() or 0)
            if kind == KIND_MANIFEST:
                manifest = WireManifest.from_bytes(msg.value())
                if not data:
                    yield ChannelSegment(offset, manifest)
                    continue
                yield from map(_channel_segment, assembler.manifest(offset, manifest))
            elif kind == KIND_CHUNK:
                done = assembler.chunk(offset, msg.value())
                if done is not None:
                    yield _channel_segment(done)
            else:  # only leaders write here: anything else hides what they wrote
                shown = "no shoal.kind header" if kind is None else f"shoal.kind {kind[:40]!r}"
                raise WireFormatError(f"segments channel {topic}: the message at offset {offset} has {shown}")
        left = assembler.end()
        if left is not None:
            yield _channel_segment(left)


def _channel_segment(segment: AssembledSegment) -> ChannelSegment:
    data = None if segment.chunks is None else b"".join(segment.chunks)
    return ChannelSegment(segment.offset, segment.manifest, data, segment.error)


def _transient(exc: KafkaOperationError) -> bool:
    """A Kafka error that asking again may clear: retriable, or a code Kafka's protocol calls
    retriable that librdkafka reports without the flag (:data:`~shoal.kafka.errors.TRANSIENT_CODES`)."""
    return exc.retriable or (exc.kafka_error is not None and exc.kafka_error.code() in TRANSIENT_CODES)


def _failed(exc: BaseException) -> str | None:
    from confluent_kafka import KafkaException

    return f"{type(exc).__name__}: {exc}" if isinstance(exc, (ShoalError, KafkaException)) else None


def _check_channel(
    channels: ChannelSource, topic: str, missing: str, run: Callable[[WalChannelCheck], T]
) -> tuple[WalChannelCheck, T | None]:
    """``run(out)`` on an existing channel, with its bounds in ``out``; a Kafka or shoal error is the
    check's ``error`` (``ok`` false); a channel that does not exist is ``missing`` (``ok`` true)."""
    out = WalChannelCheck(topic=topic, records=0, tail=None, append=None, ok=True, error=None)
    try:
        bounds = channels.bounds(topic)
        if bounds is None:
            out.error = missing
            return out, None
        out.tail, out.append = bounds
        return out, run(out)
    except Exception as exc:
        if isinstance(exc, ChannelTruncatedError) or (error := _failed(exc)) is None:
            raise  # the Tail moved under the read: verify reads the partition's channels again
        out.ok, out.error = False, error
        return out, None


def check_segments_channel(
    channels: ChannelSource, topic: str, placement_id: int, wal_topic: str, floors: WalFloors | None = None
) -> tuple[WalChannelCheck, SegmentsOrder | None]:
    """The GTID order of one placement's segments channel (:func:`~shoal_app.cli.verify_gtids.check_manifests`).
    With ``floors``, every segment's rows are added to them as they pass (the coverage check)."""
    order = SegmentsOrder()

    def run(out: WalChannelCheck) -> SegmentsOrder:
        try:
            segments = channels.segments(topic, data=floors is not None)
            if floors is not None:
                segments = floors.tap_segments(topic, segments)
            manifests = ((s.offset, s.manifest) for s in segments)
            return check_manifests(
                manifests, topic=topic, placement_id=placement_id, own_wal_topic=wal_topic, out=order
            )
        finally:
            out.records = order.manifests

    return _check_channel(channels, topic, "no channel (this placement never published a segment)", run)


def check_wal_channel(
    channels: ChannelSource,
    topic: str,
    segments: SegmentsOrder | None = None,
    floors: WalFloors | None = None,
    owner: tuple[str, int] | None = None,
    ingest_topic: str | None = None,
    tail_before: int | None = None,
) -> tuple[WalChannelCheck, WalOrder | None]:
    """The GTID hash chain and GTID order of one WAL channel (:func:`~shoal_app.cli.verify_gtids.check_wal_records`),
    from its Tail to its end, streamed: records read, ok, the first error, and the epochs it holds.
    With ``floors``, every record's rows are added to them as they pass (the coverage check).

    ``tail_before``: the Tail read before the segments channels were (:func:`_tail_before`). A Tail
    above it now moved after they were read: the records in between are in neither read (the
    segment that covers them was published after), so this raises ChannelTruncatedError and the
    partition's channels are read again."""
    order = WalOrder()

    def run(out: WalChannelCheck) -> WalOrder:
        assert out.tail is not None
        if tail_before is not None and tail_before < out.tail:
            raise ChannelTruncatedError("WAL channel", topic, tail_before)
        try:
            records: Iterable[ChannelRecord] = channels.wal_records(topic, out.tail)
            if floors is not None:
                records = floors.tap(topic, records)
            return check_wal_records(
                records,
                topic=topic,
                tail=out.tail,
                segments=segments,
                out=order,
                owner=owner,
                ingest_topic=ingest_topic,
            )
        finally:
            out.records = order.records

    return _check_channel(channels, topic, "no channel (this placement never led)", run)


def channel_placements(entry: PartitionEntry) -> list[Placement]:
    """Whose channels verify reads: the partition's servers, then joining and leaving placements (a
    leaving one may have led: its WAL channel holds accepted writes until UNLOAD_FINAL deletes it,
    after FinalizeLeave took it off the list)."""
    out = list(entry.servers)
    out += [p for p in (*entry.servers_joining, *entry.servers_leaving) if p not in out]
    return out


def removed_placements(history: Iterable[MetadataFile], entry: PartitionEntry) -> list[Placement]:
    """Placements an earlier METADATA version listed for ``entry``'s partition and the current one
    does not (a leave finalized, a join cancelled): a removed placement that led keeps its channels,
    and the writes on them, until its UNLOAD_FINAL deletes them, so verify reads them while they
    are there (a channel of theirs that is gone is no loss: UNLOAD_FINAL deletes them one by one)."""
    current = set(channel_placements(entry))
    out: list[Placement] = []
    for file in history:
        for old in file.partitions:
            if old.partition_id == entry.partition_id:
                out += [p for p in channel_placements(old) if p not in current and p not in out]
    return out


def _tail_before(channels: ChannelSource, topic: str) -> int | None:
    """A WAL channel's Tail, read before any segments channel is: a leader publishes a segment
    before it moves a Tail past what the segment covers, so a Tail read first is covered by what the
    segments channels hold when they are read after it. None when unknown: the check then judges the
    channel by the Tail it reads itself (a Tail moved meanwhile can only show a gap, never hide one),
    and the channel counts as present once that read finds it (:attr:`ChannelsRead.present`)."""
    try:
        bounds = channels.bounds(topic)
    except Exception as exc:
        if _failed(exc) is None:
            raise
        return None
    return None if bounds is None else bounds[0]


def check_wal_coverage(
    check: WalChannelCheck, tail: int | None, orders: Iterable[SegmentsOrder], *, retired: bool = False
) -> None:
    """Fail ``check`` when the WAL channel lost records no segment holds (DESIGN.md section 6): its
    Tail above the run of its offsets from 0 that the partition's manifests cover together (records
    deleted before a flush: by retention, by hand, by a wrong Tail; a gap below the highest covered
    offset counts, :func:`~shoal_app.cli.verify_gtids.covered_run`), or the channel gone while
    manifests cover it (unless the partition is ``retired``: its replicas delete their channels one
    by one at UNLOAD_FINAL, :mod:`~shoal_app.cli.verify_retired`)."""
    if not check.ok:
        return
    orders = list(orders)
    highest = max((o.covered_end(check.topic) for o in orders), default=0)
    if check.tail is None:  # the channel does not exist
        if highest > 0 and not retired:
            check.ok = False
            check.error = f"the channel is gone, but segments cover its offsets up to {highest}"
        return
    if check.append is not None and check.append < highest:
        check.ok = False
        check.error = (
            f"the channel ends at {check.append}, below what segments cover of it ({highest}): it was "
            "deleted and created again, or lost records, since they were flushed"
        )
        return
    tail = check.tail if tail is None else min(tail, check.tail)
    covered = covered_run(orders, check.topic)
    if tail > covered:
        check.ok = False
        what = "what segments cover of this channel" if covered == highest else "the first gap in what segments cover"
        check.error = (
            f"Tail {tail} is above {what} ({covered}): "
            f"records from {covered} below {tail} were deleted before any segment held them"
        )


CHANNEL_READS = 3
"""How many times verify reads a partition's channels when the Tail moves under a read."""


@dataclass
class ChannelsRead:
    """What one read of a partition's channels found (:func:`read_channels`)."""

    wal_checks: list[WalChannelCheck] = field(default_factory=list)
    segment_checks: list[WalChannelCheck] = field(default_factory=list)
    epochs: dict[str, set[int]] = field(default_factory=dict)
    wal_orders: list[WalOrder] = field(default_factory=list)
    floors: WalFloors | None = None
    present: set[str] = field(default_factory=set)
    """The WAL channels that exist (their Tail was read)."""
    looked: set[str] = field(default_factory=set)
    """The WAL channels whose Tail was asked for (``present`` and those not there)."""
    error: str | None = None
    """Set when no read was whole: the Tail moved under each of :data:`CHANNEL_READS` reads."""
    _merged: tuple[pa.Table | None, list[str]] | None = field(default=None, init=False, repr=False, compare=False)

    def merged(self) -> tuple[pa.Table | None, list[str]]:
        """:func:`floor_problems` of :attr:`floors` (which must be set), computed once: it sorts and
        merges every channel row, and the first read's result is asked for twice."""
        assert self.floors is not None
        if self._merged is None:
            self._merged = floor_problems(self.floors)
        newest, problems = self._merged
        return newest, list(problems)

    def problems(self) -> list[str]:
        """What this read found wrong by itself: failed channel checks, GTIDs out of order across
        channels, channel rows that do not decode or conflict (:func:`floor_problems`)."""
        found = [f"{c.topic}: {c.error}" for c in (*self.wal_checks, *self.segment_checks) if not c.ok]
        order = self.error or shared_epochs(self.epochs) or accept_order(self.wal_orders)
        found += [] if order is None else [order]
        return found + ([] if self.floors is None else self.merged()[1])


def read_channels(
    source: ChannelSource,
    topics: TopicNames,
    entry: PartitionEntry,
    floors: WalFloors | None,
    *,
    retired: bool = False,
    removed: Sequence[Placement] = (),
) -> ChannelsRead:
    """Read a partition's channels: segments channels first, then WAL channels, each from its Tail.

    A Tail that moves while a channel is read (ChannelTruncatedError: the read saw a prefix, never
    the channel) makes every channel of the partition read again from scratch, with empty
    ``floors``: rows of a half-read channel must not stand for the channel, nor be counted twice.
    """
    for attempt in range(CHANNEL_READS):
        fresh = floors if attempt == 0 or floors is None else floors.fresh()
        try:
            return _read_channels_once(source, topics, entry, fresh, retired=retired, removed=removed)
        except ChannelTruncatedError as exc:
            last = exc
    return ChannelsRead(error=f"{last} (in each of {CHANNEL_READS} reads in a row)")


def _read_channels_once(
    source: ChannelSource,
    topics: TopicNames,
    entry: PartitionEntry,
    floors: WalFloors | None,
    *,
    retired: bool,
    removed: Sequence[Placement],
) -> ChannelsRead:
    out = ChannelsRead(floors=floors)
    source.refresh()
    placements = channel_placements(entry)
    placements += [p for p in removed if p not in placements]
    wal_topics = [topics.wal(entry.partition_id, p.placement_id) for p in placements]
    tails = {topic: _tail_before(source, topic) for topic in wal_topics}
    out.present = {topic for topic, tail in tails.items() if tail is not None}
    out.looked = set(tails)
    orders: list[SegmentsOrder] = []
    for p, wal_topic in zip(placements, wal_topics, strict=True):
        seg_check, order = check_segments_channel(
            source, topics.segments(entry.partition_id, p.placement_id), p.placement_id, wal_topic, floors
        )
        out.segment_checks.append(seg_check)
        orders.append(order if order is not None else SegmentsOrder())
    for p, wal_topic, order in zip(placements, wal_topics, orders, strict=True):
        owner = (entry.partition_id, p.placement_id)
        wal_check, wal_order = check_wal_channel(
            source, wal_topic, order, floors, owner, topics.ingest(entry.partition_id), tails[wal_topic]
        )
        check_wal_coverage(wal_check, tails[wal_topic], orders, retired=retired or p in removed)
        out.wal_checks.append(wal_check)
        if wal_check.tail is not None:  # it exists: also when asking for its Tail first failed
            out.present.add(wal_topic)
        if wal_order is not None:
            out.epochs[wal_topic] = wal_order.epochs
            out.wal_orders.append(wal_order)
        if order.epochs:  # the placement's own flushes keep its terms' epochs after the Tail
            out.epochs[wal_topic] = out.epochs.get(wal_topic, set()) | order.epochs
    return out


def outside_range(replicas: list[ReplicaDescription], key_range: KeyRange, keyspace: Keyspace) -> str | None:
    """Which replicas hold a partition key outside ``key_range`` (their lowest and highest keys against
    its bounds), or None when every one stays inside. A bound that is not a key of ``keyspace`` is out,
    and so is a replica that holds rows but whose node's description leaves out its lowest or highest
    key: what cannot be checked does not pass."""
    wrong = []
    for r in replicas:
        if r.row_count > 0 and (r.key_min is None or r.key_max is None):
            wrong.append(
                f"{r.server_id}#{r.placement_id} holds {r.row_count} rows but does not say its lowest and highest keys"
            )
            continue
        for what, key in (("lowest", r.key_min), ("highest", r.key_max)):
            if key is None:
                continue
            try:
                inside = key_range.contains(keyspace.encode(key))
            except InvalidKeyError:
                inside = False
            if not inside:
                wrong.append(f"{r.server_id}#{r.placement_id} holds {what} key {key!r:.40}")
    if not wrong:
        return None
    return f"keys outside {key_range.describe(keyspace)}: " + "; ".join(wrong)


def coverage(
    read: ChannelsRead,
    replicas: list[ReplicaDescription],
    rows: Rows,
    read_again: Callable[[WalFloors], ChannelsRead] | None = None,
    epoch_now: Callable[[], tuple[int, str | None]] | None = None,
    metadata_changed: Callable[[], bool] | None = None,
) -> str | None:
    """Which replicas miss a write still on the partition's channels (``read``, with its floors;
    :mod:`~shoal_app.cli.verify_coverage`), or hold a version newer than the channels' that they
    cannot hold (:mod:`~shoal_app.cli.verify_newer`: the channels read again with
    ``read_again(floors)`` after the scans, ``epoch_now()`` the partition's epoch in ZooKeeper and
    its leader's WAL channel); None when neither. ``rows(server_id, partition_id)``: that replica's
    scan with its GTID columns. ``metadata_changed()``: whether the table's METADATA moved on since
    verify read it; the second read's findings are then not judged (a split finalized or a placement
    left meanwhile, and its UNLOAD_FINAL deleted channels the versions were on), and verify says so."""
    floors = read.floors
    assert floors is not None
    newest, problems = read.merged()
    firsts = judged_epochs(read)  # also the epochs whose WAL records the Tail truncated entirely
    keys = list(floors.table.primary_key)
    bounds = lowest_and_highest_gtid(newest)
    high = None if bounds is None else bounds[1]
    newer: dict[str, pa.Table] = {}
    led: list[tuple[int | None, int | None, str | None]] = []  # ZooKeeper's epoch and its leader's WAL, asked once
    gone: list[str] = []
    unjudged: list[str] = []

    def seen(who: str, scan: pa.Table) -> None:
        candidates = newer_than_floors(scan, newest, keys)
        if candidates.num_rows == 0:
            return
        if not led:
            try:
                led.append(_led_epoch(epoch_now, read.present, read.looked))
            except ShoalError as exc:  # fail closed: a blip must not pass what the epoch would refuse
                led.append((None, None, None))
                unjudged.append(
                    f"the partition's epoch in ZooKeeper could not be read: {type(exc).__name__}: {exc}; "
                    "versions newer than the channels were not judged, verify again"
                )
        if unjudged:
            return
        present_epoch, gone_epoch, _wal = led[0]
        if gone_epoch is not None:  # a leader creates its WAL channel before it stamps a row
            lost = pc.sum(pc.equal(candidates.column(EPOCH_COLUMN), gone_epoch)).as_py() or 0
            if lost:
                gone.append(
                    f"{who} holds {lost} version(s) of epoch {gone_epoch}, ZooKeeper's current one, that no "
                    "segment holds, and that leader's WAL channel is gone"
                )
        # versions of ZooKeeper's epoch are read again also when its leader's channel was not there:
        # a leader elected meanwhile creates it, and they are judged on it then
        epoch = present_epoch if present_epoch is not None else gone_epoch
        later = to_read_again(candidates, firsts, high, epoch)
        if later.num_rows:
            newer[who] = later

    problems += replicas_missing(
        floors.empty() if newest is None else newest,  # no write on the channels: scanned all the same
        replicas,
        rows,
        keys,
        seen=seen,
    )
    problems += unjudged
    if gone and read_again is None and not (metadata_changed is not None and _changed(metadata_changed)):
        problems += gone
    if newer and read_again is not None:
        by = [*keys, EPOCH_COLUMN, SEQ_COLUMN]
        wanted = pa.concat_tables([t.select(by) for t in newer.values()], promote_options="permissive")
        again = read_again(WalFloors(floors.table, keep=wanted))
        if again.error is not None or again.floors is None:
            problems.append(f"versions newer than the channels' could not be checked: {again.error}")
            return "; ".join(problems)
        before = set(read.problems())  # what the first read found is reported by the checks above
        late = [f"read again after the scans: {p}" for p in again.problems() if p not in before]
        if gone and led[0][2] not in again.present:  # still gone: nothing can hold those versions
            late += gone
        late += newer_problems(newer, again.floors, firsts, epoch_now, again.present)
        if late and metadata_changed is not None and _changed(metadata_changed):
            late = [
                "METADATA changed while verify read the channels again after the scans (a split or a "
                "placement's leave finalized): the versions newer than the channels were not judged; verify again"
            ]
        problems += late
    return "; ".join(problems) if problems else None


_NO_RECORD = 2**63 - 1
"""A first sequence number no WAL record has: its epoch is known (judged), no version of it accounted."""


def judged_epochs(read: ChannelsRead) -> dict[int, int]:
    """:attr:`WalFloors.first_seq` of ``read``, plus every epoch a placement whose WAL channel exists
    stamped rows in (its own flushes hold it) with no WAL record of it left, at :data:`_NO_RECORD`:
    each write of such an epoch is on that channel from its Tail or in a segment read
    (:func:`check_wal_coverage`), so a version of it newer than the channels' is judged like one below
    the first record of an epoch the WAL still holds (:func:`~shoal_app.cli.verify_newer.known_epoch`)."""
    assert read.floors is not None
    firsts = dict(read.floors.first_seq)
    for topic, epochs in read.epochs.items():
        if topic in read.present:
            for e in epochs:
                firsts.setdefault(e, _NO_RECORD)
    return firsts


def _covered(checked: bool, missing: str | None, unscanned: Sequence[str]) -> bool | None:
    """``covered`` of a partition: False when a scanned replica misses a write, True when every
    replica was scanned and none does, None when not checked (on every replica)."""
    if not checked:
        return None
    if missing is not None:
        return False
    return None if unscanned else True


def _led_epoch(
    epoch_now: Callable[[], tuple[int, str | None]] | None, present: set[str], looked: set[str]
) -> tuple[int | None, int | None, str | None]:
    """ZooKeeper's epoch for the partition when its leader's WAL channel is one of ``present``; that
    epoch when the channel is one of ``looked`` (read for the partition) but was not there; the channel."""
    if epoch_now is None:
        return None, None, None
    epoch, leader_wal = _epoch_now(epoch_now)
    if leader_wal is None or leader_wal not in looked:
        return None, None, None
    return (epoch, None, leader_wal) if leader_wal in present else (None, epoch, leader_wal)


EPOCH_READ_TRIES = 3


def _epoch_now(epoch_now: Callable[[], tuple[int, str | None]]) -> tuple[int, str | None]:
    """``epoch_now()``, asked again (0.5 s apart) when ZooKeeper does not answer; the last ShoalError
    when it never does. Without the epoch, versions newer than the channels cannot be judged: they
    are reported as not checked (a mismatch), never taken as agreeing."""
    for attempt in range(EPOCH_READ_TRIES):
        try:
            return epoch_now()
        except ShoalError:
            if attempt == EPOCH_READ_TRIES - 1:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def _changed(metadata_changed: Callable[[], bool]) -> bool:
    try:
        return metadata_changed()
    except ShoalError:  # ZooKeeper not answering: judged as read, the partition may be verified again
        return False


def verify(
    client: MetadataClient,
    table: str,
    *,
    channels: ChannelSource | None = None,
    describe: Callable[[str], list[dict[str, Any]]] | None = None,
    rows: Callable[[str, str], pa.Table] | None = None,
    retention: Callable[[Sequence[str]], Mapping[str, str]] | None = None,
    epoch: Callable[[str], tuple[int, int | None]] | None = None,
    metadata_moved: Callable[[], bool] | None = None,
    ingest: IngestReader | None = None,
) -> Verification:
    """Every partition of ``table``: do its replicas agree, are its channels' hash chains intact and
    their GTIDs in order, does every replica hold every write still on its channels, and does Kafka
    keep every record of them until shoal truncates it?
    ``describe(server_id)``: that node's ``describe replica`` of ``table``; ``rows(server_id,
    partition_id)``: that replica's rows with their GTID columns (the coverage check is skipped when
    ``describe`` is given without ``rows``); ``retention(topics)``: the topics Kafka deletes records
    of by time or size (Kafka's settings by default; skipped when ``channels`` is given without it);
    ``epoch(partition_id)``: the partition's epoch in ZooKeeper and its leader's placement id (read
    there by default; not checked when ``channels`` is given without it); ``metadata_moved()``:
    whether the table's METADATA changed since verify read it (its ZooKeeper head by default);
    ``ingest``: how the ingest topics' ends and leader groups' offsets are read
    (:mod:`~shoal_app.cli.verify_ingest`; Kafka by default, skipped when ``channels`` is given
    without it).

    The retention check is what keeps the others honest: a channel whose records Kafka deletes by
    time looks like one the Tail truncated, so writes gone that way would pass every other check."""
    from metadata.election import read_epoch
    from metadata.node_registry import lookup_node
    from shoal.scan import OPEN_SCAN, ScanRequest, describe_remote, scan_remote

    # one read of METADATA: the listed partitions and the retired or removed ones from the same
    # chain (a split finalized between two reads would leave its children out of both)
    history = client.coordinator.history(table)
    file = history[-1]
    metadata_changed = metadata_moved
    if metadata_changed is None and channels is None:

        def metadata_changed() -> bool:
            return bool(client.coordinator.head(table).metadata_txnid != file.txnid)

    topics = TopicNames(client.config.topic_prefix)
    source: ChannelSource
    retained_of: Callable[[Sequence[str]], Mapping[str, str]] | None
    ingest_reader: IngestReader | None
    if channels is None:
        kafka_source = KafkaChannels(client.config.kafka)
        source, retained_of = kafka_source, retention or kafka_source.time_retained
        ingest_reader = ingest or kafka_source.ingest_reader()
    else:
        source, retained_of, ingest_reader = channels, retention, ingest
    scan = client.config.connection.scan if client.config.kafka is not None else OPEN_SCAN
    epoch_of = epoch
    if epoch_of is None and channels is None:

        def epoch_of(partition_id: str) -> tuple[int, int | None]:
            record = read_epoch(client.zk, client.layout, partition_id)
            return record.epoch, record.placement_id

    def epoch_now(partition_id: str) -> tuple[int, str | None]:
        assert epoch_of is not None
        epoch_number, placement_id = epoch_of(partition_id)
        return epoch_number, None if placement_id is None else topics.wal(partition_id, placement_id)

    def remote(server: str) -> list[dict[str, Any]]:
        location = lookup_node(client.zk, client.layout, server)
        if scan == OPEN_SCAN:  # an open cluster: the call as before
            return describe_remote(location, table)
        return describe_remote(location, table, scan=scan)

    def remote_rows(server: str, partition_id: str) -> pa.Table:
        location = lookup_node(client.zk, client.layout, server)
        request = ScanRequest(table, partition_id=partition_id, system=True, deleted=True)
        return scan_remote(location, request, scan=scan)

    describe_node = describe or remote
    rows_of = rows if rows is not None else (remote_rows if describe is None else None)
    described: dict[str, list[dict[str, Any]] | str] = {}
    partitions = []
    listed: list[tuple[KeyRange, list[ReplicaDescription]]] = []
    listed_epochs: list[tuple[KeyRange, str, list[set[int]]]] = []
    for entry, key_range in file.ranges():
        replicas: list[ReplicaError | ReplicaDescription] = []
        for placement in entry.servers:
            server = placement.server_id
            if server not in described:
                try:
                    described[server] = describe_node(server)
                except ShoalError as exc:
                    described[server] = f"{type(exc).__name__}: {exc}"
            found = described[server]
            base = {"server_id": server, "placement_id": placement.placement_id}
            if isinstance(found, str):
                replicas.append(ReplicaError(server_id=server, placement_id=placement.placement_id, error=found))
                continue
            mine = [
                d
                for d in found
                if d.get("partition_id") == entry.partition_id and d.get("placement_id") == placement.placement_id
            ]
            replicas.append(
                ReplicaDescription.model_validate({**base, **mine[0]})
                if mine
                else ReplicaError(
                    server_id=server, placement_id=placement.placement_id, error="the node does not hold this replica"
                )
            )
        described_ok = [r for r in replicas if isinstance(r, ReplicaDescription)]
        states = {(r.row_count, r.content_hash) for r in described_ok}
        agree = len(described_ok) == len(replicas) and len(states) == 1
        range_error = outside_range(described_ok, key_range, file.table.keyspace)
        chains = {tuple(r.chain) if isinstance(r, ReplicaDescription) else () for r in replicas}
        removed = removed_placements(history, entry)
        read = read_channels(source, topics, entry, None if rows_of is None else WalFloors(file.table), removed=removed)
        wal_checks, segment_checks, floors = read.wal_checks, read.segment_checks, read.floors
        shared = read.error or shared_epochs(read.epochs) or accept_order(read.wal_orders)
        missing = (
            None
            if floors is None or rows_of is None
            else coverage(
                read,
                described_ok,
                rows_of,
                partial(read_channels, source, topics, entry, removed=removed),
                None if epoch_of is None else partial(epoch_now, entry.partition_id),
                metadata_changed,
            )
        )
        unscanned = [f"{r.server_id}#{r.placement_id}" for r in replicas if isinstance(r, ReplicaError)]
        listed.append((key_range, described_ok))
        listed_epochs.append((key_range, entry.partition_id, list(read.epochs.values())))
        partitions.append(
            PartitionVerification(
                partition_id=entry.partition_id,
                agree=agree,
                chains_equal=len(chains) == 1,
                replicas=replicas,
                wal_channels=wal_checks,
                wal_chains_ok=all(c.ok for c in wal_checks),
                segments_channels=segment_checks,
                gtids_ok=shared is None and all(c.ok for c in (*wal_checks, *segment_checks)),
                gtid_error=shared,
                in_range=range_error is None,
                range_error=range_error,
                covered=_covered(floors is not None, missing, unscanned),
                coverage_error=missing
                if missing is not None or not unscanned or floors is None
                else f"not checked on {', '.join(unscanned)}: not described, so not scanned",
            )
        )
    split_parents = retired_partitions(history)
    # newest first: a retired partition's epochs are compared with those of every partition that
    # holds its keys after it, listed or retired since (a child that split in turn)
    later_epochs = list(listed_epochs)
    retired = []
    for r in reversed(split_parents):
        seen: dict[str, set[int]] = {}
        retired.append(
            verify_retired(
                source,
                topics,
                file.table,
                r.entry,
                r.key_range,
                listed,
                rows_of,
                later_epochs,
                removed=removed_placements(history, r.entry),
                epochs_out=seen,
            )
        )
        later_epochs.append((r.key_range, r.entry.partition_id, list(seen.values())))
    retired.reverse()
    retained = dict(retained_of(_truncated_topics(topics, history))) if retained_of is not None else {}
    ingest_topics = [
        IngestTopic(e.partition_id, topics.ingest(e.partition_id), topics.leader_group(e.partition_id))
        for e in [*file.partitions, *(r.entry for r in split_parents)]
    ]
    waiting = [] if ingest_reader is None else unaccepted(ingest_topics, ingest_reader)
    ok = all(p.agree and p.wal_chains_ok and p.gtids_ok and p.in_range and p.covered is not False for p in partitions)
    ok = ok and all(r.channels_ok and r.covered is not False for r in retired) and not retained and not waiting
    return Verification(
        table=table, ok=ok, partitions=partitions, retired=retired, time_retained=retained, unaccepted=waiting
    )


def _truncated_topics(topics: TopicNames, history: Sequence[MetadataFile]) -> list[str]:
    """Every topic of the table that shoal truncates itself: each partition's ingest topic and each
    placement's WAL and segments channels, over every METADATA version (retired ones too)."""
    out: set[str] = set()
    for file in history:
        for entry in file.partitions:
            out.add(topics.ingest(entry.partition_id))
            for p in entry.all_placements():
                out.update(
                    (
                        topics.wal(entry.partition_id, p.placement_id),
                        topics.segments(entry.partition_id, p.placement_id),
                    )
                )
    return sorted(out)


def verify_retired(
    source: ChannelSource,
    topics: TopicNames,
    table: TableDefinition,
    entry: PartitionEntry,
    key_range: KeyRange,
    listed: Sequence[tuple[KeyRange, Sequence[ReplicaDescription]]],
    rows: Rows | None,
    listed_epochs: Sequence[tuple[KeyRange, str, Iterable[set[int]]]] = (),
    removed: Sequence[Placement] = (),
    epochs_out: dict[str, set[int]] | None = None,
) -> RetiredVerification:
    """A retired partition's channels, every write on them checked on the listed partitions'
    replicas that hold its key now, and those partitions' epochs above its own
    (:mod:`~shoal_app.cli.verify_retired`)."""
    read = read_channels(
        source, topics, entry, WalFloors(table) if rows is not None else None, retired=True, removed=removed
    )
    if epochs_out is not None:
        epochs_out.update(read.epochs)
    shared = (
        read.error
        or shared_epochs(read.epochs)
        or accept_order(read.wal_orders)
        or epochs_not_above(key_range, read.epochs.values(), listed_epochs, table.keyspace)
    )
    floors = read.floors
    missing = (
        None
        if floors is None or rows is None
        else retired_coverage(floors, listed, rows, table.keyspace, key_range, first_seq=judged_epochs(read))
    )
    return RetiredVerification(
        partition_id=entry.partition_id,
        key_range=key_range.describe(table.keyspace),
        wal_channels=read.wal_checks,
        segments_channels=read.segment_checks,
        channels_ok=shared is None and all(c.ok for c in (*read.wal_checks, *read.segment_checks)),
        gtid_error=shared,
        covered=None if floors is None or rows is None else missing is None,
        coverage_error=missing,
    )


def verify_table(client: MetadataClient, table: str) -> dict[str, Any]:
    """:func:`verify` as the JSON ``shoal verify -o json`` prints."""
    return verify(client, table).to_json()


def _first_error(r: RetiredVerification) -> str:
    return next((f"{c.topic}: {c.error}" for c in (*r.wal_channels, *r.segments_channels) if not c.ok), "")


@click.command("verify")
@click.argument("table_name", type=TABLE_NAME)
@output_option
@connection_options
def verify_command(table_name: str, output: str, **conn: Any) -> None:
    """Check that every replica of TABLE holds the same rows, every WAL channel's hash chain is intact
    and every channel's GTIDs are in order."""
    try:
        with MetadataClient(metadata_config(conn)) as client:
            report = verify(client, table_name)
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    if output == "json":
        emit(report)
    else:
        show(f"table {table_name}: {'OK' if report.ok else 'MISMATCH'}")
        for p in report.partitions:
            show(
                f"  partition {p.partition_id}: replicas {'agree' if p.agree else 'DIFFER'}, "
                f"WAL chains {'ok' if p.wal_chains_ok else 'BROKEN'}, "
                f"GTIDs {'in order' if p.gtids_ok else 'OUT OF ORDER'}"
                + (f" ({p.gtid_error})" if p.gtid_error else "")
                + ("" if p.in_range else f", KEYS OUT OF RANGE ({p.range_error})")
                + (f", WRITES MISSING ({p.coverage_error})" if p.covered is False else "")
                + (
                    ""
                    if p.chains_equal
                    else ", segment chains differ (the same rows in other segments, or some only in a"
                    " replica's WAL overlay: expected while segments replicate)"
                )
            )
            replicas = new_table("replica", "rows", "content hash", "chain", right=("rows",))
            for r in p.replicas:
                who = f"{r.server_id}#{r.placement_id}"
                if isinstance(r, ReplicaError):
                    replicas.add_row(who, "-", f"error: {r.error}", "")
                else:
                    chain = f"{len(r.chain)} segments, root {r.root}"
                    replicas.add_row(who, str(r.row_count), r.content_hash[:16], chain)
            channels = new_table("WAL channel", "records", "[tail, append)", "chain", right=("records",))
            for c in (*p.wal_channels, *p.segments_channels):
                state = "ok" if c.ok else "BROKEN"
                channels.add_row(
                    c.topic, str(c.records), f"[{c.tail}, {c.append})", state + (f" ({c.error})" if c.error else "")
                )
            show(replicas, channels)
        for topic, settings in sorted(report.time_retained.items()):
            show(
                f"  topic {topic}: Kafka deletes its records by {settings}; "
                "shoal needs retention.ms=-1 and retention.bytes=-1"
            )
        for u in report.unaccepted:
            show(
                f"  ingest topic {u.topic}: "
                + (
                    f"could not be checked ({u.error})"
                    if u.error
                    else f"WRITES NOT READABLE YET: a transaction open at offset {u.held_back_from} holds back the "
                    f"acknowledged records up to offset {u.high_water} (verify again once it ends; an orphaned one "
                    "is aborted at its transaction timeout)"
                    if u.held_back_from is not None
                    else f"WRITES NOT ACCEPTED: acknowledged records up to offset {u.last_unaccepted}, its leader "
                    f"accepted up to {u.accepted_to if u.accepted_to is not None else 'none'} (is a leader running? "
                    "verify again once it is)"
                )
            )
        for retired in report.retired:
            left = [c for c in (*retired.wal_channels, *retired.segments_channels) if c.tail is not None]
            show(
                f"  retired partition {retired.partition_id} {retired.key_range}: {len(left)} channel(s) left, "
                + ("intact" if retired.channels_ok else f"BROKEN ({retired.gtid_error or _first_error(retired)})")
                + (f", WRITES MISSING ({retired.coverage_error})" if retired.covered is False else "")
            )
    if not report.ok:
        sys.exit(1)
