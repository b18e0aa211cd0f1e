"""``shoal verify``'s GTID checks, pure: the order of GTIDs on every channel of a partition (DESIGN.md section 10).

GTIDs of a partition strictly increase. What a reader of the channels can check, record by record
and without holding a channel in memory (each check consumes an iterator once):

- a WAL channel (:func:`check_wal_records`): the hash chain, and every record's GTID after every row
  of the record before it (:func:`shoal.wire.records.verify_chain`); and every record beyond what a
  segment of the same placement covers has a GTID above that segment's highest GTID (a leader that
  restarted its seqs after its WAL was truncated is caught here, not only by a broken link);
- a segments channel (:func:`check_manifests`): manifests in channel order never go back to an older
  writer epoch (leader terms), no segment holds a GTID from an epoch after its writer's, and each
  minor flushed from the placement's own WAL starts above the previous one's highest GTID (merged,
  adopted and compacted rows keep older GTIDs, so only flushes of new own-WAL offsets are ordered: a
  segment whose own range starts below what earlier ones covered holds rows already flushed, e.g.
  the placement's own unreferenced segment merged back in a later term, source 3.5);
- across a partition's WAL channels (:func:`shared_epochs`): no two placements wrote with the same
  epoch (no two leaders of a partition share one);
- across a partition's WAL channels, in the order the leaders accepted them (:func:`accept_order`):
  each WAL record names the ingest offset it accepted, and the leaders of a partition accept its
  ingest topic in offset order, each new leader from its predecessor's committed offset (DESIGN.md
  section 4). So ordered by ingest offset, every record's GTIDs are above the record before it
  (whichever leader wrote it), and no ingest offset is accepted twice. A leader that took an epoch
  older than its predecessor's, or a zombie that committed after its successor started, breaks it;
  the per-channel checks cannot see either, and its writes would lose to older ones everywhere alike.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain, pairwise

from shoal.errors import ShoalError
from shoal.kafka.readers import ChannelRecord
from shoal.wire.records import GENESIS_HASH, Gtid, verify_chain
from shoal.wire.records import ManifestRecord as WireManifest


class GtidOrderError(ShoalError):
    """A channel's GTIDs are out of order: ``topic``, the ``offset`` of the record or manifest, the
    offending ``gtid`` (None when the epoch alone is wrong) and the ``reason``."""

    def __init__(self, topic: str, offset: int, gtid: Gtid | None, reason: str) -> None:
        where = f"{topic}@{offset}" + ("" if gtid is None else f" (gtid {gtid})")
        super().__init__(f"GTID order broken at {where}: {reason}")
        self.topic = topic
        self.offset = offset
        self.gtid = gtid
        self.reason = reason


@dataclass
class SegmentsOrder:
    """What :func:`check_manifests` learned: the manifests read, and per end offset of the placement's
    own WAL channel the highest GTID of the segments covering up to it (the floor of later records)."""

    manifests: int = 0
    floors: list[tuple[int, Gtid]] = field(default_factory=list)
    """(end offset on the own WAL channel, highest GTID up to it), ascending by end offset."""
    ends: list[int] = field(default_factory=list)
    covered: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """Per WAL channel, the ``[start, end)`` offsets of it the manifests on this channel cover (own or
    received segments, minors or majors), in channel order: with the other channels' (:func:`covered_run`),
    how far that WAL channel's Tail may be."""
    epochs: set[int] = field(default_factory=set)
    """The epochs of the GTIDs the placement's own segments of its own WAL hold (leader terms in which
    this placement stamped rows, which no other placement may have had: seen here even once the Tail
    truncated its WAL records)."""

    def covered_end(self, wal_topic: str) -> int:
        """One past the highest offset of ``wal_topic`` a manifest on this channel covers (0 if none)."""
        return max((end for _, end in self.covered.get(wal_topic, ())), default=0)

    def floor_at(self, offset: int) -> Gtid | None:
        """The highest GTID of the own WAL's segments that cover only offsets below ``offset``."""
        i = bisect.bisect_right(self.ends, offset)
        return self.floors[i - 1][1] if i else None


def covered_run(orders: Iterable[SegmentsOrder], wal_topic: str) -> int:
    """One past the end of the run of ``wal_topic``'s offsets from 0 that the manifests of ``orders``
    cover together without a gap: every record below it is in some segment. A leader's flushes cover
    its channel from where the last one ended, and an adoption from where the read started
    (:mod:`storage_node.replication.adopt`), so a gap is offsets no segment holds."""
    end = 0
    for start, stop in sorted(r for o in orders for r in o.covered.get(wal_topic, ())):
        if start > end:
            break
        end = max(end, stop)
    return end


def check_manifests(
    manifests: Iterable[tuple[int, WireManifest]],
    *,
    topic: str,
    placement_id: int,
    own_wal_topic: str,
    out: SegmentsOrder | None = None,
) -> SegmentsOrder:
    """Check the GTID order of placement ``placement_id``'s segments channel (``(offset, manifest)`` in
    channel order); raise :class:`GtidOrderError` at the first manifest out of order. Its own segments
    (not those it received from other placements and published again) are ordered by writer epoch."""
    out = SegmentsOrder() if out is None else out
    seen: dict[str, str] = {}
    epoch: int | None = None
    flushed: Gtid | None = None
    high: Gtid | None = None
    covered_end = 0  # one past the highest own-WAL offset the segments so far cover
    for offset, m in manifests:
        out.manifests += 1
        if m.segment_id in seen:
            if seen[m.segment_id] != m.checksum:
                why = (
                    f"segment {m.segment_id} published again with another checksum"
                    f" ({m.checksum}, was {seen[m.segment_id]})"
                )
                raise GtidOrderError(topic, offset, None, why)
            continue  # published again after a restart: the same segment
        seen[m.segment_id] = m.checksum
        for r in m.covered_wal_offsets:
            out.covered.setdefault(r.topic, []).append((r.start_offset, r.end_offset))
        if m.max_gtid is not None and m.max_gtid.epoch > m.epoch:
            why = f"segment {m.segment_id} holds a GTID of an epoch after its writer's {m.epoch}"
            raise GtidOrderError(topic, offset, m.max_gtid, why)
        if m.placement_id != placement_id:
            continue  # a segment of another placement this one received and published again
        if epoch is not None and m.epoch < epoch:
            raise GtidOrderError(topic, offset, None, f"writer epoch {m.epoch} after {epoch}: a leader term went back")
        epoch = m.epoch
        if m.max_gtid is None or m.min_gtid is None:
            out.epochs.add(m.epoch)
            continue  # published before manifests carried their GTID range
        own = [r for r in m.covered_wal_offsets if r.topic == own_wal_topic]
        if not own or len(own) != len(m.covered_wal_offsets):
            continue  # merged or adopted rows keep the GTIDs other placements wrote them with
        # the terms this placement stamped its own rows in: a major or a merge written in a later term
        # keeps its rows' older GTIDs, so its writer epoch may be a term that stamped no row
        out.epochs.update((m.min_gtid.epoch, m.max_gtid.epoch))
        start, end = min(r.start_offset for r in own), max(r.end_offset for r in own)
        # a flush of new own-WAL offsets (a compaction also holds the rows before it; a segment starting
        # below what is covered holds rows flushed before: merged back, keeping their GTIDs)
        if not m.is_major and start >= covered_end:
            if flushed is not None and m.min_gtid <= flushed:
                raise GtidOrderError(
                    topic,
                    offset,
                    m.min_gtid,
                    f"segment {m.segment_id} starts at or below the previous flushed segment's highest GTID {flushed}",
                )
            flushed = m.max_gtid
        high = m.max_gtid if high is None else max(high, m.max_gtid)
        covered_end = max(covered_end, end)
        out.floors.append((end, high))
    out.floors.sort()
    out.ends = [end for end, _ in out.floors]
    return out


@dataclass(frozen=True)
class Accepted:
    """One WAL record as :func:`accept_order` orders it: the ingest offset it accepted, its GTIDs, where it is."""

    ingest_offset: int
    first: Gtid
    last: Gtid
    topic: str
    offset: int


@dataclass
class WalOrder:
    records: int = 0
    epochs: set[int] = field(default_factory=set)
    accepted: list[Accepted] = field(default_factory=list)
    """The records that name an offset of the partition's ingest topic (``ingest_topic``)."""


def check_wal_records(
    records: Iterable[ChannelRecord],
    *,
    topic: str,
    tail: int,
    segments: SegmentsOrder | None = None,
    out: WalOrder | None = None,
    owner: tuple[str, int] | None = None,
    ingest_topic: str | None = None,
) -> WalOrder:
    """Check one WAL channel read from its Tail ``tail`` (one pass, nothing held): the hash chain and
    GTID order (from the genesis hash when nothing was truncated), and every record above the floor
    its placement's segments set. Raises HashChainError or :class:`GtidOrderError`; ``out`` (records
    read, epochs seen; pass one to see how far a failed check got) is filled as the records pass.
    ``owner``: the channel's (partition_id, placement_id), which every record must name; the records
    naming an offset of ``ingest_topic`` are kept in ``out.accepted`` for :func:`accept_order`."""
    out = WalOrder() if out is None else out

    def checked() -> Iterator[ChannelRecord]:
        for item in records:
            gtid = item.record.gtid
            if owner is not None and (item.record.partition_id, item.record.placement_id) != owner:
                why = (
                    f"the record names partition {item.record.partition_id} placement {item.record.placement_id}, "
                    f"not this channel's {owner[0]} placement {owner[1]}"
                )
                raise GtidOrderError(topic, item.offset, gtid, why)
            floor = segments.floor_at(item.offset) if segments is not None else None
            if floor is not None and gtid <= floor:
                raise GtidOrderError(
                    topic, item.offset, gtid, f"not above {floor}, the highest GTID of the segments before it"
                )
            out.records += 1
            out.epochs.add(gtid.epoch)
            for ingest in item.record.ingest_offsets:
                if ingest.topic == ingest_topic:
                    out.accepted.append(Accepted(ingest.offset, gtid, item.record.last_gtid, topic, item.offset))
            yield item

    items = checked()
    first = next(items, None)
    if first is None:
        return out
    # from the genesis hash only when the read began at the channel's first record: a Tail that
    # moved between reading it and reading the records starts the read later (a healthy channel)
    genesis = tail == 0 and first.offset == 0
    verify_chain(chain([first.record], (item.record for item in items)), prev_hash=GENESIS_HASH if genesis else None)
    return out


def shared_epochs(epochs: Mapping[str, set[int]]) -> str | None:
    """The first epoch two WAL channels of one partition both wrote with, as a reason (None: disjoint)."""
    owner: dict[int, str] = {}
    for topic, seen in epochs.items():
        for epoch in sorted(seen):
            if epoch in owner:
                return f"epoch {epoch} was used by two leaders: {owner[epoch]} and {topic}"
            owner[epoch] = topic
    return None


def accept_order(orders: Iterable[WalOrder]) -> str | None:
    """The first break of accept order across a partition's WAL channels, as a reason (None: none).

    Ordered by the ingest offset each record accepted, every record's first GTID must be above the
    last GTID of the record before it, and no ingest offset may be accepted twice."""
    accepted = sorted((a for o in orders for a in o.accepted), key=lambda a: a.ingest_offset)
    for before, after in pairwise(accepted):
        where = f"{after.topic}@{after.offset}"
        if after.ingest_offset == before.ingest_offset:
            return (
                f"ingest offset {after.ingest_offset} was accepted twice: by {before.topic}@{before.offset} "
                f"(gtid {before.first}) and by {where} (gtid {after.first})"
            )
        if after.first <= before.last:
            return (
                f"ingest offset {after.ingest_offset} was accepted with gtid {after.first} ({where}), not above "
                f"gtid {before.last} of ingest offset {before.ingest_offset} accepted before it "
                f"({before.topic}@{before.offset}): a leader wrote with an epoch older than its predecessor's"
            )
    return None
