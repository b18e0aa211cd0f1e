"""Offset monitoring (DESIGN.md section 3): replication indexes, lag and status of every channel.

One job per module:

- :mod:`monitor.config` the frozen, validated settings (window length, poll interval, history dir);
- :mod:`monitor.topology` which channels exist: tables, partitions, placements, leaders and epochs
  from ZooKeeper, turned into the ingest / WAL / segments channels of section 3 and their groups;
- :mod:`monitor.kafka_offsets` one round trip per question to Kafka: log start/end, committed
  offsets, topic and cluster ids, group members, and the record at a committed offset (lag in
  seconds and bytes);
- :mod:`monitor.segments` manifests on a segments channel, incrementally (which replica acked what);
- :mod:`monitor.status` Burrow's lag evaluation rules over a sliding window, with its false alarms fixed;
- :mod:`monitor.history` the sliding windows and events, persisted to disk so a restart is not blind;
- :mod:`monitor.collector` one poll: everything above turned into the snapshot;
- :mod:`monitor.models` the JSON shapes as types: the snapshot, the chart series, the history file
  (their JSON Schemas are committed under ``docs/schemas/``);
- :mod:`monitor.metrics` the snapshot as Prometheus metrics; :mod:`storage_node.metrics` a storage
  node's own exporter;
- :mod:`monitor.web` the HTTP server: page, JSON API and ``/metrics``.
"""
