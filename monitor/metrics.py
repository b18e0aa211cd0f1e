"""The monitor's snapshot as Prometheus metrics (prometheus_client custom collector, read at scrape).

Metric names (gauges unless marked counter; ``*_status_code``: 0 OK, 1 WARN, 2 STALL, 3 STOP,
4 REWIND, 5 ERR). Labels: ``table``, ``partition`` (partition id), ``placement`` / ``server``
(the channel's owner), ``replica_placement`` / ``replica_server`` (the reader).

==============================================  =================================================
``shoal_monitor_status_code``                    worst status of everything watched; 5 (ERR)
                                                 while the polls after the snapshot fail
``shoal_monitor_up``                             1 when the last poll succeeded, else 0
``shoal_monitor_polls_total`` (counter)          polls done; ``shoal_monitor_poll_errors_total``
``shoal_monitor_last_poll_timestamp_seconds``    when the snapshot was taken (the last good poll)
``shoal_partition_leader_epoch``                 leader epoch (ZooKeeper)
``shoal_partition_leader_changes_total``         epoch changes seen by this monitor (counter)
``shoal_partition_status_code``                  worst status of the partition's channels
``shoal_ingest_log_end_offset``                  ingest topic log end
``shoal_ingest_accepted_index``                  leader group's committed offset
``shoal_ingest_lag_records`` / ``_lag_seconds``  what the leader has not accepted yet
``shoal_ingest_status_code``
``shoal_wal_append_index`` / ``_tail_index``     WAL channel log end / log start
``shoal_wal_ack_index`` / ``_consume_index``     per replica: replica_group / consume_group offsets
``shoal_wal_lag_records`` / ``_lag_seconds`` / ``_lag_bytes_estimate``   per replica (from the Ack)
``shoal_wal_status_code``                        per replica
``shoal_segments_manifests`` / ``_majors``       manifests (segments) on the channel, majors among them
``shoal_segments_minors_awaiting_compaction``    minors after the channel's latest major
``shoal_segments_ack_index`` / ``_unacked``      per replica: committed offset, segments not acked
``shoal_segments_lag_records`` / ``_lag_seconds``  per replica
``shoal_segments_status_code``                   per replica
``shoal_spark_query_lag_records`` / ``_lag_seconds``  per Spark ingest query and source partition
``shoal_spark_query_status_code``                per query
==============================================  =================================================

While polls fail, the per-partition gauges keep the values of the last good poll: alert on
``shoal_monitor_status_code`` or ``shoal_monitor_up``, which say the monitor is blind.

Fast-forward and merge counts are the storage node's own (:mod:`storage_node.metrics`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector as PromCollector

from monitor.collector import Collector
from monitor.models import PartitionReport

_P = ["table", "partition"]
_CH = [*_P, "placement", "server"]
_RP = [*_CH, "replica_placement", "replica_server"]


class _Families:
    def __init__(self) -> None:
        self.items: dict[str, Metric] = {}

    def gauge(self, name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
        if name not in self.items:
            self.items[name] = GaugeMetricFamily(name, doc, labels=labels)
        fam = self.items[name]
        assert isinstance(fam, GaugeMetricFamily)
        return fam

    def counter(self, name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
        if name not in self.items:
            self.items[name] = CounterMetricFamily(name, doc, labels=labels)
        fam = self.items[name]
        assert isinstance(fam, CounterMetricFamily)
        return fam


def _set(fam: GaugeMetricFamily | CounterMetricFamily, labels: list[str], value: Any) -> None:
    if value is not None:
        fam.add_metric(labels, float(value))


class SnapshotMetrics(PromCollector):
    """Register with a ``CollectorRegistry``; every scrape reads the collector's latest snapshot."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def collect(self) -> Iterator[Metric]:
        f = _Families()
        c = self.collector
        f.counter("shoal_monitor_polls", "Polls the monitor has done.", []).add_metric([], c.polls)
        f.counter("shoal_monitor_poll_errors", "Polls that failed.", []).add_metric([], c.errors)
        f.gauge("shoal_monitor_up", "1 when the monitor's last poll succeeded.", []).add_metric(
            [], 0.0 if c.last_error is not None else 1.0
        )
        snap = c.served_snapshot()
        if snap is not None:
            _set(f.gauge("shoal_monitor_status_code", "Worst status (0 OK .. 5 ERR).", []), [], snap.status.code)
            _set(
                f.gauge("shoal_monitor_last_poll_timestamp_seconds", "When the snapshot was taken.", []),
                [],
                snap.generated_at,
            )
            for t in snap.tables:
                for p in t.partitions:
                    self._partition(f, t.table, p)
            for q in snap.spark_queries:
                _set(
                    f.gauge("shoal_spark_query_status_code", "Spark ingest query status.", ["query"]),
                    [q.query],
                    q.status.code,
                )
                for part in q.partitions:
                    lab = [q.query, part.topic, str(part.partition)]
                    names = ["query", "topic", "kafka_partition"]
                    _set(f.gauge("shoal_spark_query_lag_records", "Spark query lag.", names), lab, part.lag_records)
                    _set(
                        f.gauge("shoal_spark_query_lag_seconds", "Spark query lag in seconds.", names),
                        lab,
                        part.lag_seconds,
                    )
        yield from f.items.values()

    def _partition(self, f: _Families, table: str, p: PartitionReport) -> None:
        pl = [table, p.partition_id]
        _set(f.gauge("shoal_partition_leader_epoch", "Leader epoch.", _P), pl, p.epoch)
        _set(f.counter("shoal_partition_leader_changes", "Leader changes seen.", _P), pl, p.leader_changes)
        _set(f.gauge("shoal_partition_status_code", "Worst channel status.", _P), pl, p.status.code)
        ing = p.ingest
        if ing.exists:
            _set(f.gauge("shoal_ingest_log_end_offset", "Ingest topic log end.", _P), pl, ing.log_end)
            _set(f.gauge("shoal_ingest_accepted_index", "Accepted-by-leader index.", _P), pl, ing.accepted_index)
            _set(f.gauge("shoal_ingest_lag_records", "Ingest lag (records).", _P), pl, ing.lag_records)
            _set(f.gauge("shoal_ingest_lag_seconds", "Ingest lag (seconds).", _P), pl, ing.lag_seconds)
        _set(f.gauge("shoal_ingest_status_code", "Ingest status.", _P), pl, ing.status.code)
        for ch in p.wal:
            if not ch.exists:
                continue
            cl = [*pl, str(ch.owner.placement_id), ch.owner.server_id]
            _set(f.gauge("shoal_wal_append_index", "WAL Append index (log end).", _CH), cl, ch.append_index)
            _set(f.gauge("shoal_wal_tail_index", "WAL Tail index (log start).", _CH), cl, ch.tail_index)
            for r in ch.replicas:
                rl = [*cl, str(r.placement_id), r.server_id]
                _set(f.gauge("shoal_wal_ack_index", "Replica Ack index.", _RP), rl, r.ack_index)
                _set(f.gauge("shoal_wal_consume_index", "Replica Consume index.", _RP), rl, r.consume_index)
                _set(f.gauge("shoal_wal_lag_records", "Replica lag (records).", _RP), rl, r.lag_records)
                _set(f.gauge("shoal_wal_lag_seconds", "Replica lag (seconds).", _RP), rl, r.lag_seconds)
                _set(
                    f.gauge("shoal_wal_lag_bytes_estimate", "Replica lag (bytes, estimate).", _RP),
                    rl,
                    r.lag_bytes_estimate,
                )
                _set(f.gauge("shoal_wal_status_code", "Replica status on the WAL.", _RP), rl, r.status.code)
        for sc in p.segments:
            if not sc.exists:
                continue
            cl = [*pl, str(sc.owner.placement_id), sc.owner.server_id]
            _set(f.gauge("shoal_segments_manifests", "Segments published.", _CH), cl, sc.manifests)
            _set(f.gauge("shoal_segments_majors", "Major segments published.", _CH), cl, sc.majors)
            _set(
                f.gauge("shoal_segments_minors_awaiting_compaction", "Minors after the latest major.", _CH),
                cl,
                sc.minors_awaiting_compaction,
            )
            for sr in sc.replicas:
                rl = [*cl, str(sr.placement_id), sr.server_id]
                _set(f.gauge("shoal_segments_ack_index", "Replica ack on segments.", _RP), rl, sr.ack_index)
                _set(f.gauge("shoal_segments_unacked", "Segments not acked.", _RP), rl, sr.unacked_segments)
                _set(f.gauge("shoal_segments_lag_records", "Replica lag (records).", _RP), rl, sr.lag_records)
                _set(f.gauge("shoal_segments_lag_seconds", "Replica lag (seconds).", _RP), rl, sr.lag_seconds)
                _set(f.gauge("shoal_segments_status_code", "Replica status.", _RP), rl, sr.status.code)
