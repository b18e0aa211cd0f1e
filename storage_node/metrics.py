"""A storage node's own Prometheus exporter: its counters, read from the node at every scrape.

The node passes a *stats provider*: a callable returning ``{partition_id: {counter: value}}``
(the key ``""`` for node-wide counters). Every counter becomes ``shoal_node_<counter>_total``
with labels ``server`` and ``partition`` (empty for node-wide). Counter names are
``[a-z][a-z0-9_]*``; a name ending in ``_total`` keeps a single suffix. The names listed in
:data:`GAUGE_HELP` are current values, not counters: they are exported as gauges
``shoal_node_<name>`` (no suffix). Documented counters (a node reports those it has; others are
exported with a generic help text):

=============================  ===================================================================
``fast_forwards``              segments added without reading their data (follower, section 5)
``merges``                     segments or WAL batches merged row by row (follower, adoption)
``segments_written``           minor/major segment files written by this replica as leader
``segments_received``          segments received and made durable from a leader's channel
``segments_acked``             segment acks committed (replica_group)
``leader_changes``             times this replica became or stopped being leader
``transactions``               Kafka transactions committed by the leader (ingest -> WAL)
``wal_records``                WAL records produced
``rows``                       rows accepted
``deadlettered``               ingest messages refused to deadletter
``out_of_order``               manifests answered OUT_OF_ORDER (replayed from the latest major)
``invalid_segments``           manifests or chunks refused as INVALID
``stalls``                     leader loop steps slowed by the writer stall (minors over the limit)
``decoded_limit_splits``       leader transactions ended early: decoded rows reached the memory bound
``segments_deleted``           segment files deleted by garbage collection (folded into a major)
=============================  ===================================================================

Documented gauges:

=============================  ===================================================================
``is_leader``                  1 while this replica leads the partition, else 0 (its role)
``epoch``                      the partition's leader epoch this replica last saw (-1 unknown)
``minors_awaiting_compaction`` minor segments on the chain since its latest major
``segments``                   entries in this replica's segment list
=============================  ===================================================================

Usage in the node::

    exporter = start_node_metrics(9464, lambda: node.stats(), server_id="node-1")
    ...
    exporter.close()

The provider is called on the scrape thread; it must be quick and thread-safe (return a copy).
A provider that raises makes that scrape expose only ``shoal_node_stats_errors_total``.

Served by prometheus_client itself: :func:`prometheus_client.start_http_server` with the
exporter's own registry (its WSGI server on its own daemon thread), not a hand-written server.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector as PromCollector

from storage_node.errors import MetricsError

log = logging.getLogger(__name__)
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,99}$")

COUNTER_HELP = {
    "fast_forwards": "Segments added without reading their data (fast-forward).",
    "merges": "Segments or WAL batches merged row by row.",
    "segments_written": "Segment files written as leader.",
    "segments_received": "Segments received and made durable from a leader's channel.",
    "segments_acked": "Segment acks committed.",
    "leader_changes": "Times this replica became or stopped being leader.",
    "transactions": "Kafka transactions committed by the leader.",
    "wal_records": "WAL records produced.",
    "rows": "Rows accepted.",
    "deadlettered": "Ingest messages refused to deadletter.",
    "out_of_order": "Manifests answered OUT_OF_ORDER.",
    "invalid_segments": "Manifests or chunks refused as INVALID.",
    "stalls": "Leader loop steps slowed by the writer stall (too many minors await compaction).",
    "segments_deleted": "Segment files deleted by garbage collection (folded into a major).",
    "decoded_limit_splits": "Leader transactions ended early because their decoded rows reached the memory bound.",
}

GAUGE_HELP = {
    "is_leader": "1 while this replica leads the partition, else 0.",
    "epoch": "The partition's leader epoch this replica last saw (-1 unknown).",
    "minors_awaiting_compaction": "Minor segments on the chain since its latest major.",
    "segments": "Entries in this replica's segment list.",
}


class StatsProvider(Protocol):
    """Returns ``{partition_id or "": {counter name: value}}``: monotonically growing counters."""

    def __call__(self) -> Mapping[str, Mapping[str, float]]: ...


class NodeStatsCollector(PromCollector):
    def __init__(self, provider: StatsProvider, server_id: str) -> None:
        self.provider = provider
        self.server_id = server_id
        self.errors = 0

    def collect(self) -> Iterator[Metric]:
        errors = CounterMetricFamily("shoal_node_stats_errors", "Scrapes where the stats provider failed.", labels=[])
        try:
            stats = self.provider()
            families = self._families(stats)
        except Exception:
            log.exception("node stats provider failed")
            self.errors += 1
            families = {}
        errors.add_metric([], self.errors)
        yield errors
        yield from families.values()

    def _families(self, stats: Mapping[str, Mapping[str, float]]) -> dict[str, Metric]:
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for partition, counters in stats.items():
            for name, value in counters.items():
                base = name[: -len("_total")] if name.endswith("_total") else name
                if not _NAME.fullmatch(base):
                    raise MetricsError(name, f"node counter name must match [a-z][a-z0-9_]*, got {name!r:.80}")
                fam = families.get(base)
                if fam is None:
                    if name in GAUGE_HELP:
                        fam = GaugeMetricFamily(f"shoal_node_{name}", GAUGE_HELP[name], labels=["server", "partition"])
                    else:
                        fam = CounterMetricFamily(
                            f"shoal_node_{base}",
                            COUNTER_HELP.get(base, f"Node counter {base}."),
                            labels=["server", "partition"],
                        )
                    families[base] = fam
                fam.add_metric([self.server_id, partition], float(value))
        return dict(families)


class NodeMetricsExporter:
    """The running exporter: ``port``, ``url``, ``registry``; ``close()`` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread, registry: CollectorRegistry, host: str) -> None:
        self.server = server
        self.thread = thread
        self.registry = registry
        self.host = host

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def __enter__(self) -> NodeMetricsExporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_node_metrics(
    port: int, stats_provider: StatsProvider, *, server_id: str = "", host: str = "127.0.0.1"
) -> NodeMetricsExporter:
    """Serve ``/metrics`` on ``host:port`` (0 = any free port) from ``stats_provider``, in a thread."""
    if not callable(stats_provider):
        raise MetricsError("stats_provider", f"stats_provider must be callable, got {type(stats_provider).__name__}")
    if not 0 <= port <= 65535:
        raise MetricsError("port", f"HTTP port must be in [0, 65535], got {port}")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeStatsCollector(stats_provider, server_id))
    server, thread = start_http_server(port, addr=host, registry=registry)
    return NodeMetricsExporter(server, thread, registry, host)
