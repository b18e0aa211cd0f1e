"""A storage node process (``shoal node --id ID``): discovery, elections, leaders, scans.

Lifetime (:meth:`StorageNode.run`): one :class:`contextlib.ExitStack` owns the metadata client,
the Arrow Flight server, the table watchers, the elections and the leaders, and releases them in
reverse order on SIGTERM/SIGINT or when ``stop()`` is called. Threads, not asyncio: one thread per
leader, the Flight server's own pool, one watcher thread per table.

For every table, every committed METADATA version runs partition discovery for this server; for
each partition where this server's placement is LIVE the node holds a replica and campaigns in the
partition's election. When it wins, it starts a :class:`PartitionLeader` whose epoch is the
election's (``check_writable``), so a SUSPENDED or LOST leadership stops writes at the next batch.
Followers (LOAD, replication) come with issue 5.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from dataclasses import dataclass, field
from types import FrameType

from metadata.client import MetadataClient, MetadataConfig
from metadata.discovery import ReplicaState, discover
from metadata.election import Leadership, LeaderState, PartitionElection
from metadata.keyspace import KeyRange
from metadata.metadata_file import MetadataFile
from metadata.notify import TableWatcher
from metadata.table import TableDefinition
from storage_node.config import NodeConfig
from storage_node.partition import PartitionLeader, PartitionReplica
from storage_node.serve import ScanServer, register_node

log = logging.getLogger(__name__)


@dataclass
class HeldPartition:
    table: TableDefinition
    partition_id: str
    placement_id: int
    key_range: KeyRange
    replica: PartitionReplica
    election: PartitionElection | None = None
    leader: PartitionLeader | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class StorageNode:
    def __init__(self, config: NodeConfig, *, metadata: MetadataConfig | None = None) -> None:
        self.config = config
        self.metadata_config = metadata or MetadataConfig(
            zk_hosts=config.zk_hosts,
            bootstrap_servers=config.bootstrap_servers,
            topic_prefix=config.topic_prefix,
            zk_root=config.zk_root,
        )
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._held: dict[str, HeldPartition] = {}
        self._watchers: dict[str, TableWatcher] = {}
        self._client: MetadataClient | None = None
        self.location: str | None = None
        self.ready = threading.Event()

    # -- public --------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    def partitions(self) -> dict[str, HeldPartition]:
        with self._lock:
            return dict(self._held)

    def replicas(self, table: str, partition_id: str | None) -> list[PartitionReplica]:
        with self._lock:
            return [
                h.replica
                for h in self._held.values()
                if h.table.name == table and (partition_id is None or h.partition_id == partition_id)
            ]

    def run(self) -> None:
        """Run until ``stop()`` or SIGTERM/SIGINT (when called on the main thread)."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            client = stack.enter_context(MetadataClient(self.metadata_config))
            self._client = client
            server = ScanServer(f"grpc://{self.config.flight_host}:{self.config.flight_port}", self.replicas)
            stack.callback(server.shutdown)
            threading.Thread(target=server.serve, daemon=True, name="flight").start()
            self.location = f"grpc://{self.config.flight_host}:{server.port}"
            register_node(client.zk, client.layout, self.config.server_id, self.location, self.metadata_config.security)
            stack.callback(self._release_all)
            log.info("node %s serving scans at %s", self.config.server_id, self.location)
            self.ready.set()
            while not self._stop.is_set():
                self._watch_new_tables(client)
                self._stop.wait(self.config.table_poll_s)
            log.info("node %s stopping", self.config.server_id)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        self._stop.set()

    # -- discovery -----------------------------------------------------------------------------

    def _watch_new_tables(self, client: MetadataClient) -> None:
        try:
            tables = client.coordinator.list_tables()
        except Exception:
            log.exception("cannot list tables")
            return
        for name in tables:
            if name not in self._watchers:
                try:
                    self._watchers[name] = client.watch(name, self._on_file)
                except Exception:
                    log.exception("cannot watch table %s", name)

    def _on_file(self, file: MetadataFile) -> None:
        if self._stop.is_set():
            return
        for d in discover(file, self.config.server_id):
            if d.state is not ReplicaState.LIVE or d.placement_id is None:
                continue  # LOAD / UNLOAD replicas: issue 5
            with self._lock:
                if d.partition_id in self._held:
                    continue
                replica = PartitionReplica(file.table, d.partition_id, d.placement_id, self.config.data_dir)
                held = HeldPartition(file.table, d.partition_id, d.placement_id, d.key_range, replica)
                self._held[d.partition_id] = held
            self._campaign(held)

    def _campaign(self, held: HeldPartition) -> None:
        assert self._client is not None

        def on_change(state: LeaderState, leadership: Leadership | None) -> None:
            if state is LeaderState.LEADER:
                self._start_leader(held)
            elif state is LeaderState.LOST and held.leader is not None:
                held.leader.request_stop()  # it also stops by itself at its next batch (check_writable)

        election = PartitionElection(
            self._client.zk,
            held.partition_id,
            self.config.server_id,
            held.placement_id,
            replica_state=ReplicaState.LIVE,
            layout=self._client.layout,
            security=self.metadata_config.security,
            on_change=on_change,
        )
        held.election = election
        election.start()

    def _start_leader(self, held: HeldPartition) -> None:
        if self._stop.is_set():
            return
        with held.lock:
            if held.leader is not None and not held.leader.stopped.is_set():
                return
            if held.leader is not None:  # a previous term: its replica state is rebuilt by recovery
                held.leader.stop()
                held.replica.close()
                held.replica = PartitionReplica(held.table, held.partition_id, held.placement_id, self.config.data_dir)
            election = held.election
            assert election is not None
            leader = PartitionLeader(
                held.replica,
                self.config.leader_config(),
                lambda: election.check_writable().epoch,
                key_range=held.key_range,
            )
            held.leader = leader.start()
            log.info("node %s leads %s", self.config.server_id, held.replica.name)

    def _release_all(self) -> None:
        for w in list(self._watchers.values()):
            w.stop()
        for held in self.partitions().values():
            if held.leader is not None:
                held.leader.stop()
            if held.election is not None:
                held.election.close()
            held.replica.close()
