"""The segment chain: entries, root, ``is_referenced``, ``is_reference_weak`` and fast-forward.

Source: EventQL "Segment Based Replication" (seed 000), section 3 (the segment list and the root
segment id), 3.1 (compaction: base = newest included minor, up to MAX_SEGMENT_HISTORY included
ids), 3.3 (fast forward), 3.5 (``is_referenced`` / ``is_reference_weak``). DESIGN.md section 5.

Pure: no I/O. A :class:`SegmentChain` is immutable; every operation returns a new chain, so the
caller can persist the result (segment_list.py) before swapping it in.

Adaptations of the source, all deliberate:

* ``acked_servers`` is not stored in the entry: in shoal an acknowledgement is a committed Kafka
  consumer offset of a group derived from the placement id (DESIGN.md section 3), so the
  replication procedures take the acknowledged ids as an argument (replicate.py).
* The source walks "all segments in the list from new to old" and stops at the first one whose id
  is not ``next_id``. That is only right while the list holds nothing but the chain, in order. The
  list also holds segments that are off the chain (received for merge, or left below a
  fast-forward-added major), so the walk here follows base pointers through the entries by id;
  on a pure chain it visits exactly the same segments in the same order and gives the same
  answers. "The loop ends without a match" = ``next_id`` is NULL or not in the local list.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from shoal.errors import InvalidIdError
from shoal.ids import validate_placement_id, validate_segment_id
from shoal.segments.coverage import WalRange, normalize, union
from shoal.segments.errors import ChainError, CorruptChainError, InvalidSegmentEntryError

MAX_SEGMENT_HISTORY = 64
"""Source 3.1: at most this many included segment ids are stored with a compacted segment."""


_ENTRY_FIELDS = (
    "segment_id",
    "base_segment_id",
    "placement_id",
    "epoch",
    "is_major",
    "included_segment_ids",
    "covered",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentEntry:
    """One entry of the segment list (source section 3), minus ``acked_servers`` (see module doc).

    ``placement_id`` and ``epoch`` name the placement and leader epoch that *created* the segment
    (not the one that last published it); ``covered`` are the WAL offsets whose rows it contains.
    """

    segment_id: str
    base_segment_id: str | None
    placement_id: int
    epoch: int
    is_major: bool = False
    included_segment_ids: tuple[str, ...] = ()
    covered: tuple[WalRange, ...] = ()

    def __post_init__(self) -> None:
        try:
            validate_segment_id(self.segment_id)
            if self.base_segment_id is not None:
                validate_segment_id(self.base_segment_id)
            validate_placement_id(self.placement_id)
            included = tuple(self.included_segment_ids)
            for sid in included:
                validate_segment_id(sid)
        except (InvalidIdError, TypeError) as exc:
            raise InvalidSegmentEntryError(f"segment entry: {exc}") from exc
        object.__setattr__(self, "included_segment_ids", included)
        object.__setattr__(self, "covered", normalize(self.covered))
        sid = self.segment_id
        if not isinstance(self.is_major, bool):
            raise InvalidSegmentEntryError(f"segment {sid}: is_major must be a bool")
        if isinstance(self.epoch, bool) or not isinstance(self.epoch, int) or not 0 <= self.epoch < 2**63:
            raise InvalidSegmentEntryError(f"segment {sid}: epoch must be an integer in [0, 2**63), got {self.epoch!r}")
        if self.base_segment_id == sid:
            raise InvalidSegmentEntryError(f"segment {sid} names itself as its base")
        if self.base_segment_id is None and not self.is_major:
            # Source 3: "the first segment (based on NULL) must have the is_major flag set".
            raise InvalidSegmentEntryError(f"segment {sid} has no base, so it must be a major segment")
        if included and not self.is_major:
            # Source 3.1: included ids are added "when compacting", i.e. to a new major segment.
            raise InvalidSegmentEntryError(f"segment {sid}: only a major (compacted) segment may include segments")
        if len(included) > MAX_SEGMENT_HISTORY:
            raise InvalidSegmentEntryError(
                f"segment {sid} includes {len(included)} segments, more than MAX_SEGMENT_HISTORY={MAX_SEGMENT_HISTORY}"
            )
        if len(set(included)) != len(included) or sid in included:
            raise InvalidSegmentEntryError(f"segment {sid}: included ids must be distinct and not the segment itself")

    def to_json(self) -> dict[str, Any]:
        return {
            "segment_id": self.segment_id,
            "base_segment_id": self.base_segment_id,
            "placement_id": self.placement_id,
            "epoch": self.epoch,
            "is_major": self.is_major,
            "included_segment_ids": list(self.included_segment_ids),
            "covered": [r.to_json() for r in self.covered],
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SegmentEntry:
        """Inverse of :meth:`to_json`; anything malformed is an InvalidSegmentEntryError."""
        names = set(_ENTRY_FIELDS)
        if not isinstance(obj, Mapping) or set(obj) != names:
            raise InvalidSegmentEntryError(f"segment entry must be an object with exactly {sorted(names)}")
        if not isinstance(obj["included_segment_ids"], list) or not isinstance(obj["covered"], list):
            raise InvalidSegmentEntryError("segment entry: included_segment_ids and covered must be lists")
        return cls(
            segment_id=obj["segment_id"],
            base_segment_id=obj["base_segment_id"],
            placement_id=obj["placement_id"],
            epoch=obj["epoch"],
            is_major=obj["is_major"],
            included_segment_ids=tuple(obj["included_segment_ids"]),
            covered=tuple(WalRange.from_json(r) for r in obj["covered"]),
        )


@dataclass(frozen=True)
class SegmentChain:
    """The local segment list of one partition replica plus its root segment id (source section 3).

    ``entries`` is in list order, oldest first (the order in which entries were added).
    """

    root: str | None = None
    entries: Mapping[str, SegmentEntry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        entries = dict(self.entries)
        for sid, entry in entries.items():
            if not isinstance(entry, SegmentEntry) or entry.segment_id != sid:
                raise CorruptChainError(f"segment list key {sid!r:.40} does not match its entry")
        if self.root is not None and self.root not in entries:
            raise CorruptChainError(f"root segment {self.root!r:.40} is not in the segment list")
        object.__setattr__(self, "entries", MappingProxyType(entries))
        for _ in self.walk():  # a base-pointer cycle (a corrupt list) is refused here, not later
            pass

    @classmethod
    def of(cls, entries: Iterable[SegmentEntry], root: str | None) -> SegmentChain:
        """A chain from entries in list order (oldest first); duplicate ids are a CorruptChainError."""
        by_id: dict[str, SegmentEntry] = {}
        for entry in entries:
            if entry.segment_id in by_id:
                raise CorruptChainError(f"segment {entry.segment_id} appears twice in the segment list")
            by_id[entry.segment_id] = entry
        return cls(root, by_id)

    def __contains__(self, segment_id: object) -> bool:
        return segment_id in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, segment_id: str) -> SegmentEntry | None:
        return self.entries.get(segment_id)

    # -- walking ----------------------------------------------------------------------------

    def walk(self) -> Iterator[SegmentEntry]:
        """The chain from root back through base ids, newest first, while the bases are in the list.

        This is the source's iteration "from new to old" restricted to segments whose id equals
        ``next_id``; it ends where ``next_id`` is NULL or not in the list. A cycle (only possible in
        a corrupt list) raises CorruptChainError.
        """
        seen: set[str] = set()
        next_id = self.root
        while next_id is not None:
            entry = self.entries.get(next_id)
            if entry is None:
                return
            if next_id in seen:
                raise CorruptChainError(f"base pointers form a cycle through segment {next_id}")
            seen.add(next_id)
            yield entry
            next_id = entry.base_segment_id

    def is_referenced(self, segment_id: str) -> bool:
        """Source 3.5 ``is_referenced(P, S)``: is the segment's data part of the chain from root?

        True if the walk from root meets a segment including ``segment_id`` in its included ids,
        or meets ``segment_id`` itself; False when the walk ends without a match. With
        MAX_SEGMENT_HISTORY, a segment compacted long ago and no longer in the list or in any
        included ids is *not* referenced: offered again, it is merged (idempotent, just costly).
        """
        for s in self.walk():
            if segment_id in s.included_segment_ids:
                return True
            if s.segment_id == segment_id:
                return True
        return False

    def is_reference_weak(self, segment_id: str) -> bool:
        """Source 3.5 ``is_reference_weak(P, S)``: is the segment's file no longer needed?

        Walking from root: a segment including ``segment_id`` -> True (its data is in a compaction);
        ``segment_id`` itself -> False (it is live on the chain); a major segment -> True (everything
        below a major is folded into it); the walk ends without a match -> True.
        """
        for s in self.walk():
            if segment_id in s.included_segment_ids:
                return True
            if s.segment_id == segment_id:
                return False
            if s.is_major:
                return True
        return True

    def latest_major(self) -> SegmentEntry | None:
        """The most recent major segment referenced by the root (source 3.5, replicate_partition_to)."""
        for s in self.walk():
            if s.is_major:
                return s
        return None

    def since_latest_major(self) -> tuple[SegmentEntry, ...]:
        """The chain from the latest major (inclusive) to root, oldest first.

        If no major is reachable (its entry was deleted), it starts at the oldest reachable entry.
        """
        out: list[SegmentEntry] = []
        for s in self.walk():
            out.append(s)
            if s.is_major:
                break
        out.reverse()
        return tuple(out)

    def coverage(self) -> tuple[WalRange, ...]:
        """The WAL ranges whose rows the chain holds: the union from the latest major to root.

        Correct because a major's ``covered`` is the union of everything it folds (compaction.py).
        """
        return union(*(s.covered for s in self.since_latest_major()))

    # -- changes (each returns a new chain) -----------------------------------------------

    def _adding(self, entry: SegmentEntry) -> dict[str, SegmentEntry]:
        if not isinstance(entry, SegmentEntry):
            raise ChainError(f"expected a SegmentEntry, got {type(entry).__name__}")
        present = self.entries.get(entry.segment_id)
        if present is not None and present != entry:
            raise ChainError(f"segment {entry.segment_id} is already in the list with different fields")
        if self.is_referenced(entry.segment_id):
            raise ChainError(f"segment {entry.segment_id} is already referenced by the chain")
        entries = dict(self.entries)
        entries[entry.segment_id] = entry
        return entries

    def fast_forward(self, entry: SegmentEntry) -> SegmentChain:
        """Source 3.3 "fast forward": add an entry whose base is the current root and make it root.

        Used by the leader for every new segment (source 3: base = current root) and by a follower
        for a received segment with ``base_segment_id == root``. Only metadata changes: the cost does
        not depend on the segment's size. An identical entry already in the list but off the chain
        is re-attached (its file is already here).
        """
        if entry.base_segment_id != self.root:
            raise ChainError(
                f"cannot fast-forward segment {entry.segment_id}: its base {entry.base_segment_id} is not "
                f"the root {self.root}"
            )
        return SegmentChain(entry.segment_id, self._adding(entry))

    def fast_forward_add(self, entry: SegmentEntry) -> SegmentChain:
        """Source 3.5 receive: "accept and fast-forward-add" a segment whose base is not root.

        Allowed for a major segment the chain does not reference (it contains everything below it),
        or for any segment when the root is NULL (a LOADING replica with nothing yet). The new
        segment becomes root; older entries that it does not reach stay in the list, unreferenced,
        for the replication procedures to push, merge or delete.
        """
        if not entry.is_major and self.root is not None:
            raise ChainError(f"cannot fast-forward-add minor segment {entry.segment_id} onto root {self.root}")
        return SegmentChain(entry.segment_id, self._adding(entry))

    def add_detached(self, entry: SegmentEntry) -> SegmentChain:
        """Add an unreferenced entry without moving root: a received segment that will be merged.

        Source 3.5: the leader "accept[s] and merge[s]" a segment it does not reference; keeping the
        file and its entry until the merge is durable lets ``replicate_partition`` redo the merge
        after a crash ("merge the segment ... and then delete it").
        """
        return SegmentChain(self.root, self._adding(entry))

    def rewind(self, segment_id: str | None) -> SegmentChain:
        """Move root back to ``segment_id``, an entry on the chain (None: to an empty chain).

        Used by a follower whose chain diverged from a new leader's (it holds segments of an old
        leader that the new one never received, but whose rows the new leader adopted from the old
        leader's WAL channel): the entries above ``segment_id`` stay in the list, unreferenced, for
        the replication procedures (source 3.5: push / merge, then delete).
        """
        if segment_id is not None and segment_id not in {s.segment_id for s in self.walk()}:
            raise ChainError(f"cannot rewind to segment {segment_id}: it is not on the chain from root {self.root}")
        return SegmentChain(segment_id, dict(self.entries))

    def without(self, segment_ids: Iterable[str]) -> SegmentChain:
        """Remove entries (their files were deleted). The root cannot be removed."""
        drop = set(segment_ids)
        if self.root is not None and self.root in drop:
            raise ChainError(f"cannot remove the root segment {self.root}")
        return SegmentChain(self.root, {k: v for k, v in self.entries.items() if k not in drop})
