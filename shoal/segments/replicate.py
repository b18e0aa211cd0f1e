"""The replication procedures of source 3.5 and 3.8 as pure plans: which segment gets what action.

Source: EventQL segment based replication (seed 000), section 3.5 (``replicate_partition``,
``replicate_partition_to``, the follower procedure), 3.7 (JOIN_FINALIZE), 3.8 (UNLOAD).
DESIGN.md sections 3, 5 and 6.

The source's ``acked_servers`` list is, in shoal, the committed offset of a consumer group derived
from a placement id (DESIGN.md section 3). The functions here therefore take "the ids this
placement has acknowledged" as a set; the caller builds it from Kafka, always for the *current*
placement (a re-assigned replica has a new placement id, hence a new group and no acks: the
second ABA case of source 3.6).

Deleting and merging are the caller's. MERGE_THEN_DELETE means: insert every row of the segment as
a write keeping its GTID, and delete the file and its entry only after those rows are durable (in
the WAL channel or in a new segment), so a crash in between simply merges it again (idempotent).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from shoal.segments.chain import SegmentChain, SegmentEntry
from shoal.segments.coverage import covers


class ActionKind(enum.Enum):
    KEEP = "keep"
    DELETE = "delete"
    MERGE_THEN_DELETE = "merge_then_delete"
    PUSH = "push"


@dataclass(frozen=True, slots=True)
class SegmentAction:
    segment_id: str
    kind: ActionKind
    reason: str


def replicate_partition(chain: SegmentChain) -> tuple[SegmentAction, ...]:
    """Source 3.5 ``replicate_partition(P)``, run by the leader; oldest segment first.

    For each segment S of the partition: referenced and weakly referenced -> DELETE; referenced and
    not weak -> KEEP; not referenced -> MERGE_THEN_DELETE. Weak segments (folded into a newer
    major, or listed in its included ids) are already replicated in the form of that major: their
    bytes stay on the segments channel until Tail passes them, so no follower needs the file.
    """
    out: list[SegmentAction] = []
    for s in chain.entries.values():
        sid = s.segment_id
        if chain.is_referenced(sid):
            if chain.is_reference_weak(sid):
                out.append(SegmentAction(sid, ActionKind.DELETE, "weakly referenced: folded into a newer segment"))
            else:
                out.append(SegmentAction(sid, ActionKind.KEEP, "on the chain above the latest major"))
        else:
            out.append(SegmentAction(sid, ActionKind.MERGE_THEN_DELETE, "not referenced by the chain"))
    return tuple(out)


def follower_replication(chain: SegmentChain, *, acked_by_leader: AbstractSet[str]) -> tuple[SegmentAction, ...]:
    """Source 3.5, the follower procedure; oldest segment first.

    ``acked_by_leader``: ids the *current leader placement* holds: segments received from it
    (source: "add the leader to the acked_servers for the new segment entry") and segments it
    acknowledged on this replica's segments channel.

    Not acked by the leader -> PUSH (publish it for the leader, which merges it). Acked and
    referenced: weak -> DELETE, else KEEP. Acked but not referenced (left below a fast-forward-added
    major) is a case the source leaves open: the leader holds its rows durably, so it is deleted as
    soon as the local chain's WAL coverage contains its coverage (its rows are visible again), and
    kept until then, so reads on this replica never lose rows in between.
    """
    coverage = chain.coverage()
    out: list[SegmentAction] = []
    for s in chain.entries.values():
        sid = s.segment_id
        if sid not in acked_by_leader:
            out.append(SegmentAction(sid, ActionKind.PUSH, "the leader placement has not acknowledged it"))
        elif chain.is_referenced(sid):
            if chain.is_reference_weak(sid):
                out.append(SegmentAction(sid, ActionKind.DELETE, "acknowledged and weakly referenced"))
            else:
                out.append(SegmentAction(sid, ActionKind.KEEP, "on the chain above the latest major"))
        elif s.covered and covers(coverage, s.covered):
            out.append(SegmentAction(sid, ActionKind.DELETE, "acknowledged; its WAL ranges are covered by the chain"))
        else:
            out.append(SegmentAction(sid, ActionKind.KEEP, "acknowledged but not yet covered by the local chain"))
    return tuple(out)


def segments_to_offer(chain: SegmentChain, *, acked: AbstractSet[str]) -> tuple[SegmentEntry, ...]:
    """Source 3.5 ``replicate_partition_to(P, R)``: segments from the latest major to root not in ``acked``.

    Oldest first, in the order they must be sent (source 3.4). Over Kafka the leader does not offer
    per replica; it publishes each segment once on its segments channel. Pass the ids already on
    its own channel to get what a (new) leader must republish so that a joining or out-of-order
    replica can catch up from the channel alone; pass one replica's acknowledged ids to see what
    that replica still lacks.
    """
    return tuple(s for s in chain.since_latest_major() if s.segment_id not in acked)


def replica_caught_up(chain: SegmentChain, *, acked: AbstractSet[str]) -> bool:
    """Source 3.7: the leader may JOIN_FINALIZE once the joining placement acknowledged the root."""
    return chain.root is None or chain.root in acked


def unload_pending(
    chain: SegmentChain, *, acked_by_target: Mapping[int, AbstractSet[str]]
) -> dict[int, tuple[str, ...]]:
    """Source 3.8, the UNLOAD procedure: per split-target placement, the segments it has not acked.

    An empty result means every target acknowledged every segment: the partition may move to
    UNLOAD_FINAL.
    """
    pending: dict[int, tuple[str, ...]] = {}
    for target, acked in acked_by_target.items():
        missing = tuple(sid for sid in chain.entries if sid not in acked)
        if missing:
            pending[target] = missing
    return pending
