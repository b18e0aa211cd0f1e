"""One poll of the monitor: topology + Kafka offsets -> samples -> Burrow status -> the snapshot.

The snapshot (:class:`monitor.models.Snapshot`, its fields documented there) is the JSON that
``shoal offsets --output json`` prints and ``/api/snapshot`` serves.

On an old leader's channel (not the current leader's), a replica whose only lag is covered by
segments is OK: the new leader adopted those records into segments, so the replica never acks
them there (DESIGN.md section 7). Likewise on an old leader's segments channel only the current
leader is expected to ack (it adopts the old leader's segments); the other replicas' lag there is
shown but not alarmed. A Tail past a replica's Ack is ERR only where the deleted records are not
covered by segments (lost); covered, it is REWIND on the leader's channel (the replica replays from
segments) and OK on a settled old leader's channel. A channel whose topic does not exist (a
placement that never led) has ``exists: false`` and no indexes; one that existed and vanished is ERR.
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
from monitor.models import (
    AbsentIngest,
    AbsentSegmentsChannel,
    AbsentWalChannel,
    ChannelHead,
    ChannelOwner,
    GroupReport,
    HistoryView,
    Ingest,
    Leader,
    PartitionReport,
    Problem,
    ReaderLag,
    RecentSegment,
    SegmentsChannel,
    SegmentsReplica,
    Series,
    Snapshot,
    SparkPartition,
    SparkQuery,
    TableReport,
    WalChannel,
    WalReplica,
    Window,
)
from monitor.segments import SegmentsTracker
from monitor.status import Sample, Status, Verdict, evaluate, worst
from monitor.topology import Channel, PartitionTopology
from shoal.errors import ShoalError
from shoal.kafka.indexes import ChannelIndexes, IndexQuery

log = logging.getLogger(__name__)
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
            config.kafka,
            request_timeout_s=config.request_timeout_s,
            fetch_timeout_s=config.fetch_timeout_s,
        )
        self.segments = segments or SegmentsTracker(config.kafka, timeout_s=config.request_timeout_s)
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
        self._snapshot: Snapshot | None = None
        self.polls = 0
        self.errors = 0
        self.last_error: str | None = None
        """``"<type>: <message>"`` of the last poll when it failed; None once a poll succeeds."""
        self.last_error_at: float | None = None
        self.finished_at: float | None = None
        """When the last successful poll finished (its snapshot's age counts from its start)."""

    def close(self) -> None:
        self.kafka.close()
        self.segments.close()

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading the results --------------------------------------------------------------------

    @property
    def snapshot(self) -> Snapshot | None:
        with self._lock:
            return self._snapshot

    def now(self) -> float:
        """The collector's clock (seconds since the epoch)."""
        return self._clock()

    def served_snapshot(self) -> Snapshot | None:
        """The snapshot to show: the last one, or, while the polls after it fail or once it is older
        than ``/healthz`` allows (max(10 s, 3 intervals): a poll hanging without an error), that one
        marked ERR with a ``monitor`` problem naming why and its age. A monitor that cannot reach
        Kafka knows nothing about now, so it must not go on saying OK (None before any poll)."""
        with self._lock:
            snap, error, at, finished = self._snapshot, self.last_error, self.last_error_at, self.finished_at
        if snap is None:
            return snap
        if error is None:
            # a poll that hangs (no error) must not leave an old OK on show either (/healthz's rule);
            # counted from when the last poll finished: a slow but healthy poll is not a stuck one
            now = self._clock()
            if not now - (finished if finished is not None else snap.generated_at) > self.stale_after_s():
                return snap
            age = now - snap.generated_at
            reason = f"no poll has finished since this snapshot ({age:.0f} s old): one is stuck"
        else:
            age = max(0.0, (at or snap.generated_at) - snap.generated_at)
            reason = f"the polls since this snapshot fail ({age:.0f} s old): {error}"
        problem = Problem(where="monitor", status=Status.ERR, reason=reason)
        return snap.model_copy(update={"problems": [*snap.problems, problem], "status": Status.ERR})

    def stale_after_s(self) -> float:
        """How long after the last poll finished without another finishing the snapshot is stale."""
        return max(10.0, 3 * self.config.interval_s)

    def history_view(self) -> HistoryView:
        """The lag series of every channel reader seen by this process, for the charts."""
        with self._lock:
            return HistoryView(
                window_s=self.config.window_s,
                series={
                    key: Series(label=self._labels.get(key, key), points=[(s.ts, s.lag) for s in dq])
                    for key, dq in self.history.series.items()
                    if key in self._labels
                },
            )

    # -- one poll -------------------------------------------------------------------------------

    def poll(self) -> Snapshot:
        now = self._clock()
        try:
            snap = self._poll(now)
        except Exception as exc:
            with self._lock:
                self.errors += 1
                self.last_error, self.last_error_at = f"{type(exc).__name__}: {exc}", now
            raise
        with self._lock:
            self._snapshot = snap
            self.finished_at = self._clock()
            self.polls += 1
            self.last_error = self.last_error_at = None
        if self.config.history_dir is not None:
            with self._lock:
                self.history.save(self.config.history_dir, now)
        return snap

    def _poll(self, now: float) -> Snapshot:
        parts = self._topology()
        cluster_id, existing = self.kafka.cluster_and_topics()
        hist = self.history
        with self._lock:
            known = set(hist.topic_ids)
        if any(c.topic not in existing and c.topic in known for p in parts for c in p.channels()):
            # a channel seen before is gone: a placement's channels are deleted (UNLOAD_FINAL) only
            # after a METADATA version without it, which may have come between the two reads above.
            # The topology read after the topic list decides; absent from it too, it is an ERR.
            parts = self._topology()
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
        spark_committed = self.kafka.all_committed(spark_groups, existing) if spark_groups else {}
        intake_groups = self.kafka.groups_with_prefix(f"{self.config.topic_prefix}.compaction-intake.")
        intake_committed = self.kafka.all_committed(intake_groups, existing) if intake_groups else {}
        spark_committed.update(intake_committed)  # both: groups found by prefix, offsets read as committed
        spark_tps = {tp for offs in spark_committed.values() for tp in offs}
        bounds.update(self.kafka.log_bounds(spark_tps))
        try:
            stable = self.kafka.stable_ends(bounds)
        except ShoalError as exc:  # a sample this poll goes without: the lag figures do not
            log.warning("last stable offsets not read this poll: %s", exc)
            stable = {}
        members = self.kafka.members(list(requests) + spark_groups + intake_groups)

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

        ctx = _PollContext(self, now, bounds, committed, members, records, existing, indexes, stable)
        tables: dict[str, list[PartitionReport]] = {}
        with self._lock:
            self._read_manifests(ctx, parts)
            for p in parts:
                tables.setdefault(p.table, []).append(self._partition(ctx, p))
            spark = [self._spark_query(ctx, g, spark_committed[g]) for g in spark_groups]
            intake = [self._group(ctx, g, spark_committed[g], "compaction intake") for g in intake_groups]
            hist.prune(now)
        table_list = [
            TableReport(
                table=t,
                status=worst([p.status for p in ps]),
                partitions=ps,
                **leader_spread([p for p in parts if p.table == t]),
            )
            for t, ps in sorted(tables.items())
        ]
        return Snapshot(
            generated_at=now,
            cluster_id=cluster_id,
            status=worst([t.status for t in table_list] + [q.status for q in spark] + [g.status for g in intake]),
            window=Window(
                samples=self.config.window_samples,
                interval_s=self.config.interval_s,
                warn_samples=self.config.warn_after,
            ),
            tables=table_list,
            spark_queries=spark,
            compaction_intake=intake,
            problems=ctx.problems,
        )

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
        serving: bool = False,
    ) -> ReaderLag:
        """Sample, history and verdict of one group on one topic partition.

        ``settled``: why this group is not expected to catch up on this channel (an old leader's
        channel whose records are covered elsewhere): those offsets count as caught up, so the lag
        shown is 0 like the status (the raw offset lag goes in the reason). ERR and REWIND are never
        suppressed; ``truncated_status`` is what a Tail past the committed offset means here.
        ``serving``: a process of the reader is up (its placement campaigns, or it is the live
        leader), which counts as a live member: shoal's groups commit with ``assign()`` and have none
        in Kafka, so without it a stuck reader could only ever be STOP, never STALL."""
        start, end = ctx.bounds[(topic, partition)]
        pos = start if committed is None else max(committed, start)
        info: Any = ctx.records.get((topic, partition, pos), _MISSING) if pos < end else None
        if info is None:
            lag, lag_s = 0, 0.0
        elif info is _MISSING:
            lag, lag_s = end - pos, None  # the record could not be read in time: offsets only
        else:
            assert isinstance(info, RecordInfo)
            if info.offset >= end:  # past the end listed first: aborted records and markers skipped
                lag, lag_s = 0, 0.0
            else:
                lag, lag_s = end - info.offset, max(0.0, ctx.now - info.timestamp_ms / 1000.0)
        raw_lag = lag
        if settled is not None:
            lag, lag_s = 0, 0.0
        members = max(ctx.members.get(group, 0), int(serving))
        sample = Sample(ctx.now, committed, start, end, lag, members, ctx.stable.get((topic, partition)))
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
            # an old leader's channel whose records are covered elsewhere: its open transaction holds nothing back
            open_transaction_s=None if settled is not None else self.config.open_transaction_warn_s,
        )
        if settled is not None and verdict.status is Status.OK:
            verdict = Verdict(Status.OK, f"{settled} (offset lag {raw_lag}, counted as caught up)")
        ctx.note(where, verdict)
        avg = self._avg_size.get(topic)
        return ReaderLag(
            lag_records=lag,
            lag_seconds=None if lag_s is None else round(lag_s, 3),
            lag_bytes_estimate=None if avg is None else int(avg * lag),
            status=verdict.status,
            reason=verdict.reason,
            series=key,
        )

    def _absent(self, ctx: _PollContext, where: str, topic: str) -> Verdict:
        if topic in self.history.topic_ids:
            v = Verdict(
                Status.ERR,
                f"topic {topic} (id {self.history.topic_ids[topic]}) was deleted while the metadata still lists it",
            )
            ctx.note(where, v)
            return v
        return Verdict(Status.OK, "no topic (this placement has not written the channel)")

    def _partition(self, ctx: _PollContext, p: PartitionTopology) -> PartitionReport:
        changes = self.history.note_leader(p.partition_id, p.epoch, p.leader_server_id)
        pid = p.partition_id
        # ingest
        ing = p.ingest
        group = ing.readers[0].ack_group
        ingest: Ingest | AbsentIngest
        if (ing.topic, 0) in ctx.bounds:
            start, end = ctx.bounds[(ing.topic, 0)]
            accepted = ctx.committed.get(group, {}).get((ing.topic, 0))
            lag = self._reader(
                ctx,
                key=f"ingest|{ing.topic}|{group}",
                label=f"{p.table}/{pid[:8]} ingest (leader)",
                where=f"{p.table}/{pid} ingest",
                topic=ing.topic,
                partition=0,
                group=group,
                committed=accepted,
                serving=p.leader_alive,
            )
            ingest = Ingest(
                topic=ing.topic,
                exists=True,
                group=group,
                log_start=start,
                log_end=end,
                accepted_index=accepted,
                **dict(lag),
            )
        else:
            v = self._absent(ctx, f"{p.table}/{pid} ingest", ing.topic)
            ingest = AbsentIngest(topic=ing.topic, exists=False, group=group, status=v.status, reason=v.reason)
        segments = [self._segments(ctx, p, c) for c in p.segments]
        coverage: dict[str, int] = {}
        for c in p.segments:
            mans = self.segments.channels.get(c.topic)
            for w in p.wal:
                cov_end = None if mans is None else mans.covered_end(w.topic)
                if cov_end is not None:
                    coverage[w.topic] = max(cov_end, coverage.get(w.topic, cov_end))
        wal = [self._wal(ctx, p, c, coverage.get(c.topic)) for c in p.wal]
        liveness = self._liveness(p, f"ingest|{ing.topic}|{group}")
        if liveness is not None:
            ctx.note(f"{p.table}/{pid}", liveness)
        return PartitionReport(
            partition_id=pid,
            leader=None
            if p.leader_server_id is None
            else Leader(server_id=p.leader_server_id, placement_id=p.leader_placement_id, alive=p.leader_alive),
            preferred_leader=p.preferred_server_id,
            epoch=p.epoch,
            leader_changes=changes,
            ingest=ingest,
            segments=segments,
            wal=wal,
            status=worst(
                [ingest.status]
                + [c.status for c in wal]
                + [c.status for c in segments]
                + ([] if liveness is None else [liveness.status])
            ),
        )

    def _liveness(self, p: PartitionTopology, ingest_key: str) -> Verdict | None:
        """STOP "leaderless or stuck partition" when no replica leads; when the elected leader is not
        alive (its placement no longer heads the election) on two polls in a row, WARN on the first
        (a normal election takes one); or when the leader's accepted index (the ingest group's
        committed offset) has not moved for ``warn_after`` polls while the ingest lag grew: writes
        are acknowledged but no leader accepts them. An idle partition is judged too: it has no lag
        that could show a dead leader."""
        if p.leader_server_id is None:
            return Verdict(Status.STOP, "leaderless or stuck partition: no replica leads it")
        dead_polls = self.history.note_leader_alive(p.partition_id, p.leader_alive)
        if dead_polls:
            who = (
                f"leader {p.leader_server_id}#{p.leader_placement_id} of epoch {p.epoch} is not alive "
                f"(no live election candidate holds the epoch) for {dead_polls} poll(s)"
            )
            if dead_polls >= 2:
                return Verdict(Status.STOP, f"leaderless or stuck partition: {who}")
            return Verdict(Status.WARN, f"leader election pending: {who}")
        window = self.history.window(ingest_key, self.config.warn_after)
        if len(window) < max(2, self.config.warn_after):
            return None
        first, last = window[0], window[-1]
        if all(s.committed == first.committed for s in window) and last.lag > first.lag > 0:
            return Verdict(
                Status.STOP,
                f"leaderless or stuck partition: accepted index stuck at {_fmt_offset(first.committed)} for "
                f"{len(window)} polls while the ingest lag grew {first.lag} -> {last.lag} "
                f"(leader {p.leader_server_id})",
            )
        return None

    def _channel_head(self, ctx: _PollContext, p: PartitionTopology, c: Channel) -> ChannelHead:
        assert c.owner is not None
        return ChannelHead(
            topic=c.topic,
            exists=(c.topic, 0) in ctx.bounds,
            topic_id=self.history.topic_ids.get(c.topic),
            owner=ChannelOwner(server_id=c.owner.server_id, placement_id=c.owner.placement_id, role=c.owner.role),
            is_leader_channel=c.owner.placement_id == p.leader_placement_id,
        )

    def _wal(
        self, ctx: _PollContext, p: PartitionTopology, c: Channel, covered: int | None
    ) -> WalChannel | AbsentWalChannel:
        head = self._channel_head(ctx, p, c)
        where = f"{p.table}/{p.partition_id} wal#{head.owner.placement_id}"
        if not head.exists:
            v = self._absent(ctx, where, c.topic)
            return AbsentWalChannel(**{**dict(head), "exists": False}, replicas=[], status=v.status, reason=v.reason)
        ix = ctx.indexes[c.topic]
        start, end = ix.tail, ix.append
        replicas = []
        settled = (
            None
            if head.is_leader_channel or covered is None or covered < end - 1
            else f"old leader's channel: the offsets past this Ack are covered by segments up to offset {covered}"
        )
        # Tail truncates only what segments cover (DESIGN.md section 7), and past the Ack of a replica
        # outside the in-sync set: records a segment covers are replayed from the segments channel
        # (REWIND: the replica re-bootstraps), and on a settled old leader's channel they are nobody's
        # to replay. Truncated records no segment covers were lost (ERR). One offset of slack: a
        # transaction's commit marker follows the last covered record.
        truncated = Status.ERR
        if covered is not None and covered >= start - 1:
            truncated = Status.REWIND if settled is None else Status.OK
        for r in c.readers:
            ack = ix.ack(r.ack_group)
            consume = ix.consume(r.consume_group) if r.consume_group else None
            lag = self._reader(
                ctx,
                key=f"wal|{c.topic}|{r.ack_group}",
                label=f"{p.table}/{p.partition_id[:8]} wal#{head.owner.placement_id} -> "
                f"{r.replica.server_id}#{r.replica.placement_id}",
                where=f"{where} replica {r.replica.server_id}#{r.replica.placement_id}",
                topic=c.topic,
                partition=0,
                group=r.ack_group,
                committed=ack,
                truncated_status=truncated,
                settled=settled,
                serving=r.replica.placement_id in p.campaigning,
            )
            replicas.append(
                WalReplica(
                    server_id=r.replica.server_id,
                    placement_id=r.replica.placement_id,
                    role=r.replica.role,
                    ack_group=r.ack_group,
                    ack_index=ack,
                    consume_group=r.consume_group,
                    consume_index=consume,
                    consume_lag_records=None if consume is None else max(0, end - consume),
                    **dict(lag),
                )
            )
        return WalChannel(
            **{**dict(head), "exists": True},
            covered_index=covered,
            append_index=end,
            tail_index=start,
            replicas=replicas,
            status=worst([r.status for r in replicas]),
            reason="; ".join(r.reason for r in replicas if r.status is not Status.OK) or "all replicas OK",
        )

    def _read_manifests(self, ctx: _PollContext, parts: list[PartitionTopology]) -> None:
        """Bring every existing segments channel's manifests up to its end, all channels at once
        (:meth:`SegmentsTracker.update_many`); a channel recreated recently is read again from its start."""
        bounds = {c.topic: ctx.bounds[(c.topic, 0)] for p in parts for c in p.segments if (c.topic, 0) in ctx.bounds}
        for topic in bounds:
            if self.history.active_events(f"topic:{topic}", ctx.now, self.config.window_s):
                self.segments.forget(topic)
        self.segments.update_many(bounds)

    def _segments(self, ctx: _PollContext, p: PartitionTopology, c: Channel) -> SegmentsChannel | AbsentSegmentsChannel:
        head = self._channel_head(ctx, p, c)
        where = f"{p.table}/{p.partition_id} segments#{head.owner.placement_id}"
        if not head.exists:
            self.segments.forget(c.topic)
            v = self._absent(ctx, where, c.topic)
            return AbsentSegmentsChannel(
                **{**dict(head), "exists": False}, replicas=[], recent=[], status=v.status, reason=v.reason
            )
        start, end = ctx.bounds[(c.topic, 0)]
        mans = self.segments.update(c.topic, start, end)  # read by _read_manifests: nothing left to read
        acks = {r.replica.placement_id: ctx.indexes[c.topic].ack(r.ack_group) for r in c.readers}
        recent = (
            [
                RecentSegment(
                    offset=m.offset,
                    segment_id=m.segment_id,
                    is_major=m.is_major,
                    created_at_ms=m.created_at_ms,
                    size_bytes=m.size_bytes,
                    row_count=m.row_count,
                    acked_by=sorted(pl for pl, ack in acks.items() if mans.acked(ack, m)),
                )
                for m in mans.manifests[-self.config.recent_segments :]
            ]
            if self.config.recent_segments
            else []
        )
        replicas = []
        for r in c.readers:
            ack = acks[r.replica.placement_id]
            settled = (
                None
                if head.is_leader_channel or r.replica.placement_id == p.leader_placement_id
                else "old leader's segments channel: only the current leader adopts it, this replica gets "
                "the data from the leader's channel"
            )
            lag = self._reader(
                ctx,
                key=f"segments|{c.topic}|{r.ack_group}",
                label=f"{p.table}/{p.partition_id[:8]} segments#{head.owner.placement_id} -> "
                f"{r.replica.server_id}#{r.replica.placement_id}",
                where=f"{where} replica {r.replica.server_id}#{r.replica.placement_id}",
                topic=c.topic,
                partition=0,
                group=r.ack_group,
                committed=ack,
                truncated_status=Status.REWIND,
                settled=settled,
                serving=r.replica.placement_id in p.campaigning,
            )
            row = SegmentsReplica(
                server_id=r.replica.server_id,
                placement_id=r.replica.placement_id,
                role=r.replica.role,
                ack_group=r.ack_group,
                ack_index=ack,
                unacked_segments=0 if settled is not None else mans.unacked(ack),
                **dict(lag),
            )
            if row.status is Status.REWIND and ack is not None and ack < start:
                row.reason += "; the replica must replay from the latest major on the channel"
            replicas.append(row)
        return SegmentsChannel(
            **{**dict(head), "exists": True},
            log_start=start,
            log_end=end,
            manifests=len(mans.manifests),
            majors=mans.majors,
            minors_awaiting_compaction=mans.minors_awaiting_compaction(),
            invalid_manifests=mans.invalid,
            recent=recent,
            replicas=replicas,
            status=worst([r.status for r in replicas]),
            reason="; ".join(r.reason for r in replicas if r.status is not Status.OK) or "all replicas OK",
        )

    def _spark_query(self, ctx: _PollContext, group: str, offsets: dict[tuple[str, int], int | None]) -> SparkQuery:
        query = group[len(f"{self.config.topic_prefix}.spark.") :]
        g = self._group(ctx, group, offsets, f"spark query {query}")
        return SparkQuery(query=query, group=group, status=g.status, lag_records=g.lag_records, partitions=g.partitions)

    def _group(
        self, ctx: _PollContext, group: str, offsets: dict[tuple[str, int], int | None], what: str
    ) -> GroupReport:
        """Lag and verdict of a group found by prefix, on every partition it committed."""
        parts = []
        for (topic, partition), committed in sorted(offsets.items()):
            if (topic, partition) not in ctx.bounds:
                continue
            start, end = ctx.bounds[(topic, partition)]
            lag = self._reader(
                ctx,
                key=f"group|{topic}|{partition}|{group}",
                label=f"{what} {topic}[{partition}]",
                where=f"{what} {topic}[{partition}]",
                topic=topic,
                partition=partition,
                group=group,
                committed=committed,
            )
            parts.append(
                SparkPartition(
                    topic=topic, partition=partition, committed=committed, log_start=start, log_end=end, **dict(lag)
                )
            )
        return GroupReport(
            group=group,
            status=worst([r.status for r in parts]),
            lag_records=sum(r.lag_records for r in parts),
            partitions=parts,
        )


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
        stable: dict[tuple[str, int], int] | None = None,
    ) -> None:
        self.collector = collector
        self.stable = stable or {}
        """The last stable offset of every topic partition in ``bounds`` that answered."""
        self.indexes = indexes
        """The channel indexes (Tail, Append, Ack, Consume) of every channel whose topic exists."""
        self.now = now
        self.bounds = bounds
        self.committed = committed
        self.members = members
        self.records = records
        self.existing = existing
        self.problems: list[Problem] = []

    def note(self, where: str, verdict: Verdict) -> None:
        if verdict.status is not Status.OK:
            self.problems.append(Problem(where=where, status=verdict.status, reason=verdict.reason))


def _fmt_offset(offset: int | None) -> str:
    return "none" if offset is None else str(offset)


def leader_spread(parts: list[PartitionTopology]) -> dict[str, Any]:
    """``leaders_per_node`` and ``on_preferred_leader`` of one table's partitions (alive leaders only)."""
    per_node = {r.server_id: 0 for p in parts for r in p.replicas if r.role == "servers"}
    on_preferred = 0
    for p in parts:
        lead = p.leader_server_id if p.leader_alive else None
        if lead is not None:
            per_node[lead] = per_node.get(lead, 0) + 1
            on_preferred += lead == p.preferred_server_id
    return {"leaders_per_node": dict(sorted(per_node.items())), "on_preferred_leader": on_preferred}
