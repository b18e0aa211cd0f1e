"""One poll of the monitor: topology + Kafka offsets -> samples -> Burrow status -> the snapshot.

The snapshot is the JSON that ``shoal offsets --output json`` prints and ``/api/snapshot`` serves.
Its shape (``version`` 1; offsets are Kafka offsets, times are seconds or ms since the epoch)::

    {
      "version": 1, "generated_at": <s>, "cluster_id": str|null, "status": <worst status>,
      "window": {"samples": int, "interval_s": float, "warn_samples": int},
      "tables": [{"table": str, "status": str, "partitions": [{
          "partition_id": str, "status": str,
          "leader": {"server_id": str, "placement_id": int, "alive": bool} | null,
          "epoch": int, "leader_changes": int,
          "ingest": {"topic", "exists", "log_start", "log_end", "group", "accepted_index",
                     "lag_records", "lag_seconds", "lag_bytes_estimate", "status", "reason", "series"},
          "wal": [{"topic", "exists", "topic_id", "owner": {"server_id", "placement_id", "role"},
                   "is_leader_channel", "append_index", "tail_index", "covered_index", "status", "reason",
                   "replicas": [{"server_id", "placement_id", "role", "ack_group", "ack_index",
                                 "consume_group", "consume_index", "consume_lag_records",
                                 "lag_records", "lag_seconds", "lag_bytes_estimate",
                                 "status", "reason", "series"}]}],
          "segments": [{"topic", "exists", "topic_id", "owner", "is_leader_channel", "log_start",
                        "log_end", "manifests", "majors", "minors_awaiting_compaction",
                        "invalid_manifests", "status", "reason",
                        "recent": [{"offset", "segment_id", "is_major", "created_at_ms",
                                    "size_bytes", "row_count", "acked_by": [placement_id, ...]}],
                        "replicas": [{"server_id", "placement_id", "role", "ack_group", "ack_index",
                                      "unacked_segments", "lag_records", "lag_seconds",
                                      "lag_bytes_estimate", "status", "reason", "series"}]}]}]}],
      "spark_queries": [{"query": str, "group": str, "status": str, "lag_records": int,
                         "partitions": [{"topic", "partition", "committed", "log_start", "log_end",
                                         "lag_records", "lag_seconds", "status", "reason", "series"}]}],
      "problems": [{"where": str, "status": str, "reason": str}]
    }

``lag_records`` counts offsets from the first data record the group has not committed to the log
end (0 when only transaction markers are left); ``lag_seconds`` is the age of that record;
``lag_bytes_estimate`` is ``lag_records`` times the mean size of the records the monitor read on
that topic. ``series`` names the history series plotted on the web page (``/api/history``).
``covered_index`` of a WAL channel is the highest offset of it that segment manifests of the
partition cover (``covered_wal_offsets``), or null. On an old leader's channel (not the current
leader's), a replica whose only lag is covered by segments is OK: the new leader adopted those
records into segments, so the replica never acks them there (DESIGN.md section 7). Likewise on
an old leader's segments channel only the current leader is expected to ack (it adopts the old
leader's segments); the other replicas' lag there is shown but not alarmed.
A channel whose topic does not exist (a placement that never led) has ``exists: false`` and no
indexes; one that existed and vanished is ERR.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from monitor.config import MonitorConfig
from monitor.history import History
from monitor.kafka_offsets import KafkaOffsets, RecordInfo
from monitor.segments import SegmentsTracker
from monitor.status import Sample, Status, Verdict, evaluate, worst
from monitor.topology import Channel, PartitionTopology
from shoal.kafka.indexes import ChannelIndexes, IndexQuery

log = logging.getLogger(__name__)
SNAPSHOT_VERSION = 1
GLOBAL = "*"
_MISSING = object()

TopologySource = Callable[[], list[PartitionTopology]]


class Collector:
    """Polls, keeps the history, and holds the latest snapshot (thread-safe readers)."""

    def __init__(
        self,
        config: MonitorConfig,
        topology: TopologySource,
        *,
        kafka: KafkaOffsets | None = None,
        segments: SegmentsTracker | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._topology = topology
        self.kafka = kafka or KafkaOffsets(
            config.bootstrap_servers,
            request_timeout_s=config.request_timeout_s,
            fetch_timeout_s=config.fetch_timeout_s,
        )
        self.segments = segments or SegmentsTracker(config.bootstrap_servers, timeout_s=config.request_timeout_s)
        self._clock = clock
        keep = max(config.window_samples, 360)
        keep_s = max(config.window_s, keep * config.interval_s)
        if config.history_dir is not None:
            self.history = History.load(config.history_dir, keep_samples=keep, keep_s=keep_s, now=clock())
        else:
            self.history = History(keep, keep_s)
        self._avg_size: dict[str, float] = {}
        self._labels: dict[str, str] = {}
        self._lock = threading.Lock()
        self._snapshot: dict[str, Any] | None = None
        self.polls = 0
        self.errors = 0

    def close(self) -> None:
        self.kafka.close()
        self.segments.close()

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading the results --------------------------------------------------------------------

    @property
    def snapshot(self) -> dict[str, Any] | None:
        with self._lock:
            return self._snapshot

    def history_json(self) -> dict[str, Any]:
        """``{"window_s", "series": {key: {"label", "points": [[ts, lag_records], ...]}}}`` for the charts."""
        with self._lock:
            return {
                "window_s": self.config.window_s,
                "series": {
                    key: {"label": self._labels.get(key, key), "points": [[s.ts, s.lag] for s in dq]}
                    for key, dq in self.history.series.items()
                    if key in self._labels
                },
            }

    # -- one poll -------------------------------------------------------------------------------

    def poll(self) -> dict[str, Any]:
        now = self._clock()
        try:
            snap = self._poll(now)
        except Exception:
            self.errors += 1
            raise
        with self._lock:
            self._snapshot = snap
            self.polls += 1
        if self.config.history_dir is not None:
            with self._lock:
                self.history.save(self.config.history_dir, now)
        return snap

    def _poll(self, now: float) -> dict[str, Any]:
        parts = self._topology()
        cluster_id, existing = self.kafka.cluster_and_topics()
        hist = self.history
        with self._lock:
            if hist.cluster_id is not None and cluster_id is not None and cluster_id != hist.cluster_id:
                hist.add_event(
                    GLOBAL,
                    now,
                    f"cluster id changed from {hist.cluster_id} to {cluster_id}: a different or rebuilt Kafka "
                    "cluster; every committed offset refers to the old one",
                )
            if cluster_id is not None:
                hist.cluster_id = cluster_id
        channels = [c for p in parts for c in p.channels()]
        present = sorted({c.topic for c in channels if c.topic in existing})
        ids = self.kafka.topic_ids(present)
        with self._lock:
            for topic, tid in ids.items():
                old = hist.topic_ids.get(topic)
                if old is not None and old != tid:
                    hist.add_event(
                        f"topic:{topic}",
                        now,
                        f"topic {topic} was recreated (topic id {old} -> {tid}): committed offsets on it refer to "
                        "the old topic",
                    )
                hist.topic_ids[topic] = tid
        indexes = self.kafka.channel_indexes(_index_queries(channels, set(present)))
        bounds: dict[tuple[str, int], tuple[int, int]] = {(t, 0): (ix.tail, ix.append) for t, ix in indexes.items()}
        requests: dict[str, set[tuple[str, int]]] = {}
        committed: dict[str, dict[tuple[str, int], int | None]] = {}
        for t, ix in indexes.items():
            for group, offset in ix.acks + ix.consumes:
                requests.setdefault(group, set()).add((t, 0))
                committed.setdefault(group, {})[(t, 0)] = offset
        spark_groups = self.kafka.groups_with_prefix(f"{self.config.topic_prefix}.spark.")
        spark_committed = self.kafka.all_committed(spark_groups) if spark_groups else {}
        spark_tps = {tp for offs in spark_committed.values() for tp in offs}
        bounds.update(self.kafka.log_bounds(spark_tps))
        members = self.kafka.members(list(requests) + spark_groups)

        def position(group: str, tp: tuple[str, int]) -> int | None:
            return committed.get(group, {}).get(tp)

        fetch: set[tuple[str, int, int]] = set()
        for group, tps in list(requests.items()) + [(g, set(o)) for g, o in spark_committed.items()]:
            for tp in tps:
                if tp not in bounds:
                    continue
                start, end = bounds[tp]
                pos = spark_committed.get(group, {}).get(tp) if group in spark_committed else position(group, tp)
                pos = start if pos is None else max(pos, start)
                if pos < end:
                    fetch.add((tp[0], tp[1], pos))
        records = self.kafka.first_records(fetch)
        for (topic, _p, _o), info in records.items():
            if info is not None:
                prev = self._avg_size.get(topic)
                self._avg_size[topic] = info.size_bytes if prev is None else 0.8 * prev + 0.2 * info.size_bytes

        ctx = _PollContext(self, now, bounds, committed, members, records, existing, indexes)
        tables: dict[str, list[dict[str, Any]]] = {}
        with self._lock:
            for p in parts:
                tables.setdefault(p.table, []).append(self._partition(ctx, p))
            spark = [self._spark_query(ctx, g, spark_committed[g]) for g in spark_groups]
            hist.prune(now)
        table_list = [
            {"table": t, "status": worst([Status(p["status"]) for p in ps]).value, "partitions": ps}
            for t, ps in sorted(tables.items())
        ]
        all_status = [Status(t["status"]) for t in table_list] + [Status(q["status"]) for q in spark]
        return {
            "version": SNAPSHOT_VERSION,
            "generated_at": now,
            "cluster_id": cluster_id,
            "status": worst(all_status).value,
            "window": {
                "samples": self.config.window_samples,
                "interval_s": self.config.interval_s,
                "warn_samples": self.config.warn_after,
            },
            "tables": table_list,
            "spark_queries": spark,
            "problems": ctx.problems,
        }

    # -- pieces ---------------------------------------------------------------------------------

    def _reader(
        self,
        ctx: _PollContext,
        *,
        key: str,
        label: str,
        where: str,
        topic: str,
        partition: int,
        group: str,
        committed: int | None,
        truncated_status: Status = Status.ERR,
        settled: str | None = None,
    ) -> dict[str, Any]:
        """Sample, history and verdict of one group on one topic partition.

        ``settled``: why this group is not expected to catch up on this channel (an old leader's
        channel whose records are covered elsewhere); a lag verdict (WARN, STALL, STOP) then
        becomes OK with that explanation. ERR and REWIND are never suppressed."""
        start, end = ctx.bounds[(topic, partition)]
        pos = start if committed is None else max(committed, start)
        info: Any = ctx.records.get((topic, partition, pos), _MISSING) if pos < end else None
        if info is None:
            lag, lag_s = 0, 0.0
        elif info is _MISSING:
            lag, lag_s = end - pos, None  # the record could not be read in time: offsets only
        else:
            assert isinstance(info, RecordInfo)
            lag, lag_s = end - info.offset, max(0.0, ctx.now - info.timestamp_ms / 1000.0)
        sample = Sample(ctx.now, committed, start, end, lag, ctx.members.get(group, 0))
        window = self.history.add(key, sample)
        self._labels[key] = label
        events = self.history.active_events(f"topic:{topic}", ctx.now, self.config.window_s)
        events += self.history.active_events(GLOBAL, ctx.now, self.config.window_s)
        verdict = evaluate(
            window,
            window_samples=self.config.window_samples,
            warn_samples=self.config.warn_after,
            events=events,
            truncated_status=truncated_status,
        )
        if settled is not None and verdict.status in (Status.WARN, Status.STALL, Status.STOP):
            verdict = Verdict(Status.OK, f"{settled} ({verdict.status.value} suppressed: {verdict.reason})")
        ctx.note(where, verdict)
        avg = self._avg_size.get(topic)
        return {
            "lag_records": lag,
            "lag_seconds": None if lag_s is None else round(lag_s, 3),
            "lag_bytes_estimate": None if avg is None else int(avg * lag),
            "status": verdict.status.value,
            "reason": verdict.reason,
            "series": key,
        }

    def _absent(self, ctx: _PollContext, where: str, topic: str) -> Verdict:
        if topic in self.history.topic_ids:
            v = Verdict(
                Status.ERR,
                f"topic {topic} (id {self.history.topic_ids[topic]}) was deleted while the metadata still lists it",
            )
            ctx.note(where, v)
            return v
        return Verdict(Status.OK, "no topic (this placement has not written the channel)")

    def _partition(self, ctx: _PollContext, p: PartitionTopology) -> dict[str, Any]:
        changes = self.history.note_leader(p.partition_id, p.epoch, p.leader_server_id)
        pid = p.partition_id
        out: dict[str, Any] = {
            "partition_id": pid,
            "leader": None
            if p.leader_server_id is None
            else {"server_id": p.leader_server_id, "placement_id": p.leader_placement_id, "alive": p.leader_alive},
            "epoch": p.epoch,
            "leader_changes": changes,
        }
        statuses: list[Status] = []
        # ingest
        ing = p.ingest
        group = ing.readers[0].ack_group
        ingest: dict[str, Any] = {"topic": ing.topic, "exists": (ing.topic, 0) in ctx.bounds, "group": group}
        if ingest["exists"]:
            start, end = ctx.bounds[(ing.topic, 0)]
            accepted = ctx.committed.get(group, {}).get((ing.topic, 0))
            ingest.update({"log_start": start, "log_end": end, "accepted_index": accepted})
            ingest.update(
                self._reader(
                    ctx,
                    key=f"ingest|{ing.topic}|{group}",
                    label=f"{p.table}/{pid[:8]} ingest (leader)",
                    where=f"{p.table}/{pid} ingest",
                    topic=ing.topic,
                    partition=0,
                    group=group,
                    committed=accepted,
                )
            )
        else:
            v = self._absent(ctx, f"{p.table}/{pid} ingest", ing.topic)
            ingest.update({"status": v.status.value, "reason": v.reason})
        statuses.append(Status(ingest["status"]))
        out["ingest"] = ingest
        out["segments"] = [self._segments(ctx, p, c) for c in p.segments]
        coverage: dict[str, int] = {}
        for c in p.segments:
            mans = self.segments.channels.get(c.topic)
            for w in p.wal:
                cov_end = None if mans is None else mans.covered_end(w.topic)
                if cov_end is not None:
                    coverage[w.topic] = max(cov_end, coverage.get(w.topic, cov_end))
        out["wal"] = [self._wal(ctx, p, c, coverage.get(c.topic)) for c in p.wal]
        statuses += [Status(c["status"]) for c in out["wal"] + out["segments"]]
        out["status"] = worst(statuses).value
        return out

    def _channel_head(self, ctx: _PollContext, p: PartitionTopology, c: Channel) -> dict[str, Any]:
        assert c.owner is not None
        return {
            "topic": c.topic,
            "exists": (c.topic, 0) in ctx.bounds,
            "topic_id": self.history.topic_ids.get(c.topic),
            "owner": {"server_id": c.owner.server_id, "placement_id": c.owner.placement_id, "role": c.owner.role},
            "is_leader_channel": c.owner.placement_id == p.leader_placement_id,
        }

    def _wal(self, ctx: _PollContext, p: PartitionTopology, c: Channel, covered: int | None) -> dict[str, Any]:
        head = self._channel_head(ctx, p, c)
        where = f"{p.table}/{p.partition_id} wal#{head['owner']['placement_id']}"
        if not head["exists"]:
            v = self._absent(ctx, where, c.topic)
            return {**head, "replicas": [], "status": v.status.value, "reason": v.reason}
        head["covered_index"] = covered
        ix = ctx.indexes[c.topic]
        start, end = ix.tail, ix.append
        replicas = []
        for r in c.readers:
            ack = ix.ack(r.ack_group)
            consume = ix.consume(r.consume_group) if r.consume_group else None
            row: dict[str, Any] = {
                "server_id": r.replica.server_id,
                "placement_id": r.replica.placement_id,
                "role": r.replica.role,
                "ack_group": r.ack_group,
                "ack_index": ack,
                "consume_group": r.consume_group,
                "consume_index": consume,
                "consume_lag_records": None if consume is None else max(0, end - consume),
            }
            row.update(
                self._reader(
                    ctx,
                    key=f"wal|{c.topic}|{r.ack_group}",
                    label=f"{p.table}/{p.partition_id[:8]} wal#{head['owner']['placement_id']} -> "
                    f"{r.replica.server_id}#{r.replica.placement_id}",
                    where=f"{where} replica {r.replica.server_id}#{r.replica.placement_id}",
                    topic=c.topic,
                    partition=0,
                    group=r.ack_group,
                    committed=ack,
                    settled=None
                    if head["is_leader_channel"] or covered is None or covered < end - 1
                    else f"old leader's channel: the offsets past this Ack are covered by segments up to offset "
                    f"{covered}",
                )
            )
            replicas.append(row)
        st = worst([Status(r["status"]) for r in replicas])
        return {
            **head,
            "append_index": end,
            "tail_index": start,
            "replicas": replicas,
            "status": st.value,
            "reason": "; ".join(r["reason"] for r in replicas if r["status"] != "OK") or "all replicas OK",
        }

    def _segments(self, ctx: _PollContext, p: PartitionTopology, c: Channel) -> dict[str, Any]:
        head = self._channel_head(ctx, p, c)
        where = f"{p.table}/{p.partition_id} segments#{head['owner']['placement_id']}"
        if not head["exists"]:
            self.segments.forget(c.topic)
            v = self._absent(ctx, where, c.topic)
            return {**head, "replicas": [], "recent": [], "status": v.status.value, "reason": v.reason}
        start, end = ctx.bounds[(c.topic, 0)]
        if self.history.active_events(f"topic:{c.topic}", ctx.now, self.config.window_s):
            self.segments.forget(c.topic)
        mans = self.segments.update(c.topic, start, end)
        acks = {r.replica.placement_id: ctx.indexes[c.topic].ack(r.ack_group) for r in c.readers}
        recent = (
            [
                {
                    "offset": m.offset,
                    "segment_id": m.segment_id,
                    "is_major": m.is_major,
                    "created_at_ms": m.created_at_ms,
                    "size_bytes": m.size_bytes,
                    "row_count": m.row_count,
                    "acked_by": sorted(pl for pl, ack in acks.items() if mans.acked(ack, m)),
                }
                for m in mans.manifests[-self.config.recent_segments :]
            ]
            if self.config.recent_segments
            else []
        )
        replicas = []
        for r in c.readers:
            ack = acks[r.replica.placement_id]
            row: dict[str, Any] = {
                "server_id": r.replica.server_id,
                "placement_id": r.replica.placement_id,
                "role": r.replica.role,
                "ack_group": r.ack_group,
                "ack_index": ack,
                "unacked_segments": mans.unacked(ack),
            }
            row.update(
                self._reader(
                    ctx,
                    key=f"segments|{c.topic}|{r.ack_group}",
                    label=f"{p.table}/{p.partition_id[:8]} segments#{head['owner']['placement_id']} -> "
                    f"{r.replica.server_id}#{r.replica.placement_id}",
                    where=f"{where} replica {r.replica.server_id}#{r.replica.placement_id}",
                    topic=c.topic,
                    partition=0,
                    group=r.ack_group,
                    committed=ack,
                    truncated_status=Status.REWIND,
                    settled=None
                    if head["is_leader_channel"] or r.replica.placement_id == p.leader_placement_id
                    else "old leader's segments channel: only the current leader adopts it, this replica gets "
                    "the data from the leader's channel",
                )
            )
            if row["status"] == Status.REWIND.value and ack is not None and ack < start:
                row["reason"] += "; the replica must replay from the latest major on the channel"
            replicas.append(row)
        st = worst([Status(r["status"]) for r in replicas])
        return {
            **head,
            "log_start": start,
            "log_end": end,
            "manifests": len(mans.manifests),
            "majors": mans.majors,
            "minors_awaiting_compaction": mans.minors_awaiting_compaction(),
            "invalid_manifests": mans.invalid,
            "recent": recent,
            "replicas": replicas,
            "status": st.value,
            "reason": "; ".join(r["reason"] for r in replicas if r["status"] != "OK") or "all replicas OK",
        }

    def _spark_query(self, ctx: _PollContext, group: str, offsets: dict[tuple[str, int], int | None]) -> dict[str, Any]:
        query = group[len(f"{self.config.topic_prefix}.spark.") :]
        parts = []
        for (topic, partition), committed in sorted(offsets.items()):
            if (topic, partition) not in ctx.bounds:
                continue
            start, end = ctx.bounds[(topic, partition)]
            row: dict[str, Any] = {
                "topic": topic,
                "partition": partition,
                "committed": committed,
                "log_start": start,
                "log_end": end,
            }
            row.update(
                self._reader(
                    ctx,
                    key=f"spark|{topic}|{partition}|{group}",
                    label=f"spark {query} {topic}[{partition}]",
                    where=f"spark query {query} {topic}[{partition}]",
                    topic=topic,
                    partition=partition,
                    group=group,
                    committed=committed,
                )
            )
            parts.append(row)
        return {
            "query": query,
            "group": group,
            "status": worst([Status(r["status"]) for r in parts]).value,
            "lag_records": sum(r["lag_records"] for r in parts),
            "partitions": parts,
        }


def _index_queries(channels: list[Channel], present: set[str]) -> list[IndexQuery]:
    """One query per existing channel topic: the Ack and Consume groups of all its readers."""
    acks: dict[str, dict[str, None]] = {}
    consumes: dict[str, dict[str, None]] = {}
    for c in channels:
        if c.topic not in present:
            continue
        acks.setdefault(c.topic, {})
        for r in c.readers:
            acks.setdefault(c.topic, {})[r.ack_group] = None
            if r.consume_group:
                consumes.setdefault(c.topic, {})[r.consume_group] = None
    return [IndexQuery(t, tuple(acks[t]), tuple(consumes.get(t, {}))) for t in sorted(acks)]


class _PollContext:
    def __init__(
        self,
        collector: Collector,
        now: float,
        bounds: dict[tuple[str, int], tuple[int, int]],
        committed: dict[str, dict[tuple[str, int], int | None]],
        members: dict[str, int],
        records: dict[tuple[str, int, int], RecordInfo | None],
        existing: dict[str, int],
        indexes: dict[str, ChannelIndexes],
    ) -> None:
        self.collector = collector
        self.indexes = indexes
        """The channel indexes (Tail, Append, Ack, Consume) of every channel whose topic exists."""
        self.now = now
        self.bounds = bounds
        self.committed = committed
        self.members = members
        self.records = records
        self.existing = existing
        self.problems: list[dict[str, Any]] = []

    def note(self, where: str, verdict: Verdict) -> None:
        if verdict.status is not Status.OK:
            self.problems.append({"where": where, "status": verdict.status.value, "reason": verdict.reason})
