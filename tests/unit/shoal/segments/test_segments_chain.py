"""Chain procedures of EventQL segment replication (seed 000, sections 3, 3.1, 3.3, 3.5)."""

from __future__ import annotations

import random

import pytest

from shoal.segments.chain import MAX_SEGMENT_HISTORY, SegmentChain, SegmentEntry
from shoal.segments.coverage import WalRange
from shoal.segments.errors import ChainError, CorruptChainError, InvalidSegmentEntryError

P = "ab" * 16


def sid(n: int) -> str:
    return f"{n:032x}"


def major(n: int, base: int | None = None, included: tuple[int, ...] = (), epoch: int = 1) -> SegmentEntry:
    return SegmentEntry(
        segment_id=sid(n),
        base_segment_id=None if base is None else sid(base),
        placement_id=1,
        epoch=epoch,
        is_major=True,
        included_segment_ids=tuple(sid(i) for i in included),
    )


def minor(n: int, base: int, epoch: int = 1) -> SegmentEntry:
    return SegmentEntry(segment_id=sid(n), base_segment_id=sid(base), placement_id=1, epoch=epoch)


def linear(n: int) -> SegmentChain:
    """1 (major, base NULL) <- 2 <- ... <- n (root), built by fast-forward (source section 3)."""
    chain = SegmentChain().fast_forward(major(1))
    for i in range(2, n + 1):
        chain = chain.fast_forward(minor(i, i - 1))
    return chain


# -- a literal transcription of source 3.5, used as the oracle on lists that hold only the chain --


def literal_is_referenced(entries_old_to_new: list[SegmentEntry], root: str | None, search: str) -> bool:
    next_id = root
    for s in reversed(entries_old_to_new):
        if s.segment_id == next_id:
            if search in s.included_segment_ids:
                return True
            if s.segment_id == search:
                return True
            next_id = s.base_segment_id
        else:
            return False
    return False


def literal_is_reference_weak(entries_old_to_new: list[SegmentEntry], root: str | None, search: str) -> bool:
    next_id = root
    for s in reversed(entries_old_to_new):
        if s.segment_id == next_id:
            if search in s.included_segment_ids:
                return True
            if s.segment_id == search:
                return False
            if s.is_major:
                return True
            next_id = s.base_segment_id
        else:
            return True
    return True


class TestEntry:
    def test_first_segment_must_be_major(self) -> None:
        with pytest.raises(InvalidSegmentEntryError, match="must be a major"):
            SegmentEntry(segment_id=sid(1), base_segment_id=None, placement_id=1, epoch=0)

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"segment_id": "../../etc/passwd"},
            {"segment_id": sid(0xABC).upper()},
            {"base_segment_id": "x"},
            {"base_segment_id": sid(5)},  # itself
            {"placement_id": 0},
            {"placement_id": True},
            {"epoch": -1},
            {"epoch": 1.5},
            {"is_major": 1},
            {"included_segment_ids": (sid(5),)},  # itself
            {"included_segment_ids": (sid(2), sid(2))},
            {"included_segment_ids": ("nothex",)},
            {"included_segment_ids": tuple(sid(100 + i) for i in range(MAX_SEGMENT_HISTORY + 1))},
            {"covered": ({"partition_id": P},)},
        ],
    )
    def test_invalid_fields(self, kwargs: dict[str, object]) -> None:
        base: dict[str, object] = {
            "segment_id": sid(5),
            "base_segment_id": sid(4),
            "placement_id": 1,
            "epoch": 0,
            "is_major": True,
        }
        base.update(kwargs)
        with pytest.raises(InvalidSegmentEntryError):
            SegmentEntry(**base)  # type: ignore[arg-type]

    def test_minor_cannot_include(self) -> None:
        with pytest.raises(InvalidSegmentEntryError, match="only a major"):
            SegmentEntry(
                segment_id=sid(3), base_segment_id=sid(2), placement_id=1, epoch=0, included_segment_ids=(sid(1),)
            )

    def test_exactly_max_history_is_allowed(self) -> None:
        e = major(1000, 999, included=tuple(range(MAX_SEGMENT_HISTORY)))
        assert len(e.included_segment_ids) == MAX_SEGMENT_HISTORY

    def test_json_round_trip_and_normalised_coverage(self) -> None:
        e = SegmentEntry(
            segment_id=sid(3),
            base_segment_id=sid(2),
            placement_id=4,
            epoch=9,
            covered=(WalRange(P, 4, 10, 20), WalRange(P, 4, 0, 10)),
        )
        assert e.covered == (WalRange(P, 4, 0, 20),)
        assert SegmentEntry.from_json(e.to_json()) == e
        with pytest.raises(InvalidSegmentEntryError):
            SegmentEntry.from_json({**e.to_json(), "extra": 1})


class TestLinearChain:
    def test_every_segment_is_referenced_and_none_weak(self) -> None:
        chain = linear(5)
        for i in range(1, 6):
            assert chain.is_referenced(sid(i))
            assert not chain.is_reference_weak(sid(i))
        assert not chain.is_referenced(sid(99))
        assert chain.is_reference_weak(sid(99))  # "completed the loop without a match, return true"

    def test_empty_chain(self) -> None:
        chain = SegmentChain()
        assert not chain.is_referenced(sid(1))
        assert chain.is_reference_weak(sid(1))
        assert chain.latest_major() is None
        assert chain.since_latest_major() == ()

    def test_walk_is_newest_first(self) -> None:
        assert [e.segment_id for e in linear(4).walk()] == [sid(4), sid(3), sid(2), sid(1)]

    def test_segments_below_a_later_major_are_weak(self) -> None:
        # 1 <- 2 <- 3 <- M(10, base 3, no included ids) <- 4
        chain = linear(3).fast_forward(major(10, 3)).fast_forward(minor(4, 10))
        for i in (1, 2, 3):
            assert chain.is_referenced(sid(i))  # still reachable through base pointers
            assert chain.is_reference_weak(sid(i))  # but below the major
        assert not chain.is_reference_weak(sid(10))
        assert not chain.is_reference_weak(sid(4))
        assert chain.latest_major() == major(10, 3)
        assert [e.segment_id for e in chain.since_latest_major()] == [sid(10), sid(4)]


class TestCompactionsWithIncludedIds:
    def test_included_ids_reference_weakly(self) -> None:
        chain = linear(4).fast_forward(major(10, 4, included=(4, 3, 2, 1)))
        for i in (1, 2, 3, 4):
            assert chain.is_referenced(sid(i))
            assert chain.is_reference_weak(sid(i))
        assert chain.is_referenced(sid(10)) and not chain.is_reference_weak(sid(10))

    def test_included_ids_keep_history_after_the_entries_are_deleted(self) -> None:
        chain = linear(4).fast_forward(major(10, 4, included=(4, 3, 2, 1))).fast_forward(minor(11, 10))
        pruned = chain.without([sid(1), sid(2), sid(3), sid(4)])
        for i in (1, 2, 3, 4):
            assert pruned.is_referenced(sid(i))
            assert pruned.is_reference_weak(sid(i))

    def test_history_beyond_max_segment_history_is_forgotten(self) -> None:
        n = MAX_SEGMENT_HISTORY + 6
        chain = linear(n)
        newest = tuple(range(n, n - MAX_SEGMENT_HISTORY, -1))  # the newest MAX ids
        chain = chain.fast_forward(major(10_000, n, included=newest))
        pruned = chain.without([sid(i) for i in range(1, n + 1)])
        forgotten = [i for i in range(1, n + 1) if i not in newest]
        assert len(forgotten) == 6
        for i in forgotten:
            # not referenced any more: if offered again it is merged (idempotent), not skipped
            assert not pruned.is_referenced(sid(i))
        for i in newest:
            assert pruned.is_referenced(sid(i))
        # while the entries are still in the list, the base pointers reach them all
        assert all(chain.is_referenced(sid(i)) for i in range(1, n + 1))

    def test_match_order_included_before_self(self) -> None:
        # A major that includes the searched id answers "weak" even though it is the major's base.
        chain = linear(2).fast_forward(major(10, 2, included=(2,)))
        assert chain.is_reference_weak(sid(2))
        assert chain.is_reference_weak(sid(1))


class TestAgreesWithTheLiteralSource:
    @pytest.mark.parametrize("seed", range(40))
    def test_random_pure_chains(self, seed: int) -> None:
        rnd = random.Random(seed)
        chain = SegmentChain().fast_forward(major(1))
        order = [major(1)]
        next_id = 2
        for _ in range(rnd.randint(1, 40)):
            if rnd.random() < 0.2 and not chain.get(chain.root or "").is_major:  # type: ignore[union-attr]
                folded = [e.segment_id for e in chain.since_latest_major()][::-1]
                keep = rnd.randint(0, min(len(folded), MAX_SEGMENT_HISTORY))
                e = SegmentEntry(
                    segment_id=sid(next_id),
                    base_segment_id=chain.root,
                    placement_id=1,
                    epoch=1,
                    is_major=True,
                    included_segment_ids=tuple(folded[:keep]),
                )
            else:
                e = minor(next_id, int(chain.root or "0", 16))
            chain = chain.fast_forward(e)
            order.append(e)
            next_id += 1
            if rnd.random() < 0.2:  # prune the oldest entries (the list stays a chain prefix)
                cut = rnd.randint(0, len(order) - 1)
                chain = chain.without(x.segment_id for x in order[:cut])
                order = order[cut:]
        for i in range(1, next_id + 2):
            s = sid(i)
            assert chain.is_referenced(s) == literal_is_referenced(order, chain.root, s)
            assert chain.is_reference_weak(s) == literal_is_reference_weak(order, chain.root, s)

    def test_off_chain_entries_do_not_hide_the_chain(self) -> None:
        # Adaptation: a detached entry newer than root would make the literal walk stop at once.
        chain = linear(3).add_detached(minor(50, 40))
        order = list(chain.entries.values())
        assert not literal_is_referenced(order, chain.root, sid(1))
        assert chain.is_referenced(sid(1))
        assert not chain.is_referenced(sid(50))


class TestChanges:
    def test_fast_forward_requires_base_root(self) -> None:
        chain = linear(2)
        with pytest.raises(ChainError, match="not the root"):
            chain.fast_forward(minor(3, 1))
        assert chain.root == sid(2)  # immutable: unchanged

    def test_fast_forward_refuses_referenced_or_conflicting(self) -> None:
        chain = linear(2)
        with pytest.raises(ChainError):
            chain.fast_forward(SegmentEntry(segment_id=sid(2), base_segment_id=sid(2 - 1), placement_id=1, epoch=1))
        with pytest.raises(ChainError):
            chain.add_detached(SegmentEntry(segment_id=sid(1), base_segment_id=sid(9), placement_id=2, epoch=1))

    def test_fast_forward_add_major_only(self) -> None:
        chain = linear(3)
        with pytest.raises(ChainError, match="minor"):
            chain.fast_forward_add(minor(9, 8))
        after = chain.fast_forward_add(major(9, 8))
        assert after.root == sid(9)
        assert not after.is_referenced(sid(3))  # base 8 is not local: the old chain is left unreferenced
        assert sid(3) in after

    def test_fast_forward_add_anything_onto_null_root(self) -> None:
        assert SegmentChain().fast_forward_add(minor(9, 8)).root == sid(9)

    def test_fast_forward_add_refuses_referenced_major(self) -> None:
        chain = linear(2).fast_forward(major(10, 2, included=(2, 1)))
        with pytest.raises(ChainError, match="referenced"):
            chain.fast_forward_add(major(1))

    def test_reattach_identical_off_chain_entry(self) -> None:
        chain = linear(2).fast_forward_add(major(9, 8))
        again = chain.fast_forward_add(major(1))
        assert again.root == sid(1)
        assert again.fast_forward(minor(2, 1)).root == sid(2)  # already present, re-attached
        assert len(again.fast_forward(minor(2, 1))) == 3

    def test_add_detached_keeps_root(self) -> None:
        chain = linear(2).add_detached(minor(7, 6))
        assert chain.root == sid(2) and sid(7) in chain and not chain.is_referenced(sid(7))

    def test_without_refuses_root(self) -> None:
        with pytest.raises(ChainError, match="root"):
            linear(2).without([sid(2)])
        assert len(linear(3).without([sid(1), sid(77)])) == 2

    def test_corrupt_lists(self) -> None:
        with pytest.raises(CorruptChainError):
            SegmentChain(sid(1), {})
        with pytest.raises(CorruptChainError):
            SegmentChain.of([minor(2, 1), minor(2, 1)], sid(2))
        with pytest.raises(CorruptChainError):
            SegmentChain(None, {sid(2): minor(3, 2)})
        with pytest.raises(CorruptChainError, match="cycle"):
            SegmentChain.of([minor(2, 3), minor(3, 2)], sid(2))

    def test_entries_are_read_only(self) -> None:
        chain = linear(2)
        with pytest.raises(TypeError):
            chain.entries[sid(9)] = minor(9, 8)  # type: ignore[index]

    def test_coverage_is_union_from_latest_major(self) -> None:
        def cov(a: int, b: int) -> tuple[WalRange, ...]:
            return (WalRange(P, 1, a, b),)

        m = SegmentEntry(
            segment_id=sid(1), base_segment_id=None, placement_id=1, epoch=1, is_major=True, covered=cov(0, 10)
        )
        a = SegmentEntry(segment_id=sid(2), base_segment_id=sid(1), placement_id=1, epoch=1, covered=cov(10, 20))
        chain = SegmentChain().fast_forward(m).fast_forward(a)
        assert chain.coverage() == cov(0, 20)
