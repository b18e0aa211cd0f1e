"""A collector over hand-set Kafka offsets (pure: the monitor's rules, no servers).

``OffsetsTable`` answers the collector's Kafka questions from two dicts (log bounds per topic,
committed offsets per group and topic); it stands in for the admin calls only, every rule the
collector applies is the real one."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from monitor.collector import Collector
from monitor.config import MonitorConfig
from monitor.kafka_offsets import RecordInfo
from monitor.segments import ChannelManifests
from monitor.topology import Channel, PartitionTopology, Reader, ReplicaRef
from shoal.kafka.indexes import ChannelIndexes, IndexQuery

PID = "a" * 32
PREFIX = "shoal"
INGEST = f"{PREFIX}.ingest.{PID}"
LEADER_GROUP = f"{PREFIX}.leader.{PID}"


def wal(placement: int) -> str:
    return f"{PREFIX}.wal.{PID}.{placement}"


def segments(placement: int) -> str:
    return f"{PREFIX}.segments.{PID}.{placement}"


def replica_group(placement: int) -> str:
    return f"{PREFIX}.replica.{PID}.{placement}"


class OffsetsTable:
    def __init__(self) -> None:
        self.bounds: dict[str, tuple[int, int]] = {}
        self.acks: dict[tuple[str, str], int] = {}
        self.stable: dict[str, int] = {}
        """Last stable offsets below the log end (an open transaction); others are at the end."""
        self.fail: Exception | None = None

    def cluster_and_topics(self) -> tuple[str, dict[str, int]]:
        if self.fail is not None:
            raise self.fail
        return "cluster-1", {t: 1 for t in self.bounds}

    def topic_ids(self, present: Iterable[str]) -> dict[str, str]:
        return {t: f"id-{t}" for t in present}

    def channel_indexes(self, queries: Iterable[IndexQuery]) -> dict[str, ChannelIndexes]:
        out = {}
        for q in queries:
            if q.topic in self.bounds:
                start, end = self.bounds[q.topic]
                acks = tuple((g, self.acks.get((g, q.topic))) for g in q.ack_groups)
                consumes = tuple((g, self.acks.get((g, q.topic))) for g in q.consume_groups)
                out[q.topic] = ChannelIndexes(q.topic, start, end, acks, consumes)
        return out

    def groups_with_prefix(self, prefix: str) -> list[str]:
        return []

    def all_committed(self, groups: Any, topics: Any) -> dict[str, Any]:
        return {}

    def log_bounds(self, tps: Any) -> dict[Any, Any]:
        return {}

    def stable_ends(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {(t, p): self.stable.get(t, self.bounds[t][1]) for t, p in tps if t in self.bounds}

    def members(self, groups: Iterable[str]) -> dict[str, int]:
        return {g: 0 for g in groups}

    def first_records(self, fetch: Iterable[tuple[str, int, int]]) -> dict[tuple[str, int, int], RecordInfo]:
        # a read_committed read from inside an open transaction finds nothing before the log end
        return {
            (t, p, o): RecordInfo(self.bounds[t][1] if o >= self.stable.get(t, o + 1) else o, 1_000_000, 10)
            for t, p, o in fetch
        }

    def close(self) -> None:
        pass


class NoManifests:
    def __init__(self) -> None:
        self.channels: dict[str, ChannelManifests] = {}

    def forget(self, topic: str) -> None:
        self.channels.pop(topic, None)

    def update_many(self, bounds: dict[str, tuple[int, int]]) -> dict[str, ChannelManifests]:
        return {t: self.channels.setdefault(t, ChannelManifests(t, s)) for t, (s, _e) in bounds.items()}

    def update(self, topic: str, start: int, end: int) -> ChannelManifests:
        return self.update_many({topic: (start, end)})[topic]

    def close(self) -> None:
        pass


def topology(
    *,
    leader: tuple[str, int] | None = ("node-1", 1),
    alive: bool = True,
    placements: tuple[int, ...] = (1, 2, 3),
    campaigning: frozenset[int] = frozenset(),
) -> PartitionTopology:
    reps = tuple(ReplicaRef(f"node-{p}", p, "servers") for p in placements)
    lead = ReplicaRef(leader[0] if leader else "-", leader[1] if leader else 0, "leader")
    ingest = Channel("ingest", INGEST, None, (Reader(lead, LEADER_GROUP),))
    wals, segs = [], []
    for owner in reps:
        others = [r for r in reps if r.placement_id != owner.placement_id]
        wals.append(
            Channel(
                "wal",
                wal(owner.placement_id),
                owner,
                tuple(
                    Reader(r, replica_group(r.placement_id), f"{PREFIX}.consume.{PID}.{r.placement_id}") for r in others
                ),
            )
        )
        segs.append(
            Channel(
                "segments",
                segments(owner.placement_id),
                owner,
                tuple(Reader(r, replica_group(r.placement_id)) for r in others),
            )
        )
    return PartitionTopology(
        "t1",
        PID,
        leader[0] if leader else None,
        leader[1] if leader else None,
        alive,
        3,
        reps,
        ingest,
        tuple(wals),
        tuple(segs),
        "node-1",
        campaigning,
    )


def healthy() -> OffsetsTable:
    """Every channel read to its end by every replica."""
    k = OffsetsTable()
    k.bounds[INGEST] = (0, 100)
    k.acks[(LEADER_GROUP, INGEST)] = 100
    k.bounds[wal(1)] = (0, 50)
    k.bounds[segments(1)] = (0, 20)
    for p in (2, 3):
        k.acks[(replica_group(p), wal(1))] = 50
        k.acks[(replica_group(p), segments(1))] = 20
    return k


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def tick(self, s: float = 10.0) -> None:
        self.t += s


def collector(
    topo: Callable[[], list[PartitionTopology]],
    kafka: OffsetsTable,
    clock: Clock,
    *,
    window: int = 6,
    warn: int | None = None,
    history_dir: Path | None = None,
) -> Collector:
    config = MonitorConfig(
        kafka="127.0.0.1:1", window_samples=window, warn_samples=warn, interval_s=10.0, history_dir=history_dir
    )
    return Collector(config, topo, kafka=kafka, segments=NoManifests(), clock=clock)  # type: ignore[arg-type]


__all__ = ["Clock", "OffsetsTable", "collector", "healthy", "topology"]
