"""Helpers for the fault tests: a three-node cluster of node processes, a writer that records acks."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent / "integration" / "storage_node"))

from node_it_support import NodeProcesses, make_table

from metadata.client import MetadataClient, MetadataConfig
from metadata.election import read_epoch
from metadata.node_registry import lookup_node
from producer import Producer, ProducerConfig
from shoal.jvm import jars
from shoal.kafka.settings import ConnectionSettings
from shoal.scan import ScanRequest, describe_remote, scan_remote
from shoal_app.cli.verify import verify_table
from shoal_app.runtime import launcher
from shoal_app.testing.wait import wait_until

NODES = ("node-1", "node-2", "node-3")
__all__ = ["NODES", "NodeProcesses", "Writer", "make_table", "own_cluster", "wait_until"]


@contextlib.contextmanager
def own_cluster(
    data_dir: Path, prefix: str, *, brokers: int, nodes: int, kafka_heap_mb: int = 384, start_timeout_s: float = 150
) -> Iterator[launcher.LocalClusterConfig]:
    """A local cluster of our own (``shoal up`` in ``data_dir``: ZooKeeper, ``brokers`` KRaft brokers,
    ``nodes`` storage nodes), so restarting ZooKeeper or a broker hurts nobody else's servers; always
    stopped (every process by pid) at the end."""
    config = launcher.LocalClusterConfig(
        data_dir=data_dir,
        cache_dir=jars.cache_dir_from(os.environ),
        brokers=brokers,
        nodes=nodes,
        topic_prefix=prefix,
        kafka_heap_mb=kafka_heap_mb,
        start_timeout_s=start_timeout_s,
        fresh=True,
    )
    try:
        launcher.up(config)
        yield config
    finally:
        if config.cluster_file.exists():
            launcher.down(config.cluster_file, timeout_s=15)


def written_value(key: int) -> str:
    """The one value :class:`Writer` writes for ``key`` (each key once)."""
    return f"v{key}"


def wrong_values(rows: list[tuple[int, str | None]]) -> list[tuple[int, str | None]]:
    """The rows whose value is not the one written for their key."""
    return [(k, v) for k, v in rows if v != written_value(k)]


class Writer(threading.Thread):
    """Writes batches of unique keys; a key is *acknowledged* once ``sync()`` returned after its batch."""

    def __init__(
        self, bootstrap: str, zk_hosts: str, prefix: str, *, first_key: int = 0, batch: int = 20, pause_s: float = 0.1
    ) -> None:
        super().__init__(daemon=True, name="fault-writer")
        self.config = ProducerConfig(ConnectionSettings.plain(bootstrap, zk_hosts, topic_prefix=prefix))
        self.first_key, self.batch, self.pause_s = first_key, batch, pause_s
        self.acked: set[int] = set()
        self.sent: set[int] = set()
        self.sync_failures = 0
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Producer(self.config) as producer:
                next_key = self.first_key
                pending: list[int] = []
                while not self.halt.is_set():
                    keys = list(range(next_key, next_key + self.batch))
                    next_key += self.batch
                    producer.write("events", [{"k": k, "v": written_value(k)} for k in keys])
                    self.sent.update(keys)
                    pending += keys
                    try:
                        producer.sync(timeout=60)
                    except Exception:
                        self.sync_failures += 1
                        continue
                    self.acked.update(pending)
                    pending = []
                    self.halt.wait(self.pause_s)
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self.halt.set()
        self.join(120)
        assert not self.is_alive(), "writer did not stop"
        assert self.error is None, self.error


class Cluster3:
    """Three node processes holding one table (rf=3, one partition)."""

    def __init__(self, tmp: Path, cluster: Any, zk_hosts: str, prefix: str) -> None:
        self.bs, self.zk_hosts, self.prefix = cluster.bootstrap_servers, zk_hosts, prefix
        self.meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=self.bs, topic_prefix=prefix)
        self.client = MetadataClient(self.meta)
        self.nodes = NodeProcesses(tmp, zk_hosts, self.bs, prefix, flush_rows=60, flush_age=1.0)
        self.pid = ""
        self.writers: list[Writer] = []
        self.why: str | None = None
        """Why the last :meth:`converged` said no."""

    def __enter__(self) -> Cluster3:
        self.client.__enter__()
        file = self.client.coordinator.create_table(make_table(replication_factor=3), list(NODES))
        self.pid = file.partitions[0].partition_id
        for n in NODES:
            self.nodes.start(n)
        assert wait_until(lambda: self.leader() is not None, 90)
        return self

    def __exit__(self, *exc: object) -> None:
        for w in self.writers:  # never leave a producer behind (it would outlive the Kafka fixture)
            w.halt.set()
            w.join(90)
        self.nodes.close()
        self.client.close()

    def epoch(self) -> tuple[int, str | None, int | None]:
        rec = read_epoch(self.client.zk, self.client.layout, self.pid)
        return rec.epoch, rec.server_id, rec.placement_id

    def leader(self) -> str | None:
        return self.epoch()[1]

    def writer(self, first_key: int = 0) -> Writer:
        w = Writer(self.bs, self.zk_hosts, self.prefix, first_key=first_key)
        w.start()
        self.writers.append(w)
        return w

    def report(self) -> dict[str, Any]:
        try:
            return verify_table(self.client, "events")
        except Exception as exc:
            return {"ok": False, "error": str(exc), "partitions": []}

    def describe(self, server_id: str) -> dict[str, Any] | None:
        try:
            location = lookup_node(self.client.zk, self.client.layout, server_id)
            found = [d for d in describe_remote(location, "events") if d["partition_id"] == self.pid]
        except Exception:
            return None
        return found[0] if found else None

    def rows_on(self, server_id: str) -> list[tuple[int, str | None]]:
        """(k, v) of every row ``server_id``'s replica holds."""
        location = lookup_node(self.client.zk, self.client.layout, server_id)
        table = scan_remote(location, ScanRequest("events", self.pid))
        return list(zip(table.column("k").to_pylist(), table.column("v").to_pylist(), strict=True))

    def keys_on(self, server_id: str) -> list[int]:
        """The keys of ``server_id``'s replica; AssertionError if one holds a value never written."""
        rows = self.rows_on(server_id)
        wrong = wrong_values(rows)
        assert not wrong, f"{server_id}: {len(wrong)} keys hold a value never written, e.g. {wrong[:5]}"
        return [k for k, _ in rows]

    def converged(self, acked: set[int], sent: set[int]) -> bool:
        """Every replica agrees, holds every acknowledged key, and nothing that was never sent (why not:
        ``self.why``, which :meth:`summary` reports)."""
        self.why = self._not_converged(acked, sent)
        return self.why is None

    def _not_converged(self, acked: set[int], sent: set[int]) -> str | None:
        rep = self.report()
        if not rep["ok"]:
            flags = [
                {k: p.get(k) for k in ("agree", "wal_chains_ok", "gtids_ok", "gtid_error", "covered", "coverage_error")}
                for p in rep["partitions"]
            ]
            channels = [
                (c.get("topic"), c.get("error"))
                for p in rep["partitions"]
                for c in (*p.get("wal_channels", []), *p.get("segments_channels", []))
                if not c.get("ok", True) or c.get("error")
            ]
            return f"verify: {rep.get('error')} {flags} channels {channels}"
        for server in NODES:
            try:
                rows = self.rows_on(server)
            except Exception as exc:
                return f"{server}: cannot scan: {exc!r}"
            wrong = wrong_values(rows)
            if wrong:
                return f"{server}: {len(wrong)} keys hold a value never written, e.g. {wrong[:5]}"
            keys = [k for k, _ in rows]
            have = set(keys)
            if len(keys) != len(have):
                return f"{server}: {len(keys) - len(have)} duplicate keys"
            if not acked <= have:
                missing = sorted(acked - have)
                return f"{server}: misses {len(missing)} of {len(acked)} acknowledged keys, e.g. {missing[:5]}"
            if not have <= sent:
                return f"{server}: holds {len(have - sent)} keys never sent, e.g. {sorted(have - sent)[:5]}"
        return None

    def summary(self) -> Any:
        rep = self.report()
        return [self.why, rep.get("error")] + [
            [
                (r.get("server_id"), r.get("role"), r.get("row_count"), r.get("root"), r.get("error"))
                for r in p["replicas"]
            ]
            for p in rep["partitions"]
        ]
