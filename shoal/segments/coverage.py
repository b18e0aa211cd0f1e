"""Which WAL offsets a segment covers (DESIGN.md sections 3, 4.3, 6).

The EventQL source has no WAL; shoal adds one channel per (partition, placement)
(``<prefix>.wal.<partition_id>.<placement_id>``). A segment entry records, for each channel whose
records it contains, the half-open offset ranges ``[start, end)`` it covers. This module is the
interval arithmetic on those ranges: normalising, union, containment and the contiguous covered
prefix of one channel (what crash recovery replays from, and how far Tail may advance).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shoal.errors import InvalidIdError
from shoal.ids import validate_partition_id, validate_placement_id
from shoal.segments.errors import InvalidSegmentEntryError

Channel = tuple[str, int]
"""A WAL channel: ``(partition_id, placement_id)``."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, order=True, slots=True)
class WalRange:
    """Offsets ``[start_offset, end_offset)`` of the WAL channel of ``(partition_id, placement_id)``."""

    partition_id: str
    placement_id: int
    start_offset: int
    end_offset: int

    def __post_init__(self) -> None:
        try:
            validate_partition_id(self.partition_id)
            validate_placement_id(self.placement_id)
        except InvalidIdError as exc:
            raise InvalidSegmentEntryError(f"covered WAL range: {exc}") from exc
        if not (_is_int(self.start_offset) and _is_int(self.end_offset)):
            raise InvalidSegmentEntryError(
                f"covered WAL range offsets must be integers, got {self.start_offset!r:.40}, {self.end_offset!r:.40}"
            )
        if not 0 <= self.start_offset < self.end_offset < 2**63:
            raise InvalidSegmentEntryError(
                f"covered WAL range must satisfy 0 <= start < end < 2**63, got [{self.start_offset}, {self.end_offset})"
            )

    @property
    def channel(self) -> Channel:
        return (self.partition_id, self.placement_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "partition_id": self.partition_id,
            "placement_id": self.placement_id,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> WalRange:
        """Build from a decoded JSON/Avro record; any missing or extra field is an InvalidSegmentEntryError."""
        fields = {"partition_id", "placement_id", "start_offset", "end_offset"}
        if not isinstance(obj, Mapping) or set(obj) != fields:
            raise InvalidSegmentEntryError(f"covered WAL range must be an object with exactly {sorted(fields)}")
        return cls(obj["partition_id"], obj["placement_id"], obj["start_offset"], obj["end_offset"])


def normalize(ranges: Iterable[WalRange]) -> tuple[WalRange, ...]:
    """Sort by channel and offset, and merge overlapping or adjacent ranges of the same channel."""
    items = list(ranges)
    for r in items:
        if not isinstance(r, WalRange):
            raise InvalidSegmentEntryError(f"covered ranges must be WalRange, got {type(r).__name__}")
    out: list[WalRange] = []
    for r in sorted(items):
        last = out[-1] if out else None
        if last is not None and last.channel == r.channel and r.start_offset <= last.end_offset:
            if r.end_offset > last.end_offset:
                out[-1] = WalRange(last.partition_id, last.placement_id, last.start_offset, r.end_offset)
        else:
            out.append(r)
    return tuple(out)


def union(*groups: Iterable[WalRange]) -> tuple[WalRange, ...]:
    """The normalised union of several groups of ranges."""
    return normalize(r for group in groups for r in group)


def covers(outer: Iterable[WalRange], inner: Iterable[WalRange]) -> bool:
    """True if every offset in ``inner`` lies in ``outer`` (an empty ``inner`` is covered)."""
    have = normalize(outer)
    for r in normalize(inner):
        if not any(
            o.channel == r.channel and o.start_offset <= r.start_offset and r.end_offset <= o.end_offset for o in have
        ):
            return False
    return True


def covered_end(ranges: Iterable[WalRange], channel: Channel, start_offset: int = 0) -> int:
    """End of the contiguous covered run of ``channel`` that contains ``start_offset``.

    Returns ``start_offset`` when that offset itself is not covered. This is where WAL replay of the
    channel must start after a crash (LinDB recovery), and the highest offset Tail may move to.
    """
    end = start_offset
    for r in normalize(ranges):
        if r.channel == channel and r.start_offset <= end < r.end_offset:
            end = r.end_offset
    return end
