"""The chain side of compaction: which segments to fold, the new major's entry, and its commit.

Source: EventQL segment based replication (seed 000), section 3.1 (compaction: base = the most
recent included minor; up to MAX_SEGMENT_HISTORY included ids; old segments are deleted later by
the replication procedure; only the leader compacts). DESIGN.md section 5 (the leader commits a
compaction, fenced by its epoch). Reading and merging the rows is merge.py; pure here.
"""

from __future__ import annotations

from shoal.segments.chain import MAX_SEGMENT_HISTORY, SegmentChain, SegmentEntry
from shoal.segments.coverage import union
from shoal.segments.errors import ChainError, CompactionConflictError, MajorContentError


def segments_to_compact(chain: SegmentChain) -> tuple[SegmentEntry, ...]:
    """The latest major and the minors after it, oldest first; empty if root is already a major.

    Their rows, LWW-merged, are the new major's content (the previous major must be folded too:
    everything below the new major becomes weakly referenced and is deleted).
    """
    run = chain.since_latest_major()
    if len(run) <= 1:
        return ()
    return run


def compaction_entry(chain: SegmentChain, segment_id: str, *, placement_id: int, epoch: int) -> SegmentEntry:
    """The entry of a major segment folding :func:`segments_to_compact` (source 3.1).

    ``base_segment_id`` is the newest folded minor (the root); ``included_segment_ids`` are the
    folded ids newest first, followed by the previous major's included ids, cut to
    MAX_SEGMENT_HISTORY (the newest ids are the likeliest to be offered again); ``covered`` is the
    union of the folded segments' coverage.
    """
    folded = segments_to_compact(chain)
    if not folded:
        raise ChainError("nothing to compact: the root is a major segment (or the chain is empty)")
    newest_first = [s.segment_id for s in reversed(folded)]
    history = newest_first + [i for i in folded[0].included_segment_ids if i not in newest_first]
    return SegmentEntry(
        segment_id=segment_id,
        base_segment_id=folded[-1].segment_id,
        placement_id=placement_id,
        epoch=epoch,
        is_major=True,
        included_segment_ids=tuple(history[:MAX_SEGMENT_HISTORY]),
        covered=union(*(s.covered for s in folded)),
    )


def commit_compaction(
    chain: SegmentChain, major: SegmentEntry, *, leader_epoch: int, check_included: bool = True
) -> SegmentChain:
    """Add the compacted major as the new root, if it is still valid.

    Refused (CompactionConflictError) when the major was not made by this epoch, when the chain
    holds a segment from a newer epoch (this leader is stale), or when root moved since the
    compaction started (new minors would fall off the chain and need a merge; recompute instead).
    Refused (MajorContentError) when its ``included_segment_ids`` are not :func:`compaction_entry`'s
    (unless ``check_included`` is off: the leader's first pass, before it checks the rows): the chain
    treats every id listed there as folded into the major (never merged again, its file deleted as
    weakly referenced, source 3.5), so one it did not fold would lose that segment's rows.
    """
    if not major.is_major:
        raise ChainError(f"segment {major.segment_id} is not a major segment")
    if major.epoch != leader_epoch:
        raise CompactionConflictError(f"compaction made in epoch {major.epoch}, the leader is in epoch {leader_epoch}")
    newest_epoch = max((s.epoch for s in chain.walk()), default=0)
    if newest_epoch > leader_epoch:
        raise CompactionConflictError(
            f"the chain holds a segment of epoch {newest_epoch}, newer than the leader's epoch {leader_epoch}"
        )
    if major.base_segment_id != chain.root:
        raise CompactionConflictError(
            f"root moved to {chain.root} since the compaction based on {major.base_segment_id} started"
        )
    if not check_included:
        return chain.fast_forward(major)
    folds = (
        compaction_entry(
            chain, major.segment_id, placement_id=major.placement_id, epoch=major.epoch
        ).included_segment_ids
        if segments_to_compact(chain)
        else ()
    )
    if major.included_segment_ids != folds:
        listed, folded = set(major.included_segment_ids), set(folds)
        raise MajorContentError(
            major.segment_id,
            missing=0,
            extra=0,
            example=(
                f"it lists {len(major.included_segment_ids)} included segment(s), the segments it replaces make "
                f"{len(folds)}; listed but not folded: {sorted(listed - folded)[:3]}, "
                f"folded but not listed: {sorted(folded - listed)[:3]}"
                + ("" if listed != folded else " (same ids, another order)")
            ),
        )
    return chain.fast_forward(major)
