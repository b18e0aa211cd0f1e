"""Replication procedures (seed 000, 3.5, 3.7, 3.8) and compaction (3.1) as pure plans."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shoal.segments.chain import MAX_SEGMENT_HISTORY, SegmentChain, SegmentEntry
from shoal.segments.compaction import commit_compaction, compaction_entry, segments_to_compact
from shoal.segments.coverage import WalRange
from shoal.segments.errors import ChainError, CompactionConflictError, MajorContentError
from shoal.segments.replicate import (
    ActionKind,
    SegmentAction,
    follower_replication,
    replica_caught_up,
    replicate_partition,
    segments_to_offer,
    unload_pending,
)

P = "ab" * 16


def sid(n: int) -> str:
    return f"{n:032x}"


def cov(a: int, b: int, placement: int = 1) -> tuple[WalRange, ...]:
    return (WalRange(P, placement, a, b),)


def seg(
    n: int, base: int | None, *, major: bool = False, epoch: int = 1, covered: tuple[WalRange, ...] = ()
) -> SegmentEntry:
    return SegmentEntry(
        segment_id=sid(n),
        base_segment_id=None if base is None else sid(base),
        placement_id=1,
        epoch=epoch,
        is_major=major,
        covered=covered,
    )


def chain_minors(n: int) -> SegmentChain:
    """1 (major) <- 2 <- ... <- n, segment i covering WAL offsets [10(i-1), 10i)."""
    chain = SegmentChain().fast_forward(seg(1, None, major=True, covered=cov(0, 10)))
    for i in range(2, n + 1):
        chain = chain.fast_forward(seg(i, i - 1, covered=cov(10 * (i - 1), 10 * i)))
    return chain


def kinds(actions: tuple[SegmentAction, ...]) -> dict[str, ActionKind]:
    return {a.segment_id: a.kind for a in actions}


class TestLeaderReplicatePartition:
    def test_linear_chain_keeps_everything(self) -> None:
        assert set(kinds(replicate_partition(chain_minors(4))).values()) == {ActionKind.KEEP}

    def test_after_compaction_the_folded_segments_are_deleted(self) -> None:
        chain = chain_minors(3)
        chain = commit_compaction(chain, compaction_entry(chain, sid(10), placement_id=1, epoch=1), leader_epoch=1)
        chain = chain.fast_forward(seg(11, 10))
        plan = replicate_partition(chain)
        assert [a.segment_id for a in plan] == [sid(1), sid(2), sid(3), sid(10), sid(11)]  # oldest first
        assert kinds(plan) == {
            sid(1): ActionKind.DELETE,
            sid(2): ActionKind.DELETE,
            sid(3): ActionKind.DELETE,
            sid(10): ActionKind.KEEP,
            sid(11): ActionKind.KEEP,
        }
        # deleting them keeps the chain answering the same way (history through included ids)
        pruned = chain.without(a.segment_id for a in plan if a.kind is ActionKind.DELETE)
        assert all(pruned.is_referenced(sid(i)) for i in (1, 2, 3))
        assert set(kinds(replicate_partition(pruned)).values()) == {ActionKind.KEEP}

    def test_unreferenced_segments_are_merged_then_deleted(self) -> None:
        chain = chain_minors(2).add_detached(seg(40, 39))  # pushed by an old leader
        assert kinds(replicate_partition(chain))[sid(40)] is ActionKind.MERGE_THEN_DELETE

    def test_segments_left_below_a_fast_forward_added_major_are_merged(self) -> None:
        chain = chain_minors(2).fast_forward_add(seg(50, 49, major=True))
        k = kinds(replicate_partition(chain))
        assert k[sid(1)] is ActionKind.MERGE_THEN_DELETE and k[sid(2)] is ActionKind.MERGE_THEN_DELETE
        assert k[sid(50)] is ActionKind.KEEP


class TestFollowerProcedure:
    def test_not_acked_by_the_leader_is_pushed(self) -> None:
        chain = chain_minors(3)
        k = kinds(follower_replication(chain, acked_by_leader={sid(1), sid(2)}))
        assert k[sid(3)] is ActionKind.PUSH
        assert k[sid(1)] is ActionKind.KEEP and k[sid(2)] is ActionKind.KEEP

    def test_acked_and_weak_is_deleted(self) -> None:
        chain = chain_minors(3)
        chain = chain.fast_forward(compaction_entry(chain, sid(10), placement_id=1, epoch=1))
        k = kinds(follower_replication(chain, acked_by_leader={sid(i) for i in (1, 2, 3, 10)}))
        assert k == {
            sid(1): ActionKind.DELETE,
            sid(2): ActionKind.DELETE,
            sid(3): ActionKind.DELETE,
            sid(10): ActionKind.KEEP,
        }

    def test_acked_but_unreferenced_waits_until_covered(self) -> None:
        chain = chain_minors(2)  # covers [0, 20)
        # the leader's major arrives and is fast-forward-added: 1 and 2 fall off the chain
        not_covering = chain.fast_forward_add(seg(60, 59, major=True, covered=cov(0, 10)))
        k = kinds(follower_replication(not_covering, acked_by_leader={sid(1), sid(2), sid(60)}))
        assert k[sid(1)] is ActionKind.DELETE  # [0, 10) is in the new chain
        assert k[sid(2)] is ActionKind.KEEP  # [10, 20) is not yet: keep serving it
        covering = chain.fast_forward_add(seg(61, 59, major=True, covered=cov(0, 30)))
        k = kinds(follower_replication(covering, acked_by_leader={sid(1), sid(2), sid(61)}))
        assert k[sid(1)] is ActionKind.DELETE and k[sid(2)] is ActionKind.DELETE


class TestOffers:
    def test_offer_from_latest_major_oldest_first(self) -> None:
        chain = chain_minors(3)
        chain = chain.fast_forward(compaction_entry(chain, sid(10), placement_id=1, epoch=1))
        chain = chain.fast_forward(seg(11, 10)).fast_forward(seg(12, 11))
        assert [e.segment_id for e in segments_to_offer(chain, acked=set())] == [sid(10), sid(11), sid(12)]
        assert [e.segment_id for e in segments_to_offer(chain, acked={sid(10)})] == [sid(11), sid(12)]
        assert segments_to_offer(SegmentChain(), acked=set()) == ()

    def test_join_finalize_once_root_acked(self) -> None:
        chain = chain_minors(3)
        assert not replica_caught_up(chain, acked={sid(1), sid(2)})
        assert replica_caught_up(chain, acked={sid(3)})
        assert replica_caught_up(SegmentChain(), acked=set())

    def test_unload_until_every_target_acked_everything(self) -> None:
        chain = chain_minors(2)
        assert unload_pending(chain, acked_by_target={21: {sid(1)}, 22: {sid(1), sid(2)}}) == {21: (sid(2),)}
        assert unload_pending(chain, acked_by_target={21: {sid(1), sid(2)}}) == {}


class TestCompaction:
    def test_segments_to_compact(self) -> None:
        assert segments_to_compact(SegmentChain()) == ()
        assert segments_to_compact(chain_minors(1)) == ()  # root is a major
        assert [e.segment_id for e in segments_to_compact(chain_minors(3))] == [sid(1), sid(2), sid(3)]

    def test_compaction_entry(self) -> None:
        chain = chain_minors(3)
        e = compaction_entry(chain, sid(10), placement_id=1, epoch=2)
        assert e.is_major and e.base_segment_id == sid(3)  # the most recent included minor
        assert e.included_segment_ids == (sid(3), sid(2), sid(1))
        assert e.covered == cov(0, 30)
        with pytest.raises(ChainError):
            compaction_entry(chain_minors(1), sid(10), placement_id=1, epoch=1)

    def test_included_history_carries_over_and_is_capped(self) -> None:
        chain = chain_minors(MAX_SEGMENT_HISTORY - 2)
        chain = chain.fast_forward(compaction_entry(chain, sid(1000), placement_id=1, epoch=1))
        for i in range(1001, 1006):
            chain = chain.fast_forward(seg(i, i - 1))
        e = compaction_entry(chain, sid(2000), placement_id=1, epoch=1)
        assert len(e.included_segment_ids) == MAX_SEGMENT_HISTORY
        assert e.included_segment_ids[:6] == tuple(sid(i) for i in (1005, 1004, 1003, 1002, 1001, 1000))
        assert e.included_segment_ids[6] == sid(MAX_SEGMENT_HISTORY - 2)  # newest of the previous history
        assert sid(1) not in e.included_segment_ids  # the oldest fell out

    def test_commit_is_fenced(self) -> None:
        chain = chain_minors(3)
        major = compaction_entry(chain, sid(10), placement_id=1, epoch=2)
        with pytest.raises(CompactionConflictError, match="epoch"):
            commit_compaction(chain, major, leader_epoch=3)
        moved = chain.fast_forward(seg(4, 3))
        with pytest.raises(CompactionConflictError, match="root moved"):
            commit_compaction(moved, major, leader_epoch=2)
        newer = chain.fast_forward(seg(4, 3, epoch=5))
        stale = compaction_entry(newer, sid(11), placement_id=1, epoch=2)
        with pytest.raises(CompactionConflictError, match="newer"):
            commit_compaction(newer, stale, leader_epoch=2)
        with pytest.raises(ChainError):
            commit_compaction(chain, seg(12, 3), leader_epoch=1)
        assert commit_compaction(chain, major, leader_epoch=2).root == sid(10)

    def test_a_major_listing_a_segment_it_did_not_fold_is_refused(self) -> None:
        """Every id in a major's included list counts as folded into it: never merged again, its
        file deleted as weakly referenced (source 3.5). A detached segment waiting for its merge,
        listed there by a faulty compaction, would lose its rows (its content check passes: the
        major holds exactly what it replaced)."""
        chain = chain_minors(3)
        detached = sid(9)
        with_detached = SegmentChain.of([*chain.entries.values(), seg(9, 2)], chain.root)
        major = compaction_entry(with_detached, sid(10), placement_id=1, epoch=2)
        assert detached not in major.included_segment_ids
        for wrong in (
            (*major.included_segment_ids, detached),  # one it did not fold
            major.included_segment_ids[1:],  # one it folded left out
            tuple(reversed(major.included_segment_ids)),  # another order: the cap keeps the newest
        ):
            bad = replace(major, included_segment_ids=wrong)
            with pytest.raises(MajorContentError, match="included segment"):
                commit_compaction(with_detached, bad, leader_epoch=2)
        after = commit_compaction(with_detached, major, leader_epoch=2)
        assert after.root == sid(10) and not after.is_referenced(detached)
        # on a major root there is nothing to fold: a major based on it is refused, not a ChainError
        forged = replace(major, segment_id=sid(11), base_segment_id=sid(10))
        with pytest.raises(MajorContentError, match="included segment"):
            commit_compaction(after, forged, leader_epoch=2)
        assert commit_compaction(after, forged, leader_epoch=2, check_included=False).root == sid(11)
