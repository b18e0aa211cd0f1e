"""Kafka broker faults under writes (DESIGN.md section 10): nothing acknowledged is lost.

Each test starts its OWN local cluster (``shoal_app.runtime.launcher.up`` in a temp dir: ZooKeeper,
KRaft brokers, storage node processes), so killing a broker never hurts the session's cluster:

- three brokers, three nodes, a table with RF 3: kill -9 one broker mid-stream, keep writing,
  restart it in place (:func:`shoal_app.runtime.restart.restart_process`), keep writing, move every
  leadership back to its preferred broker (as Kafka's auto leader rebalance does): a client that
  lived through it all still reads channel indexes, and the preferred storage node leads again;
- one broker, two nodes (RF 2): kill -9 the only broker, writers retry through the outage, restart it.

A write is acknowledged only when its Kafka delivery succeeded AND ``Producer.sync()`` returned after
it; a delivery error during the outage is not an acknowledgement, and the writer sends the same keys
again. At the end every acknowledged key is on every replica exactly once with its value, nothing
that was never sent is there, and ``shoal verify --output json`` (a subprocess, as a user runs it)
reports identical replicas and intact WAL chains.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from fault_support import own_cluster

from metadata.client import MetadataClient, MetadataConfig
from metadata.election import read_epoch
from metadata.node_registry import lookup_node
from metadata.placements import preferred_leader
from metadata.table import Column, ColumnType, TableDefinition
from producer import Producer, ProducerConfig
from shoal import cluster_file
from shoal.cluster_file import ClusterInfo, ProcessRecord
from shoal.errors import KafkaOperationError, ShoalError
from shoal.kafka import clients
from shoal.kafka.indexes import ChannelIndexes, IndexQuery, close_offset_readers, committed_offsets, read_indexes
from shoal.kafka.settings import ConnectionSettings, KafkaSettings
from shoal.scan import ScanRequest, scan_remote
from shoal.topics import TopicNames
from shoal_app.cli.verify import verify_table
from shoal_app.runtime.process import is_running, kill
from shoal_app.runtime.restart import restart_process
from shoal_app.testing.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TABLE = "events"


def _table(replication_factor: int) -> TableDefinition:
    return TableDefinition(
        TABLE, (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", replication_factor
    )


class RetryingWriter(threading.Thread):
    """Writes batches of unique keys; on any error it sends the SAME keys again until they are acknowledged."""

    def __init__(self, info: ClusterInfo, prefix: str, *, batch: int = 20, pause_s: float = 0.1) -> None:
        super().__init__(daemon=True, name="broker-fault-writer")
        # short delivery timeout: messages produced while the broker is down fail instead of waiting it out
        self.config = ProducerConfig(
            ConnectionSettings.plain(info.bootstrap_servers, info.zk_connect, topic_prefix=prefix),
            kafka_config={"message.timeout.ms": 5000},
        )
        self.batch, self.pause_s = batch, pause_s
        self.acked: set[int] = set()
        self.sent: set[int] = set()
        self.failures = 0
        self.errors: collections.deque[str] = collections.deque(maxlen=8)
        """The last failed attempts (time, exception type and message), for a failed wait's message."""
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Producer(self.config) as producer:
                next_key = 0
                while not self.halt.is_set():
                    keys = list(range(next_key, next_key + self.batch))
                    next_key += self.batch
                    while not self._send(producer, keys):
                        if self.halt.is_set():
                            return
                        self.halt.wait(0.5)
                    self.halt.wait(self.pause_s)
        except BaseException as exc:
            self.error = exc

    def _send(self, producer: Producer, keys: list[int]) -> bool:
        self.sent.update(keys)
        try:
            result = producer.write(TABLE, [{"k": k, "v": f"v{k}"} for k in keys])
            producer.sync(timeout=20)  # flushes: raises if any delivery failed since the last flush
            result.wait(timeout=0)  # and every message of THIS write was delivered
        except Exception as exc:
            self.failures += 1
            self.errors.append(f"{time.strftime('%H:%M:%S')} {type(exc).__name__}: {str(exc)[:300]}")
            return False
        self.acked.update(keys)
        return True

    def progress(self) -> str:
        """How far the writer got, with its last failures: what a failed wait reports."""
        return f"{len(self.acked)} acked, {self.failures} failed attempts, last: {list(self.errors)}"

    def stop(self) -> None:
        self.halt.set()
        self.join(120)
        assert not self.is_alive(), "writer did not stop"
        assert self.error is None, self.error


class Table:
    """The test table on our own cluster: create it, read the leader, scan replicas, verify."""

    def __init__(self, info: ClusterInfo, prefix: str, servers: list[str]) -> None:
        self.info, self.prefix, self.servers = info, prefix, servers
        meta = MetadataConfig(
            zk_hosts=info.zk_connect,
            bootstrap_servers=info.bootstrap_servers,
            topic_prefix=prefix,
        )
        self.client = MetadataClient(meta)
        file = self.client.coordinator.create_table(_table(len(servers)), servers)
        self.pid = file.partitions[0].partition_id

    def close(self) -> None:
        self.client.close()

    def leader(self) -> str | None:
        try:
            return read_epoch(self.client.zk, self.client.layout, self.pid).server_id
        except Exception:
            return None

    def rows_on(self, server_id: str) -> list[tuple[int, str]]:
        location = lookup_node(self.client.zk, self.client.layout, server_id)
        t = scan_remote(location, ScanRequest(TABLE, self.pid))
        return list(zip(t.column("k").to_pylist(), t.column("v").to_pylist(), strict=True))

    def preferred_leads(self) -> bool:
        """The partition's preferred leader leads: the leader rebalancer (DESIGN.md section 7) has no
        handover left to make. One made between the convergence check and ``shoal verify`` drops the
        old leader's memtable and the followers' WAL overlay until the new leader's first segment
        arrives, and verify, rightly, reports the replicas apart at that moment."""
        try:
            entry = self.client.coordinator.current(TABLE).partitions[0]
            return self.leader() == preferred_leader(entry).server_id
        except ShoalError:
            return False

    def converged(self, acked: set[int], sent: set[int]) -> bool:
        """verify agrees, and every replica holds every acked key once (with its value), nothing unsent."""
        try:
            if not verify_table(self.client, TABLE)["ok"]:
                return False
            for server in self.servers:
                rows = self.rows_on(server)
                keys = [k for k, _ in rows]
                if len(keys) != len(set(keys)) or not acked <= set(keys) or not set(keys) <= sent:
                    return False
                if any(v != f"v{k}" for k, v in rows):
                    return False
        except Exception:
            return False
        return True

    def summary(self) -> Any:
        try:
            rep = verify_table(self.client, TABLE)
        except Exception as exc:
            return str(exc)
        return [
            [(r.get("server_id"), r.get("role"), r.get("row_count"), r.get("error")) for r in p["replicas"]]
            for p in rep["partitions"]
        ]


class Watcher:
    """One long-lived admin client reading channel indexes (:func:`shoal.kafka.indexes.read_indexes`)."""

    def __init__(self, info: ClusterInfo) -> None:
        self.admin = clients.admin(KafkaSettings(info.bootstrap_servers))
        self.operator = AdminClient({"bootstrap.servers": info.bootstrap_servers})
        """Elects and looks leaders up: any metadata request through ``admin`` would refresh its cache."""

    def read(self, topics: list[str]) -> dict[str, ChannelIndexes]:
        return read_indexes(self.admin, [IndexQuery(t) for t in topics], timeout_s=30)

    def elect_preferred(self, prefix: str) -> bool:
        """Move the leadership of every topic of ``prefix`` and of Kafka's own (group and transaction
        coordinators) to its preferred replica (True once all lead there): the nodes' long-lived
        clients meet the new leader epochs and coordinators too."""
        md = self.operator.list_topics(timeout=30)
        ours = [t for t in md.topics if t.startswith((f"{prefix}.", "__consumer_offsets", "__transaction_state"))]
        tps = [TopicPartition(t, p) for t in ours for p in md.topics[t].partitions]
        try:
            result = self.operator.elect_leaders(ElectionType.PREFERRED, tps).result(30)
        except KafkaException:
            return False
        return all(e is None or e.code() == KafkaError.ELECTION_NOT_NEEDED for e in result.values())

    def leader(self, topic: str) -> str:
        """The name of the broker process leading ``topic`` (kafka-<broker id>)."""
        return f"kafka-{self.operator.list_topics(topic, timeout=30).topics[topic].partitions[0].leader}"

    def close(self) -> None:
        close_offset_readers(self.admin)


def shoal_verify(cluster_path: Path) -> dict[str, Any]:
    """``shoal verify events --output json`` as a user runs it (addresses and prefix from the cluster file)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "shoal_app.cli.main",
            "--cluster-file",
            str(cluster_path),
            "verify",
            TABLE,
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"shoal verify exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def leader_progress(info: ClusterInfo, prefix: str, partition_id: str) -> tuple[int | None, int]:
    """(the leader group's committed offset on the ingest topic, the topic's end offset).

    Read with ``Consumer.committed`` (shoal's own reader), never the AdminClient's
    ``list_consumer_group_offsets``, which crashes the process on a coordinator error right after a
    broker restart (confluentinc/librdkafka#5040)."""
    topics = TopicNames(prefix)
    topic, group = topics.ingest(partition_id), topics.leader_group(partition_id)
    settings = KafkaSettings(info.bootstrap_servers)
    admin = clients.admin(settings)
    deadline = time.monotonic() + 60
    while True:  # the group coordinator of a broker that just started may still be loading
        try:
            committed = committed_offsets(admin, {group: [(topic, 0)]}, timeout_s=15)[group][(topic, 0)]
            break
        except ShoalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    consumer = Consumer({"bootstrap.servers": info.bootstrap_servers, "group.id": f"{prefix}-probe"})
    try:
        end = int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1])
    finally:
        consumer.close()
    return committed, end


def broker_to_kill(info: ClusterInfo, prefix: str, partition_id: str) -> ProcessRecord:
    """The broker leading the table's ingest partition (the writers' and the leader's broker)."""
    admin = AdminClient({"bootstrap.servers": info.bootstrap_servers})
    topic = TopicNames(prefix).ingest(partition_id)
    leader_id = admin.list_topics(topic, timeout=30).topics[topic].partitions[0].leader
    record = info.process(f"kafka-{leader_id}")
    assert record is not None and is_running(record), (leader_id, info.processes)
    return record


def test_kill_one_of_three_brokers_under_writes_loses_nothing(tmp_path: Path, topic_prefix: str) -> None:
    servers = ["node-1", "node-2", "node-3"]
    with own_cluster(tmp_path / "three", topic_prefix, brokers=3, nodes=3) as config:
        info = cluster_file.read(config.cluster_file)
        table = Table(info, topic_prefix, servers)
        writer = RetryingWriter(info, topic_prefix)
        watcher = Watcher(info)  # one admin client across the fault, as a node's and the monitor's are
        try:
            assert wait_until(lambda: table.leader() is not None, 90), "no leader elected"
            writer.start()
            assert wait_until(lambda: len(writer.acked) >= 100, 90), (len(writer.acked), writer.error)
            victim = broker_to_kill(info, topic_prefix, table.pid)
            ingest = TopicNames(topic_prefix).ingest(table.pid)
            watcher.read([ingest])  # its metadata cache now holds the victim as the ingest partition's leader
            kill(victim)  # kill -9, mid-stream
            assert wait_until(lambda: not is_running(victim), 30)
            with contextlib.suppress(KafkaOperationError):  # no answer while the leader moves is an error...
                [found] = watcher.read([ingest]).values()
                assert 0 <= found.tail <= found.append, found  # ...never an index of -1001 (OFFSET_INVALID)
            before = len(writer.acked)
            assert wait_until(lambda: len(writer.acked) >= before + 100, 180), (
                f"writes stopped with 2 of 3 brokers: {writer.progress()}"
            )
            info = restart_process(info, victim.name, cache_dir=config.cache_dir, kafka_heap_mb=config.kafka_heap_mb)
            restarted = info.process(victim.name)
            assert restarted is not None and restarted.pid != victim.pid and is_running(restarted)
            before = len(writer.acked)
            assert wait_until(lambda: len(writer.acked) >= before + 100, 180), (
                f"writes stopped after the restart: {writer.progress()}"
            )
            # leadership back on the restarted broker, as Kafka's auto leader rebalance does after a while
            # (it did in a CI run, and the nodes' admin clients got FENCED_LEADER_EPOCH ever after): the
            # ingest partition's leader epoch moved again since the watcher last asked
            assert wait_until(lambda: watcher.elect_preferred(topic_prefix), 90), "no preferred leader election"
            # the broker answering the metadata request may learn of the election a moment later
            assert wait_until(lambda: watcher.leader(ingest) == victim.name, 30), (watcher.leader(ingest), victim.name)
            [found] = watcher.read([ingest]).values()  # not FENCED_LEADER_EPOCH from a stale cache
            assert 0 <= found.tail <= found.append and found.append > 0, found
            writer.stop()
            acked, sent = set(writer.acked), set(writer.sent)
            assert wait_until(table.preferred_leads, 120), (table.leader(), table.summary())
            assert wait_until(lambda: table.converged(acked, sent), 120), table.summary()
            report = shoal_verify(config.cluster_file)
            assert report["ok"] is True
            [part] = report["partitions"]
            assert sorted(r["server_id"] for r in part["replicas"]) == servers
            assert {r["row_count"] for r in part["replicas"]} == {len(table.rows_on("node-1"))}
            assert all(ch["ok"] for ch in part["wal_channels"])
        finally:
            writer.halt.set()
            if writer.is_alive():
                writer.join(60)
            watcher.close()
            table.close()


def test_restart_the_only_broker_under_writes_loses_nothing(tmp_path: Path, topic_prefix: str) -> None:
    servers = ["node-1", "node-2"]
    with own_cluster(tmp_path / "one", topic_prefix, brokers=1, nodes=2) as config:
        info = cluster_file.read(config.cluster_file)
        table = Table(info, topic_prefix, servers)
        writer = RetryingWriter(info, topic_prefix)
        try:
            assert wait_until(lambda: table.leader() is not None, 90), "no leader elected"
            writer.start()
            assert wait_until(lambda: len(writer.acked) >= 100, 90), (len(writer.acked), writer.error)
            broker = info.process("kafka-1")
            assert broker is not None
            kill(broker)
            assert wait_until(lambda: not is_running(broker), 30)
            failures = writer.failures
            # the broker stays down longer than the writer's delivery timeout: writes fail and are retried
            assert wait_until(lambda: writer.failures > failures, 60), "writes did not notice the outage"
            time.sleep(6)
            acked_during_outage = len(writer.acked)
            info = restart_process(info, "kafka-1", cache_dir=config.cache_dir, kafka_heap_mb=config.kafka_heap_mb)
            committed_at_restart = leader_progress(info, topic_prefix, table.pid)[0]
            # librdkafka can wedge the leader in send_offsets_to_transaction here (#5456): the leader's bound
            # (LeaderConfig.transaction_call_timeout_s, 60 s) ends the role and a fresh producer takes over.
            if not wait_until(lambda: len(writer.acked) >= acked_during_outage + 100, 180):
                committed, end = leader_progress(info, topic_prefix, table.pid)
                raise AssertionError(
                    ("writes did not resume after the restart", committed_at_restart, committed, end, writer.failures)
                )
            writer.stop()
            acked, sent = set(writer.acked), set(writer.sent)
            assert wait_until(table.preferred_leads, 120), (table.leader(), table.summary())
            assert wait_until(lambda: table.converged(acked, sent), 120), table.summary()
            report = shoal_verify(config.cluster_file)
            assert report["ok"] is True
            assert all(ch["ok"] for p in report["partitions"] for ch in p["wal_channels"])
        finally:
            writer.halt.set()
            if writer.is_alive():
                writer.join(60)
            table.close()
