"""A replica's catch-up state: is it serving, or (re-)bootstrapping from Kafka, and how far along.

DESIGN.md section 7: "a replica that is empty, re-bootstrapping or out of sync is never eligible
while an in-sync one exists". The procedure lives in :mod:`storage_node.replication.bootstrap`;
this is only the state it moves, kept next to the data it describes so that the node (election,
scans) and ``describe replica`` read one thing.

A bootstrap survives a crash: a marker file ``BOOTSTRAPPING`` in the replica's directory is written
before the bootstrap starts and removed only once it is caught up, so a replica that restarts half
way through is still not eligible (its chain then holds a major and some minors, not everything).
"""

from __future__ import annotations

import enum
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER = "BOOTSTRAPPING"


class CatchUpPhase(enum.Enum):
    SERVING = "SERVING"
    """Holds what it acked; eligible for election; serves reads."""
    BOOTSTRAPPING = "BOOTSTRAPPING"
    """Fetching the latest major, later minors and the WAL channel from Kafka: not eligible, no reads."""


@dataclass(frozen=True)
class CatchUpSnapshot:
    phase: CatchUpPhase
    reason: str | None
    source_topic: str | None
    start_offset: int
    fetched_offset: int
    target_offset: int
    wal_fetched: int
    wal_target: int
    segments_fetched: int
    bytes_fetched: int
    started_at: float | None
    finished_at: float | None

    def as_dict(self) -> dict[str, Any]:
        span = max(self.target_offset - self.start_offset, 0)
        done = min(max(self.fetched_offset - self.start_offset, 0), span)
        return {
            "state": self.phase.value,
            "reason": self.reason,
            "source_topic": self.source_topic,
            "offsets_fetched": done,
            "offsets_target": span,
            "progress": 1.0 if span == 0 else round(done / span, 4),
            "wal_fetched": self.wal_fetched,
            "wal_target": self.wal_target,
            "segments_fetched": self.segments_fetched,
            "bytes_fetched": self.bytes_fetched,
            "seconds": None
            if self.started_at is None
            else round((self.finished_at or time.monotonic()) - self.started_at, 3),
        }


class CatchUp:
    """Thread-safe catch-up state of one replica (written by its follower, read by the node)."""

    def __init__(self, directory: Path) -> None:
        self._marker = Path(directory) / MARKER
        self._lock = threading.Lock()
        interrupted = self._marker.exists()
        self._phase = CatchUpPhase.BOOTSTRAPPING if interrupted else CatchUpPhase.SERVING
        self._reason: str | None = "a bootstrap was interrupted (marker file present)" if interrupted else None
        self._topic: str | None = None
        self._start = self._fetched = self._target = 0
        self._wal_fetched = self._wal_target = 0
        self._segments = self._bytes = 0
        self._started: float | None = None
        self._finished: float | None = None

    @property
    def phase(self) -> CatchUpPhase:
        with self._lock:
            return self._phase

    @property
    def bootstrapping(self) -> bool:
        return self.phase is CatchUpPhase.BOOTSTRAPPING

    @property
    def eligible(self) -> bool:
        """May campaign for leadership and serve reads as authoritative."""
        return self.phase is CatchUpPhase.SERVING

    def begin(self, reason: str) -> None:
        """Enter BOOTSTRAPPING (durably: the marker is fsynced before anything is fetched)."""
        with self._lock:
            if self._phase is not CatchUpPhase.BOOTSTRAPPING or self._reason is None:
                self._reason = reason
            self._phase = CatchUpPhase.BOOTSTRAPPING
            self._started, self._finished = time.monotonic(), None
            self._segments = self._bytes = 0
        with open(self._marker, "w") as f:
            f.write(reason + "\n")
            f.flush()
            os.fsync(f.fileno())

    def targets(self, topic: str, start: int, target: int, wal_start: int, wal_target: int) -> None:
        """Where this bootstrap reads from and the channel ends it must reach."""
        with self._lock:
            self._topic, self._start, self._fetched, self._target = topic, start, start, target
            self._wal_fetched, self._wal_target = wal_start, wal_target

    def progress(
        self, *, fetched: int | None = None, wal_fetched: int | None = None, segment_bytes: int | None = None
    ) -> None:
        with self._lock:
            if fetched is not None:
                self._fetched = max(self._fetched, fetched)
            if wal_fetched is not None:
                self._wal_fetched = max(self._wal_fetched, wal_fetched)
            if segment_bytes is not None:
                self._segments += 1
                self._bytes += segment_bytes

    def finish(self) -> None:
        """Caught up: back to SERVING (the marker is removed last)."""
        with self._lock:
            self._phase = CatchUpPhase.SERVING
            self._finished = time.monotonic()
        self._marker.unlink(missing_ok=True)

    def snapshot(self) -> CatchUpSnapshot:
        with self._lock:
            return CatchUpSnapshot(
                self._phase,
                self._reason,
                self._topic,
                self._start,
                self._fetched,
                self._target,
                self._wal_fetched,
                self._wal_target,
                self._segments,
                self._bytes,
                self._started,
                self._finished,
            )
