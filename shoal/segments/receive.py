"""What a replica does with a segment manifest it receives (source 3.5, "Upon receiving a segment").

Source: EventQL segment based replication (seed 000), section 3.5 (receive procedure), 3.6 (ABA),
4.1 (decline reasons). DESIGN.md section 6 (followers consume the leader's segments channel).

Pure: the decision only; fetching chunks, writing the file and committing the consumer offset are
the caller's. The Kafka adaptation of the source's offer/decline exchange:

============================  =====================================  ================================
outcome                       source                                 caller (Kafka)
============================  =====================================  ================================
``SEGMENT_EXISTS``            decline with EXISTS                    skip the chunks, ack (commit)
``FAST_FORWARD``              base == root: fast-forward-add         receive, verify, fsync, add, ack
``FAST_FORWARD_ADD``          unreferenced major: fast-forward-add   receive, verify, fsync, add, ack
``MERGE`` (leader side)       accept and merge                       receive, keep detached, ack
``OUT_OF_ORDER``              decline with OUT_OF_ORDER              no ack; seek to latest major, replay
``INVALID``                   decline with INVALID                   no ack; report (corrupt/foreign)
``OVERLOADED``                decline with OVERLOADED                no ack; pause the consumer
============================  =====================================  ================================

INFLIGHT has no counterpart: one Kafka partition is read by one consumer, in order, so the same
segment id is never received twice at once. The sender check ("is the sender the leader?") becomes
the placement check: a manifest is only accepted from the placement whose channel we follow, and
that channel's consumer group is derived from that placement id (source 3.6, second ABA case).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from shoal.errors import InvalidIdError
from shoal.ids import validate_partition_id, validate_placement_id
from shoal.segments.chain import SegmentChain, SegmentEntry
from shoal.segments.coverage import WalRange
from shoal.segments.errors import InvalidSegmentEntryError, SegmentArgumentError

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ReceiveOutcome(enum.Enum):
    """The answer to a received manifest (source 4.1 decline reasons, plus the accept cases)."""

    SEGMENT_EXISTS = "SEGMENT_EXISTS"
    FAST_FORWARD = "FAST_FORWARD"
    FAST_FORWARD_ADD = "FAST_FORWARD_ADD"
    MERGE = "MERGE"
    OUT_OF_ORDER = "OUT_OF_ORDER"
    INVALID = "INVALID"
    OVERLOADED = "OVERLOADED"

    @property
    def needs_data(self) -> bool:
        """The segment's chunks must be received and made durable before acking."""
        return self in (ReceiveOutcome.FAST_FORWARD, ReceiveOutcome.FAST_FORWARD_ADD, ReceiveOutcome.MERGE)

    @property
    def acks(self) -> bool:
        """The consumer offset past this manifest may be committed (once the data is durable)."""
        return self is ReceiveOutcome.SEGMENT_EXISTS or self.needs_data


class ManifestLike(Protocol):
    """What a decoded segment manifest must provide (the wire codec is another module's)."""

    @property
    def partition_id(self) -> str: ...
    @property
    def sender_placement_id(self) -> int:
        """The placement that published the manifest (the owner of the segments channel)."""
        ...

    @property
    def segment_id(self) -> str: ...
    @property
    def base_segment_id(self) -> str | None: ...
    @property
    def included_segment_ids(self) -> Sequence[str]: ...
    @property
    def is_major(self) -> bool: ...
    @property
    def placement_id(self) -> int:
        """The placement that created the segment."""
        ...

    @property
    def epoch(self) -> int: ...
    @property
    def covered(self) -> Sequence[WalRange]: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def row_count(self) -> int: ...
    @property
    def sha256(self) -> str: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PlainManifest:
    """A plain :class:`ManifestLike` (tests, and a reference for the wire codec)."""

    partition_id: str
    sender_placement_id: int
    segment_id: str
    base_segment_id: str | None
    placement_id: int
    epoch: int
    size_bytes: int
    row_count: int
    sha256: str
    is_major: bool = False
    included_segment_ids: tuple[str, ...] = ()
    covered: tuple[WalRange, ...] = ()

    @classmethod
    def for_entry(
        cls,
        entry: SegmentEntry,
        *,
        partition_id: str,
        sender_placement_id: int,
        size_bytes: int,
        row_count: int,
        sha256: str,
    ) -> PlainManifest:
        """The manifest a placement publishes for one of its chain's entries."""
        return cls(
            partition_id=partition_id,
            sender_placement_id=sender_placement_id,
            segment_id=entry.segment_id,
            base_segment_id=entry.base_segment_id,
            placement_id=entry.placement_id,
            epoch=entry.epoch,
            is_major=entry.is_major,
            included_segment_ids=entry.included_segment_ids,
            covered=entry.covered,
            size_bytes=size_bytes,
            row_count=row_count,
            sha256=sha256,
        )


def entry_from_manifest(manifest: ManifestLike) -> SegmentEntry:
    """Validate a manifest's chain fields and file fields; return its segment entry.

    Raises InvalidSegmentEntryError for any malformed id, count, size or checksum.
    """
    for name in ("size_bytes", "row_count"):
        value = getattr(manifest, name, None)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
            raise InvalidSegmentEntryError(f"manifest {name} must be a non-negative integer, got {value!r:.40}")
    sha = getattr(manifest, "sha256", None)
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        raise InvalidSegmentEntryError(f"manifest sha256 must be 64 lowercase hex digits, got {sha!r:.80}")
    try:
        included = manifest.included_segment_ids
        covered = manifest.covered
        if isinstance(included, str | bytes) or isinstance(covered, str | bytes):
            raise InvalidSegmentEntryError("manifest included_segment_ids and covered must be sequences")
        return SegmentEntry(
            segment_id=manifest.segment_id,
            base_segment_id=manifest.base_segment_id,
            placement_id=manifest.placement_id,
            epoch=manifest.epoch,
            is_major=manifest.is_major,
            included_segment_ids=tuple(included),
            covered=tuple(covered),
        )
    except (AttributeError, TypeError) as exc:
        raise InvalidSegmentEntryError(f"manifest is missing or has malformed fields: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ReceiveDecision:
    """An outcome with a human-readable reason (for logs and the deadletter/report path)."""

    outcome: ReceiveOutcome
    reason: str
    entry: SegmentEntry | None = None


def _check_limits(in_flight_bytes: int, max_in_flight_bytes: int) -> None:
    if in_flight_bytes < 0 or max_in_flight_bytes <= 0:
        raise SegmentArgumentError(
            f"need in_flight_bytes >= 0 and max_in_flight_bytes > 0, got {in_flight_bytes}, {max_in_flight_bytes}"
        )


def _overloaded(size_bytes: int, in_flight_bytes: int, max_in_flight_bytes: int) -> bool:
    """Backpressure (source: MAX_REPL_INCOMING_SEGMENTS, counted in bytes here).

    A segment alone larger than the limit is still received when nothing else is in flight, so
    a big major can never block its partition forever.
    """
    return in_flight_bytes > 0 and in_flight_bytes + size_bytes > max_in_flight_bytes


def _validate(
    chain: SegmentChain, manifest: ManifestLike, expected_partition_id: str, allowed_senders: frozenset[int]
) -> ReceiveDecision | SegmentEntry:
    """INVALID for foreign or corrupt manifests; otherwise the manifest's entry."""
    if getattr(manifest, "partition_id", None) != expected_partition_id:
        return ReceiveDecision(
            ReceiveOutcome.INVALID,
            f"manifest is for partition {getattr(manifest, 'partition_id', None)!r:.40}, not {expected_partition_id}",
        )
    sender = getattr(manifest, "sender_placement_id", None)
    if sender not in allowed_senders:
        return ReceiveDecision(
            ReceiveOutcome.INVALID,
            f"manifest published by placement {sender!r:.40}, expected one of {sorted(allowed_senders)} "
            "(a stale or foreign placement: source 3.6)",
        )
    try:
        entry = entry_from_manifest(manifest)
    except InvalidSegmentEntryError as exc:
        return ReceiveDecision(ReceiveOutcome.INVALID, f"malformed manifest: {exc}")
    present = chain.get(entry.segment_id)
    if present is not None and present != entry:
        return ReceiveDecision(
            ReceiveOutcome.INVALID, f"segment {entry.segment_id} is already in the list with different fields", entry
        )
    return entry


def decide_receive_detailed(
    chain: SegmentChain,
    manifest: ManifestLike,
    *,
    expected_partition_id: str,
    expected_placement_id: int,
    in_flight_bytes: int,
    max_in_flight_bytes: int,
) -> ReceiveDecision:
    """Source 3.5, receive procedure, branch "we are not the leader" (a follower of the sender).

    ``expected_placement_id`` is the placement of the current leader, whose segments channel this
    replica consumes. A manifest not from that placement, for another partition, or malformed ->
    INVALID (source: "If no [the sender is not the leader], decline with INVALID"); referenced ->
    SEGMENT_EXISTS; base == root -> FAST_FORWARD; an unreferenced major -> FAST_FORWARD_ADD;
    otherwise OUT_OF_ORDER. The source tests base == root before is_referenced; in a valid chain
    both orders give the same answer (a referenced segment is never based on the root), and testing
    is_referenced first makes a replay after a crash idempotent. OVERLOADED is only answered when
    data would be received (skipping an existing segment costs nothing).
    """
    _check_limits(in_flight_bytes, max_in_flight_bytes)
    validate_partition_id(expected_partition_id)
    validate_placement_id(expected_placement_id)
    checked = _validate(chain, manifest, expected_partition_id, frozenset({expected_placement_id}))
    if isinstance(checked, ReceiveDecision):
        return checked
    entry = checked
    if chain.is_referenced(entry.segment_id):
        return ReceiveDecision(ReceiveOutcome.SEGMENT_EXISTS, "already referenced by the local chain", entry)
    if entry.base_segment_id == chain.root:
        outcome, reason = ReceiveOutcome.FAST_FORWARD, "base is the local root"
    elif entry.is_major:
        outcome, reason = ReceiveOutcome.FAST_FORWARD_ADD, "an unreferenced major segment"
    else:
        return ReceiveDecision(
            ReceiveOutcome.OUT_OF_ORDER,
            f"minor segment based on {entry.base_segment_id}, local root is {chain.root} (source 3.6)",
            entry,
        )
    if _overloaded(manifest.size_bytes, in_flight_bytes, max_in_flight_bytes):
        return ReceiveDecision(
            ReceiveOutcome.OVERLOADED, f"{in_flight_bytes} bytes in flight, limit {max_in_flight_bytes}", entry
        )
    return ReceiveDecision(outcome, reason, entry)


def decide_receive(
    chain: SegmentChain,
    manifest: ManifestLike,
    *,
    expected_partition_id: str,
    expected_placement_id: int,
    in_flight_bytes: int,
    max_in_flight_bytes: int,
) -> ReceiveOutcome:
    """:func:`decide_receive_detailed` without the reason."""
    return decide_receive_detailed(
        chain,
        manifest,
        expected_partition_id=expected_partition_id,
        expected_placement_id=expected_placement_id,
        in_flight_bytes=in_flight_bytes,
        max_in_flight_bytes=max_in_flight_bytes,
    ).outcome


def decide_leader_receive(
    chain: SegmentChain,
    manifest: ManifestLike,
    *,
    expected_partition_id: str,
    replica_placement_ids: frozenset[int],
    loading: bool,
    in_flight_bytes: int,
    max_in_flight_bytes: int,
) -> ReceiveDecision:
    """Source 3.5, receive procedure, branch "we are the leader": a segment pushed by a replica.

    Used when another placement of the partition (e.g. an old leader, DESIGN.md section 7) pushes
    its unreplicated segments. ``replica_placement_ids`` are the other current placements of the
    partition. LOADING with a NULL root -> FAST_FORWARD_ADD; referenced or already here awaiting
    its merge -> SEGMENT_EXISTS; otherwise MERGE (keep it detached, merge it, then delete it).
    """
    _check_limits(in_flight_bytes, max_in_flight_bytes)
    validate_partition_id(expected_partition_id)
    try:
        for p in replica_placement_ids:
            validate_placement_id(p)
    except InvalidIdError as exc:
        raise SegmentArgumentError(f"replica_placement_ids: {exc}") from exc
    checked = _validate(chain, manifest, expected_partition_id, frozenset(replica_placement_ids))
    if isinstance(checked, ReceiveDecision):
        return checked
    entry = checked
    if loading and chain.root is None:
        outcome, reason = ReceiveOutcome.FAST_FORWARD_ADD, "LOADING with a NULL root"
    elif chain.is_referenced(entry.segment_id) or entry.segment_id in chain:
        return ReceiveDecision(ReceiveOutcome.SEGMENT_EXISTS, "referenced, or here and awaiting its merge", entry)
    else:
        outcome, reason = ReceiveOutcome.MERGE, "not referenced by the chain: merge it"
    if _overloaded(manifest.size_bytes, in_flight_bytes, max_in_flight_bytes):
        return ReceiveDecision(
            ReceiveOutcome.OVERLOADED, f"{in_flight_bytes} bytes in flight, limit {max_in_flight_bytes}", entry
        )
    return ReceiveDecision(outcome, reason, entry)
