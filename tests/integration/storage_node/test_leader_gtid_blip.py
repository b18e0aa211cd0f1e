"""GTIDs strictly increase across a ZooKeeper blip of the leader (DESIGN.md sections 7 and 10).

A real storage node reaches ZooKeeper through a TCP forwarder the test can cut: the node's kazoo
client sees SUSPENDED, its leader role stops at the next batch, and when the forwarder lets it
reconnect (same session) the node leads again. Its WAL was truncated up to what its segments cover
(as Tail does), so the record just before the covered end is gone. The resumed leadership must take
a fresh epoch and stamp GTIDs above every older row: the newest value of a key wins.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from kazoo.protocol.states import KazooState
from node_it_support import make_table, produce_rows, rows

from metadata.client import MetadataClient, MetadataConfig
from metadata.election import LeaderState, read_epoch
from shoal.kafka import clients
from shoal.kafka.indexes import channel_indexes
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames
from shoal_app.cli.verify import verify_table
from shoal_app.testing.wait import wait_until
from storage_node.config import FlushPolicy, NodeConfig
from storage_node.node import HeldPartition, StorageNode

pytestmark = pytest.mark.integration


class CuttableProxy:
    """A TCP forwarder to ``target``; :meth:`cut` drops every connection and refuses new ones until
    :meth:`restore` (a network blip, the server and the session stay)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="zk-proxy").start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            if not self._open.is_set():
                conn.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                conn.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self._open.clear()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def restore(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()


@contextlib.contextmanager
def _node(meta: MetadataConfig, base: Path) -> Iterator[StorageNode]:
    config = NodeConfig("node-1", base / "node-1", meta.connection, flush=FlushPolicy(max_rows=20), table_poll_s=0.2)
    node = StorageNode(config, metadata=meta)
    thread = threading.Thread(target=node.run, daemon=True, name="node-node-1")
    thread.start()
    try:
        assert node.ready.wait(60)
        yield node
    finally:
        node.stop()
        thread.join(60)


def _leading(node: StorageNode, pid: str) -> HeldPartition | None:
    held = node.partitions().get(pid)
    if held is None or held.leader is None or held.election is None:
        return None
    ok = held.leader.ready.is_set() and not held.leader.stopped.is_set()
    return held if ok and held.election.state is LeaderState.LEADER else None


def test_a_leader_resumed_after_a_zookeeper_blip_stamps_gtids_above_older_rows(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    hostport, _, chroot = zk_hosts.partition("/")
    host, port = hostport.rsplit(",", 1)[-1].rsplit(":", 1)
    proxy = CuttableProxy((host, int(port)))
    direct = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    via_proxy = MetadataConfig(
        zk_hosts=f"127.0.0.1:{proxy.port}/{chroot}", bootstrap_servers=bs, topic_prefix=topic_prefix, zk_timeout_s=30
    )
    table = make_table()
    topics = TopicNames(topic_prefix)
    kafka = KafkaSettings(bs)
    try:
        with MetadataClient(direct) as client, _node(via_proxy, tmp_path) as node:
            pid = client.coordinator.create_table(table, ["node-1"], []).partitions[0].partition_id
            assert wait_until(lambda: _leading(node, pid) is not None, 90)
            held = _leading(node, pid)
            assert held is not None and held.election is not None
            first_epoch = held.election.check_writable().epoch
            produce_rows(bs, topics.ingest(pid), rows(table, list(range(20)), ["old"] * 20))

            # the 20 rows are one durable segment; Tail truncates the WAL up to what it covers
            def flushed() -> bool:
                h = node.partitions()[pid]
                return h.replica.memtable.rows == 0 and h.replica.covered_end() >= 1

            assert wait_until(flushed, 60)
            wal = topics.wal(pid, held.placement_id)
            covered = held.replica.covered_end()
            admin = clients.admin(kafka)
            for fut in admin.delete_records([TopicPartition(wal, 0, covered)], operation_timeout=30).values():
                fut.result(timeout=30)
            assert channel_indexes(kafka, wal).tail == covered
            old_top = max(
                (r["_shoal_epoch"], r["_shoal_seq"]) for r in held.replica.scan(include_system=True).to_pylist()
            )

            # the blip: SUSPENDED, a write arrives (the role stops at that batch), then reconnected
            zk = node._client.zk if node._client is not None else None
            assert zk is not None
            proxy.cut()
            assert wait_until(lambda: zk.state == KazooState.SUSPENDED, 30)
            old_role = held.leader
            assert old_role is not None
            produce_rows(bs, topics.ingest(pid), rows(table, [5, 6, 7, 8, 9], ["new"] * 5))
            assert wait_until(lambda: old_role.stopped.is_set(), 30), old_role.role_state
            proxy.restore()
            assert wait_until(lambda: zk.state == KazooState.CONNECTED, 30)
            assert wait_until(lambda: (h := _leading(node, pid)) is not None and h.leader is not old_role, 90)
            produce_rows(bs, topics.ingest(pid), rows(table, [0, 19], ["newer"] * 2))

            def values() -> dict[int, Any]:
                h = node.partitions()[pid]
                return {r["k"]: r for r in h.replica.scan(include_system=True).to_pylist()}

            expect = {k: "newer" if k in (0, 19) else "new" if 5 <= k <= 9 else "old" for k in range(20)}
            assert wait_until(lambda: {k: r["v"] for k, r in values().items()} == expect, 60), values()
            rewritten = [v for k, v in values().items() if expect[k] != "old"]
            assert all((r["_shoal_epoch"], r["_shoal_seq"]) > old_top for r in rewritten), (old_top, rewritten)
            now = read_epoch(client.zk, client.layout, pid)
            assert now.epoch > first_epoch and now.server_id == "node-1"
            # every channel's GTIDs are in order, and shoal verify says so
            assert wait_until(lambda: node.partitions()[pid].replica.memtable.rows == 0, 60)
            report = verify_table(client, "events")
            assert report["ok"], report
    finally:
        proxy.close()
