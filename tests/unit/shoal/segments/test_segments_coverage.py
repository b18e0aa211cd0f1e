"""WAL offset coverage of segments (DESIGN.md sections 3, 4.3, 6)."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.segments.coverage import WalRange, covered_end, covers, normalize, union
from shoal.segments.errors import InvalidSegmentEntryError

P = "ab" * 16
Q = "cd" * 16


def r(a: int, b: int, placement: int = 1, partition: str = P) -> WalRange:
    return WalRange(partition, placement, a, b)


def test_normalize_merges_overlapping_and_adjacent_per_channel() -> None:
    assert normalize([r(10, 20), r(0, 10), r(15, 30), r(40, 50), r(0, 5, placement=2)]) == (
        r(0, 30),
        r(40, 50),
        r(0, 5, placement=2),
    )


def test_union_and_covers() -> None:
    u = union([r(0, 10)], [r(10, 20)], [r(0, 3, partition=Q)])
    assert covers(u, [r(2, 18)])
    assert covers(u, [])
    assert not covers(u, [r(15, 21)])
    assert not covers(u, [r(0, 3, placement=2)])  # another channel


def test_covered_end() -> None:
    rs = [r(0, 10), r(10, 20), r(30, 40)]
    assert covered_end(rs, (P, 1)) == 20
    assert covered_end(rs, (P, 1), 25) == 25  # not covered: replay from there
    assert covered_end(rs, (P, 1), 35) == 40
    assert covered_end(rs, (P, 2)) == 0


@pytest.mark.parametrize(
    "args",
    [("nothex", 1, 0, 1), (P, 0, 0, 1), (P, 1, 5, 5), (P, 1, -1, 3), (P, 1, 0, 2**63), (P, 1, True, 3)],
)
def test_invalid_ranges(args: tuple[Any, ...]) -> None:
    with pytest.raises(InvalidSegmentEntryError):
        WalRange(*args)


def test_json_round_trip() -> None:
    assert WalRange.from_json(r(1, 2).to_json()) == r(1, 2)
    with pytest.raises(InvalidSegmentEntryError):
        WalRange.from_json({"partition_id": P})
