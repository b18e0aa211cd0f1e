"""The monitor's memory: sliding windows of samples, recreation events, topic ids, leader epochs.

Kept in memory and, with a history directory, persisted after every poll to
``<dir>/monitor-history.json`` (written to a temporary file, fsynced, then renamed), and loaded
at start, so a restarted monitor evaluates with the window it had instead of starting blind, and
also notices a topic recreated or a cluster replaced while it was down (the ids it remembers no
longer match). Samples older than ``keep_s`` are dropped on load.

The file's shape is :class:`monitor.models.HistoryFile` (``version`` 1).
"""

from __future__ import annotations

import os
import tempfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from monitor.errors import HistoryFileError
from monitor.models import HISTORY_VERSION, HistoryFile, PartitionMemoryFile
from monitor.status import Sample
from shoal import jsonio

FILE_NAME = "monitor-history.json"
VERSION = HISTORY_VERSION


def _samples(
    rows: list[tuple[float, int | None, int, int, int, int, int | None] | tuple[float, int | None, int, int, int, int]],
    stable_ends: list[int | None] | None,
) -> list[Sample]:
    """A series' samples from a file's rows and their last stable offsets (:class:`HistoryFile`):
    those of ``stable_ends`` only when it has one per row (a monitor of an earlier release rewrote
    the series without it otherwise), else a seven-field row's own."""
    if stable_ends is None or len(stable_ends) != len(rows):
        return [Sample(*row) for row in rows]
    return [Sample(*row[:6], stable_end=stable) for row, stable in zip(rows, stable_ends, strict=True)]


@dataclass
class PartitionMemory:
    epoch: int
    leader: str | None
    leader_changes: int = 0
    dead_polls: int = 0
    """Polls in a row, in this process, whose elected leader was not alive."""


@dataclass
class History:
    keep_samples: int
    keep_s: float
    cluster_id: str | None = None
    topic_ids: dict[str, str] = field(default_factory=dict)
    partitions: dict[str, PartitionMemory] = field(default_factory=dict)
    series: dict[str, deque[Sample]] = field(default_factory=dict)
    events: dict[str, list[tuple[float, str]]] = field(default_factory=dict)

    def add(self, key: str, sample: Sample) -> list[Sample]:
        dq = self.series.get(key)
        if dq is None:
            dq = self.series[key] = deque(maxlen=self.keep_samples)
        dq.append(sample)
        return list(dq)

    def window(self, key: str, n: int) -> list[Sample]:
        return list(self.series.get(key, ()))[-n:]

    def add_event(self, key: str, ts: float, text: str) -> None:
        self.events.setdefault(key, []).append((ts, text))

    def active_events(self, key: str, now: float, window_s: float) -> list[str]:
        return [text for ts, text in self.events.get(key, ()) if ts >= now - window_s]

    def note_leader(self, partition_id: str, epoch: int, leader: str | None) -> int:
        """Remember the partition's epoch; count a leader change when it moved. Returns the count."""
        mem = self.partitions.get(partition_id)
        if mem is None:
            self.partitions[partition_id] = PartitionMemory(epoch, leader)
            return 0
        if epoch != mem.epoch or leader != mem.leader:
            if epoch > mem.epoch:
                mem.leader_changes += 1
            mem.epoch, mem.leader = epoch, leader
        return mem.leader_changes

    def note_leader_alive(self, partition_id: str, alive: bool) -> int:
        """Count the polls in a row whose elected leader was not alive; 0 once it is. Call after
        :meth:`note_leader`, which creates the partition's memory."""
        mem = self.partitions.get(partition_id)
        if mem is None:
            return 0 if alive else 1
        mem.dead_polls = 0 if alive else mem.dead_polls + 1
        return mem.dead_polls

    def prune(self, now: float) -> None:
        """After a poll: forget the series no poll sampled for ``keep_s`` (a channel gone) and old
        events. A series still sampled keeps its last ``keep_samples`` whatever their timestamps:
        the verdicts count polls, not seconds, so a wall-clock step must not empty a window. A
        non-finite timestamp counts as old."""
        cutoff = now - self.keep_s
        for key in list(self.series):
            dq = self.series[key]
            if not dq or not dq[-1].ts >= cutoff:
                del self.series[key]
        for key in list(self.events):
            kept = [e for e in self.events[key] if e[0] >= cutoff]
            if kept:
                self.events[key] = kept
            else:
                del self.events[key]

    # -- persistence ----------------------------------------------------------------------------

    def to_file(self, now: float) -> HistoryFile:
        return HistoryFile(
            saved_at=now,
            cluster_id=self.cluster_id,
            topic_ids=dict(self.topic_ids),
            partitions={
                pid: PartitionMemoryFile(epoch=m.epoch, leader=m.leader, leader_changes=m.leader_changes)
                for pid, m in self.partitions.items()
            },
            series={
                key: [(s.ts, s.committed, s.log_start, s.log_end, s.lag, s.members) for s in dq]
                for key, dq in self.series.items()
            },
            events={key: list(evs) for key, evs in self.events.items()},
            stable_ends={key: [s.stable_end for s in dq] for key, dq in self.series.items()},
        )

    def save(self, directory: Path, now: float) -> Path:
        try:
            return self._save(directory, now)
        except OSError as exc:
            raise HistoryFileError(f"cannot write the monitor history in {directory}: {exc.strerror or exc}") from None

    def _save(self, directory: Path, now: float) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / FILE_NAME
        data = self.to_file(now).model_dump_json().encode()
        fd, tmp = tempfile.mkstemp(prefix=".monitor-history.", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, directory: Path, *, keep_samples: int, keep_s: float, now: float) -> History:
        """The history saved in ``directory`` (an empty one if there is no file yet)."""
        hist = cls(keep_samples, keep_s)
        path = directory / FILE_NAME
        if not path.exists():
            return hist
        try:
            obj = jsonio.read_checked(path)
        except (OSError, jsonio.BadJson) as exc:
            raise HistoryFileError(f"history file {path} is unreadable: {exc}; remove it to start afresh") from exc
        if not isinstance(obj, dict) or obj.get("version") != VERSION:
            raise HistoryFileError(
                f"history file {path} is not a version {VERSION} monitor history; remove it to start afresh"
            )
        try:
            saved = HistoryFile.model_validate(obj)
        except ValidationError as exc:
            raise HistoryFileError(f"history file {path} is malformed: {exc!r}; remove it to start afresh") from exc
        hist.cluster_id = saved.cluster_id
        hist.topic_ids = dict(saved.topic_ids)
        hist.partitions = {
            pid: PartitionMemory(m.epoch, m.leader, m.leader_changes) for pid, m in saved.partitions.items()
        }
        hist.series = {
            key: deque(_samples(rows, saved.stable_ends.get(key)), maxlen=keep_samples)
            for key, rows in saved.series.items()
        }
        hist.events = {key: list(evs) for key, evs in saved.events.items()}
        hist.drop_older_than(now - keep_s)
        return hist

    def drop_older_than(self, cutoff: float) -> None:
        """Drop every sample and event taken before ``cutoff``: on load, a window saved long ago
        says nothing about now."""
        for key in list(self.series):
            dq = self.series[key]
            while dq and not dq[0].ts >= cutoff:
                dq.popleft()
            if not dq:
                del self.series[key]
        self.prune(cutoff + self.keep_s)
