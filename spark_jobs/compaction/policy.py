"""When a partition needs compaction: thresholds on the minors since its latest major.

A partition is compacted when it has at least one minor after its latest major and any of:
``min_minors`` minors, ``min_bytes`` bytes in those minors, or its oldest such minor older than
``max_age_s``. A major keeps every tombstone (the newest version of a deleted key): rows with older
GTIDs can still reach the chain after it, merged with the GTIDs they were written with (a returning
old leader's pushed segments, a rewound leader's detached ones, source 3.5), and only the tombstone
keeps such a row from bringing the deleted key back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from shoal.errors import ConfigError


@dataclass(frozen=True)
class CompactionPolicy:
    min_minors: int = 8
    min_bytes: int = 256 * 1024 * 1024
    max_age_s: float = 3600.0

    def __post_init__(self) -> None:
        for name in ("min_minors", "min_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"compaction {name} must be an integer >= 1, got {value!r:.40}")
        if not isinstance(self.max_age_s, int | float) or not self.max_age_s > 0 or math.isinf(self.max_age_s):
            raise ConfigError(f"compaction max_age_s must be a finite number > 0, got {self.max_age_s!r:.40}")


@dataclass(frozen=True)
class MinorRun:
    """The minors after a partition's latest major, as its manifests describe them."""

    count: int
    bytes: int
    oldest_created_ms: int | None


def decide(policy: CompactionPolicy, run: MinorRun, now_ms: int) -> str | None:
    """The reason to compact now, or None."""
    if run.count < 1:
        return None
    if run.count >= policy.min_minors:
        return f"{run.count} minors >= {policy.min_minors}"
    if run.bytes >= policy.min_bytes:
        return f"{run.bytes} bytes of minors >= {policy.min_bytes}"
    if run.oldest_created_ms is not None and now_ms - run.oldest_created_ms >= policy.max_age_s * 1000:
        return f"oldest minor is {(now_ms - run.oldest_created_ms) / 1000:.0f}s old >= {policy.max_age_s:g}s"
    return None


def minor_run(sizes_and_times: Sequence[tuple[int, int]]) -> MinorRun:
    """From (size_bytes, created_at_ms) of each minor."""
    return MinorRun(
        count=len(sizes_and_times),
        bytes=sum(s for s, _ in sizes_and_times),
        oldest_created_ms=min((t for _, t in sizes_and_times), default=None),
    )
