"""A storage node process (``shoal node --id ID``): discovery, elections, leaders, scans.

Lifetime (:meth:`StorageNode.run`): one :class:`contextlib.ExitStack` owns the metadata client,
the Arrow Flight server, the metrics exporter, the table watchers, the elections and the roles, and
releases them in reverse order on SIGTERM/SIGINT or when ``stop()`` is called; the roles of every
held partition stop together, within one bound (:meth:`StorageNode._release_all`).

Threads, not asyncio. The node's layers (DESIGN.md section 11): :mod:`storage_node.replica` (state)
<- :mod:`storage_node.replication` (procedures) <- :mod:`storage_node.roles` <- this module. Every
thread the node starts (``<pid8>`` = the first 8 characters of the partition id), each a
:class:`shoal.worker.Worker` unless said otherwise:

- the caller's thread (the process's main thread in ``shoal node``): :meth:`StorageNode.run` looks
  for new tables every ``table_poll_s`` and supervises every held partition (re-registers the
  node, resigns a leadership whose role ended, follows, campaigns again, hands a leadership to the
  partition's caught-up preferred leader: :mod:`storage_node.roles.rebalance`);
- ``flight`` (:class:`~storage_node.serve.FlightServing`): the Arrow Flight scan server's
  ``serve()``; gRPC's own pool answers the calls;
- ``leader-<pid8>`` (:class:`~storage_node.roles.leader.PartitionLeader`), one per partition this
  node leads: recovery, then ingest -> WAL transaction -> memtable -> segments, the writer stall
  and the garbage collection of unreferenced segments;
- ``flush-<pid8>`` (:class:`~storage_node.roles.leader.flusher.MemtableFlusher`), next to a
  leader: writes its memtable as a segment when the leader asks, one flush at a time;
- ``publish-<pid8>`` (:class:`~storage_node.replication.publish.SegmentPublisher`), next to a
  leader: publishes its chain on its segments channel, moves the Tail, deletes acked weak segments;
- ``merge-<pid8>`` (:class:`~storage_node.replication.merge_in.PeerSegmentReceiver`), next to a
  leader: receives the segments other placements push, for the leader's thread to merge;
- ``compaction-intake-<replica>`` (:class:`~storage_node.roles.compaction_intake.CompactionIntake`),
  next to a leader: commits the majors the compaction service publishes;
- ``follow-<pid8>`` (:class:`~storage_node.roles.follower.PartitionFollower`), one per partition
  this node holds but does not lead: applies the leader's segments channel and tails its WAL;
- ``lifecycle-<pid8>`` (:class:`~storage_node.roles.lifecycle.LifecycleWorker`), while there is
  lifecycle work: JOIN_FINALIZE on a leader with joining placements; UNLOAD -> UNLOAD_FINAL -> removal;
- ``split-<pid8>`` (:class:`~storage_node.roles.split.PartitionSplitter`), next to a leader whose
  partition is SPLITTING: copies its chain into the children's pieces, freezes, SPLIT_FINALIZE;
- ``forward-<parent pid8>`` (:class:`~storage_node.roles.forward.StragglerForwarder`), next to a
  leader of the partition holding a retired split parent's lowest key: forwards the rows that
  reach the parent's ingest topic to its children;
- ``handover-<pid8>`` (:class:`_Handover`), short-lived, after a lost leadership: waits for the
  leader role to end, follows, campaigns again;
- ``txn-<topic>`` (:class:`shoal.kafka.transaction.BoundedCaller`), one per transactional channel:
  a leader's WAL channel, its publisher's segments channel (and briefly each channel a new leader
  fences): runs the channel's blocking calls one at a time, so a call librdkafka never returns
  from raises in the role instead of wedging it;
- with ``metrics_port``: prometheus_client's server thread and one thread per scrape
  (:func:`prometheus_client.start_http_server`, :mod:`storage_node.metrics`).

Not started by the node but running in it: ``watch-<table>`` (:class:`metadata.notify.TableWatcher`,
one per table), ``election-<pid8>`` (:class:`metadata.election.PartitionElection` steps), kazoo's
connection threads, and librdkafka's own threads inside every Kafka client.

For every table, every committed METADATA version runs partition discovery for this server with the
replicas it holds (in memory, and on disk at start-up: :func:`~storage_node.roles.lifecycle.held_on_disk`),
and acts on every state (table partitioning seed section 3): a LOAD replica follows the leader's
channels but serves no scans and never campaigns; a LIVE one also campaigns in the partition's
election; an UNLOAD one leaves the election (a leader resigns), ends its roles and keeps its data
until the remaining replicas acked it; UNLOAD_FINAL removes it after a grace period
(:mod:`storage_node.roles.lifecycle`). A transition the lifecycle does not allow is refused and logged.
When a replica wins its election, it starts a :class:`PartitionLeader` whose epoch is the
election's (``check_writable``), so a SUSPENDED or LOST leadership stops writes at the next batch.
Every LIVE or LOAD replica that does not lead runs a :class:`PartitionFollower` on the leader's
segments channel (DESIGN.md section 6); on losing leadership the node follows again and re-campaigns.

With ``metrics_port`` set (``shoal node --metrics-port P``), :meth:`StorageNode.stats` is served as
Prometheus ``/metrics`` (:mod:`storage_node.metrics`): per partition, counters that
stay monotonic across leader terms (segments written, fast-forwards, merges, stalls, leader
changes, WAL records, rows, deadlettered, ...) and gauges (is_leader, epoch, minors awaiting
compaction, segments).
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from types import FrameType

from metadata.client import MetadataClient, MetadataConfig
from metadata.discovery import (
    HeldReplica,
    IllegalTransitionError,
    PartitionDiscovery,
    ReplicaState,
    check_transition,
    discover,
)
from metadata.election import (
    Candidate,
    Eligibility,
    EpochFence,
    Leadership,
    LeaderState,
    PartitionElection,
    read_epoch,
)
from metadata.in_sync import PartitionInSync, prefer_in_sync, read_in_sync
from metadata.keyspace import KeyRange
from metadata.metadata_file import MetadataFile, RetiredPartition, retired_partitions
from metadata.node_registry import node_path, register_node
from metadata.notify import TableWatcher
from metadata.placements import preferred_leader
from metadata.table import TableDefinition
from shoal.errors import ConfigError, KafkaOperationError, PartitionUnavailableError, ShoalError
from shoal.kafka.indexes import channel_indexes
from shoal.worker import Deadline, Worker, stop_all
from storage_node.allocator import use_arrow_memory_pool
from storage_node.config import NodeConfig
from storage_node.metrics import start_node_metrics
from storage_node.replica import PartitionReplica
from storage_node.replication import bootstrap
from storage_node.replication.describe import describe_replica
from storage_node.replication.receive import InFlightBudget
from storage_node.replication.tail import InSyncKeeper
from storage_node.roles.compaction_intake import CompactionIntake
from storage_node.roles.follower import FollowerConfig, PartitionFollower
from storage_node.roles.forward import StragglerForwarder, forwarding_owner
from storage_node.roles.leader import PartitionLeader
from storage_node.roles.lifecycle import (
    LifecycleConfig,
    LifecycleView,
    LifecycleWorker,
    held_on_disk,
    read_marker,
    unload_final_at,
    write_marker,
)
from storage_node.roles.rebalance import LeaderRebalancer
from storage_node.roles.split import PartitionSplitter, SplitPhase
from storage_node.serve import FlightServing, ScanServer
from storage_node.serve.flight import server_options

log = logging.getLogger(__name__)

REBALANCE_CHECK_S = 5.0
"""How often a leader checks whether to hand leadership to its partition's preferred leader."""
REBALANCE_BACKOFF_S = 30.0
"""The pause after a check that failed (ZooKeeper or Kafka unavailable)."""
STOP_TIMEOUT_S = 8.0
"""How long a stopping node waits for all its roles together (:meth:`StorageNode._release_all`):
SIGTERM to exit stays within a supervisor's grace period (docker's 10 s) whatever the partition count."""


@dataclass
class HeldPartition:
    table: TableDefinition
    partition_id: str
    placement_id: int
    key_range: KeyRange
    replica: PartitionReplica
    election: PartitionElection | None = None
    leader: PartitionLeader | None = None
    follower: PartitionFollower | None = None
    peers: tuple[int, ...] = ()
    """The partition's other placement ids in the current METADATA (for the Tail index)."""
    live: tuple[int, ...] = ()
    """The partition's LIVE placement ids (``servers``) in the current METADATA, this one's included:
    an out-of-sync replica does not lead while one of them is in sync (:meth:`StorageNode._in_sync_leaders`)."""
    intake: CompactionIntake | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    retired: dict[str, float] = field(default_factory=dict)
    """Counters of leader and follower roles that ended (metrics stay monotonic across terms)."""
    leader_changes: int = 0
    leader_epoch: int | None = None
    """The election epoch the current leader role was started for (its term even if it never wrote)."""
    preferred: int | None = None
    """The partition's preferred leader placement in the current METADATA (:mod:`metadata.rebalance`)."""
    split_parent: str | None = None
    """Set while this replica is a LOAD target of a split: the parent partition whose leader it follows."""
    state: ReplicaState = ReplicaState.LIVE
    """The replica's lifecycle state (partition discovery): only LIVE campaigns and serves scans."""
    discovery: PartitionDiscovery | None = None
    lifecycle: LifecycleWorker | None = None
    """JOIN_FINALIZE (while leading) or UNLOAD / UNLOAD_FINAL work (:mod:`storage_node.roles.lifecycle`)."""
    bootstrap_checked: bool = False
    """The empty-replica check of :func:`storage_node.replication.bootstrap.check_on_open` ran."""


def leader_counters(leader: PartitionLeader) -> dict[str, float]:
    s = leader.stats
    out = {
        "segments_written": s.segments,
        "merges": s.merged_segments + s.adopted_segments,
        "stalls": s.stalls,
        "transactions": s.transactions,
        "wal_records": s.wal_records,
        "rows": s.rows,
        "deadlettered": s.deadlettered,
        "decoded_limit_splits": s.decoded_limit_splits,
    }
    if leader.publisher is not None:
        out["segments_deleted"] = leader.publisher.stats.deleted
        out["segments_published"] = leader.publisher.stats.published
    return {k: float(v) for k, v in out.items()}


def follower_counters(follower: PartitionFollower) -> dict[str, float]:
    s = follower.stats
    out = {
        "fast_forwards": s.fast_forwards + s.fast_forward_adds,
        "segments_received": s.fast_forwards + s.fast_forward_adds,
        "segments_acked": s.acks,
        "out_of_order": s.out_of_order,
        "invalid_segments": s.invalid,
        "segments_deleted": s.deleted,
        "wal_records_tailed": s.wal_records_tailed,
    }
    return {k: float(v) for k, v in out.items()}


NODE_COUNTERS = (
    "fast_forwards",
    "merges",
    "segments_written",
    "segments_received",
    "segments_acked",
    "leader_changes",
    "transactions",
    "wal_records",
    "rows",
    "deadlettered",
    "out_of_order",
    "invalid_segments",
    "stalls",
    "segments_deleted",
    "decoded_limit_splits",
)
"""Counters every partition reports (0 until they happen): those documented in :mod:`storage_node.metrics`."""


def _add(into: dict[str, float], more: dict[str, float]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0.0) + v


class StorageNode:
    def __init__(
        self, config: NodeConfig, *, metadata: MetadataConfig | None = None, lifecycle: LifecycleConfig | None = None
    ) -> None:
        self.config = config
        self.lifecycle = lifecycle or LifecycleConfig()
        """Grace period and poll interval of the partition lifecycle (UNLOAD_FINAL removal)."""
        self._files: dict[str, MetadataFile] = {}
        self.metadata_config = metadata or MetadataConfig(connection=config.connection)
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._held: dict[str, HeldPartition] = {}
        self._watchers: dict[str, TableWatcher] = {}
        self._client: MetadataClient | None = None
        self._rebalancer: LeaderRebalancer | None = None
        self._rebalance_not_before: dict[str, float] = {}
        """partition id -> monotonic time before which :meth:`_rebalance` does not check again."""
        self.location: str | None = None
        self.metrics_url: str | None = None
        """``http://host:port/metrics`` when the node's Prometheus exporter runs."""
        self.ready = threading.Event()
        self.budget = InFlightBudget()
        """Bytes being received by all followers of this node (OVERLOADED backpressure)."""
        self._splitters: dict[str, PartitionSplitter] = {}
        """parent partition id -> the splitter this node runs for it (storage_node.roles.split)."""
        self._forwarders: dict[str, StragglerForwarder] = {}
        """retired split parent id -> the forwarder of its stragglers this node runs (storage_node.roles.forward)."""
        self._retired: dict[str, tuple[int, list[tuple[RetiredPartition, str]]]] = {}
        """table -> (the METADATA sequence it was read at, its retired split parents, each with the
        listed partition whose leader forwards its stragglers)."""

    # -- public --------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    def partitions(self) -> dict[str, HeldPartition]:
        with self._lock:
            return dict(self._held)

    def splitters(self) -> dict[str, PartitionSplitter]:
        """Parent partition id -> the splitter this node runs (or ran) for it."""
        with self._lock:
            return dict(self._splitters)

    def forwarders(self) -> dict[str, StragglerForwarder]:
        """Retired split parent id -> the forwarder of its stragglers this node runs."""
        with self._lock:
            return dict(self._forwarders)

    def replicas(self, table: str, partition_id: str | None) -> list[PartitionReplica]:
        """The replicas a scan reads. A replica whose leader role is still starting (replaying its WAL,
        adopting the other placements' channels) holds only part of the rows, and an empty one that has
        not yet run its bootstrap check may be a wiped replica about to bootstrap: scanning either is
        refused with a retryable error rather than answered with a partial result."""
        with self._lock:
            held = [
                h
                for h in self._held.values()
                if h.table.name == table
                and (partition_id is None or h.partition_id == partition_id)
                and h.state is ReplicaState.LIVE  # LOAD is catching up, UNLOAD serves nothing (seed 002 s. 3)
            ]
        for h in held:
            if not h.bootstrap_checked and h.replica.empty:  # a non-empty one never needs to bootstrap
                raise PartitionUnavailableError(
                    f"{h.replica.name} is empty and has not yet checked whether it must bootstrap (it may be a "
                    "wiped replica; ZooKeeper or Kafka unreachable since it opened); retry shortly"
                )
            if h.replica.catch_up.bootstrapping:
                raise PartitionUnavailableError(
                    f"{h.replica.name} is bootstrapping from Kafka and not authoritative yet; retry shortly"
                )
            leader = h.leader
            if leader is not None and not leader.ready.is_set() and not leader.stopped.is_set():
                raise PartitionUnavailableError(
                    f"{h.replica.name} is taking over as leader (replaying and adopting WAL channels); retry shortly"
                )
        return [h.replica for h in held]

    def run(self) -> None:
        """Run until ``stop()`` or SIGTERM/SIGINT (when called on the main thread; there SIGUSR1 dumps
        every thread's stack to stderr).

        Makes the config's Arrow pool the process's default first (:mod:`storage_node.allocator`)."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
            # `kill -USR1 PID` prints every thread's stack to stderr (the node log), to see what a
            # stuck node waits on without stopping it
            faulthandler.register(signal.SIGUSR1, all_threads=True)
        use_arrow_memory_pool(self.config.arrow_memory_pool)
        try:
            self.config.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file in the way, a path under a file, no permission
            raise ConfigError(f"cannot create the node data dir {self.config.data_dir}: {exc.strerror}") from None
        with contextlib.ExitStack() as stack:
            client = stack.enter_context(MetadataClient(self.metadata_config))
            self._client = client
            self._rebalancer = LeaderRebalancer(
                client.zk,
                client.layout,
                self.config.kafka,
                self.config.topics,
                delay_s=self.config.leader_rebalance_delay_s,
            )
            stack.callback(self._rebalancer.close)
            scan = self.config.connection.scan
            server = ScanServer(
                f"{scan.scheme}://{self.config.flight_host}:{self.config.flight_port}",
                self.replicas,
                describe=self.describe,
                **server_options(scan),
            )
            stack.callback(FlightServing(server).start().stop)
            self.location = f"{scan.scheme}://{self.config.flight_host}:{server.port}"
            register_node(client.zk, client.layout, self.config.server_id, self.location, self.metadata_config.security)
            if self.config.metrics_port is not None:
                exporter = start_node_metrics(
                    self.config.metrics_port, self.stats, server_id=self.config.server_id, host=self.config.metrics_host
                )
                stack.callback(exporter.close)
                self.metrics_url = exporter.url
                log.info("node %s serves metrics at %s", self.config.server_id, exporter.url)
            stack.callback(self._release_all)
            log.info("node %s serving scans at %s", self.config.server_id, self.location)
            self.ready.set()
            while not self._stop.is_set():
                self._watch_new_tables(client)
                self._supervise(client)
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
        """Partition discovery with the replicas this node holds (in memory or on disk), then act on
        every state (table partitioning seed section 3; :mod:`storage_node.roles.lifecycle`)."""
        if self._stop.is_set():
            return
        with self._lock:
            known = self._files.get(file.table.name)
            if known is None or file.sequence >= known.sequence:
                self._files[file.table.name] = file
        split_targets = {
            child: e.partition_id
            for e in file.partitions
            if e.splitting
            for child in (e.split_partition_id_low, e.split_partition_id_high)
            if child is not None
        }
        for d in discover(file, self.config.server_id, self._held_replicas(file)):
            if d.placement_id is None:
                continue
            try:
                if d.state is ReplicaState.LOAD and d.partition_id in split_targets:
                    self._hold_split_target(file, d.partition_id, d.placement_id, d.key_range, split_targets)
                else:
                    self._apply_discovery(file, d)
            except IllegalTransitionError as exc:
                log.error("node %s refuses a lifecycle change: %s", self.config.server_id, exc)
            except Exception as exc:
                # one partition's damaged local state (a corrupt segment list, a full disk) must not
                # stop this node from following, leading and serving the table's other partitions
                log.error(
                    "node %s cannot hold partition %s of %s: %s: %s",
                    self.config.server_id,
                    d.partition_id,
                    file.table.name,
                    type(exc).__name__,
                    exc,
                    exc_info=not isinstance(exc, ShoalError),
                )
        self._start_splitters()
        self._start_forwarders()

    # -- splits (storage_node.roles.split) -------------------------------------------------------

    def _hold_split_target(
        self, file: MetadataFile, child: str, placement_id: int, key_range: KeyRange, targets: dict[str, str]
    ) -> None:
        """Hold a LOAD child of a split: it follows the parent leader's staging channel, never campaigns."""
        with self._lock:
            if child in self._held:
                return
            replica = PartitionReplica(file.table, child, placement_id, self.config.data_dir)
            held = HeldPartition(
                file.table,
                child,
                placement_id,
                key_range,
                replica,
                split_parent=targets[child],
                state=ReplicaState.LOAD,
            )
            self._held[child] = held
        self._start_split_follower(held)

    def _start_split_follower(self, held: HeldPartition) -> None:
        assert self._client is not None
        client, parent = self._client, held.split_parent
        if parent is None or self._stop.is_set():
            return
        with held.lock:
            if held.follower is not None and not held.follower.stopped.is_set():
                return

            def leader() -> int | None:
                return read_epoch(client.zk, client.layout, parent).placement_id

            config = FollowerConfig(self.config.kafka, self.config.topics, tail_wal=False)
            held.follower = PartitionFollower(held.replica, config, leader, budget=self.budget).start()

    def _start_splitters(self) -> None:
        """Start a splitter next to every ready leader whose partition is SPLITTING in METADATA."""
        if self._stop.is_set() or self._client is None:
            return
        for held in self.partitions().values():
            leader, election = held.leader, held.election
            file = self._files.get(held.table.name)
            if leader is None or election is None or file is None or not leader.ready.is_set():
                continue
            if leader.stopped.is_set() or held.partition_id not in {e.partition_id for e in file.partitions}:
                continue
            if not file.partition(held.partition_id).splitting:
                continue
            with self._lock:
                running = self._splitters.get(held.partition_id)
                if running is not None and (not running.stopped.is_set() or running.phase is SplitPhase.FINALIZED):
                    continue  # running, or done (this node's METADATA may not show the finalize yet)
                self._splitters[held.partition_id] = PartitionSplitter(
                    leader=leader,
                    file=file,
                    key_range=held.key_range,
                    client=self._client,
                    kafka=self.config.kafka,
                    topics=self.config.topics,
                    data_dir=self.config.data_dir,
                    fence=_fence_of(election),
                ).start()
            log.info("node %s: splitting %s", self.config.server_id, held.replica.name)

    def _start_forwarders(self) -> None:
        """Forward the stragglers of every retired split parent whose lowest key a partition this
        node leads holds (:func:`~storage_node.roles.forward.forwarding_owner`); stop the forwarders
        of the parents it no longer owns (their next owner's forwarder fences them anyway)."""
        if self._stop.is_set() or self._client is None:
            return
        wanted: dict[str, tuple[TableDefinition, RetiredPartition]] = {}
        for held in self.partitions().values():
            leader, file = held.leader, self._files.get(held.table.name)
            if leader is None or file is None or not leader.ready.is_set() or leader.stopped.is_set():
                continue
            for parent, owner in self._retired_of(file):
                if owner == held.partition_id:
                    wanted[parent.partition_id] = (file.table, parent)
        with self._lock:
            gone = [f for pid, f in self._forwarders.items() if pid not in wanted or f.stopped.is_set()]
            for f in gone:
                del self._forwarders[f.parent.partition_id]
            for pid, (table, parent) in wanted.items():
                if pid not in self._forwarders:
                    self._forwarders[pid] = StragglerForwarder(
                        kafka=self.config.kafka,
                        topics=self.config.topics,
                        table=table,
                        parent=parent,
                        max_ingest_bytes=self.config.leader_config().max_ingest_bytes,
                        max_deadletter_payload_bytes=self.config.leader_config().max_deadletter_payload_bytes,
                    ).start()
                    log.info("node %s: forwarding the stragglers of split parent %s", self.config.server_id, pid)
        for f in gone:
            f.stop(timeout=5.0)

    def _retired_of(self, file: MetadataFile) -> list[tuple[RetiredPartition, str]]:
        """The table's retired split parents, each with its forwarding owner in ``file``, read from
        its METADATA history once per version."""
        name = file.table.name
        cached = self._retired.get(name)
        if cached is not None and cached[0] >= file.sequence:
            return cached[1]
        if self._client is None:
            return []
        try:
            retired = retired_partitions(self._client.coordinator.history(name))
            parents = [(r, forwarding_owner(file, r)) for r in retired]
        except ShoalError as exc:
            log.warning("node %s: cannot read the METADATA history of %s: %s", self.config.server_id, name, exc)
            return [] if cached is None else cached[1]
        self._retired[name] = (file.sequence, parents)
        return parents

    def _held_replicas(self, file: MetadataFile) -> list[HeldReplica]:
        with self._lock:
            held = [h for h in self._held.values() if h.table.name == file.table.name]
        out = [
            HeldReplica(
                h.partition_id,
                h.placement_id,
                h.key_range,
                all_data_pushed=unload_final_at(h.replica.directory) is not None,
            )
            for h in held
        ]
        known = {h.placement_id for h in held}
        out += [h for h in held_on_disk(self.config.data_dir, file.table.name) if h.placement_id not in known]
        return out

    def _apply_discovery(self, file: MetadataFile, d: PartitionDiscovery) -> None:
        assert d.placement_id is not None
        entry = next((e for e in file.partitions if e.partition_id == d.partition_id), None)
        others = () if entry is None else tuple(p.placement_id for p in entry.all_placements())
        # peers: every other placement that holds the partition's data (servers, joining, leaving):
        # the Tail waits for their Acks, a new leader adopts their WAL channels
        peers = tuple(dict.fromkeys(p for p in others if p != d.placement_id))
        live = () if entry is None else tuple(p.placement_id for p in entry.servers)
        preferred = None if entry is None else preferred_leader(entry).placement_id
        promoted: PartitionFollower | None = None
        with self._lock:
            held = self._held.get(d.partition_id)
            if held is not None and held.placement_id != d.placement_id:
                log.info(
                    "%s: placement %d waits until placement %d of this node is removed",
                    d.partition_id,
                    d.placement_id,
                    held.placement_id,
                )
                return
            if held is None:  # a new LOAD/LIVE placement, or an UNLOAD one found on disk at start-up
                replica = PartitionReplica(file.table, d.partition_id, d.placement_id, self.config.data_dir)
                if read_marker(replica.directory) is None:
                    write_marker(replica, d.key_range)
                held = HeldPartition(
                    file.table, d.partition_id, d.placement_id, d.key_range, replica, peers=peers, state=d.state
                )
                self._held[d.partition_id] = held
                log.info("node %s holds %s (%s)", self.config.server_id, replica.name, d.state.value)
            else:
                check_transition(held.state, d.state, held.replica.name)
                if held.state is not d.state:
                    log.info("%s: %s -> %s", held.replica.name, held.state.value, d.state.value)
                held.state = d.state
            if held.split_parent is not None and d.state is ReplicaState.LIVE:
                held.split_parent = None  # the split was finalized: this child is LIVE now
                # the staging follower stays held until it has ended: no other role may use the
                # replica while it runs (_start_follower and _start_leader wait for it)
                promoted = held.follower
            held.discovery = d
            held.peers = peers
            held.live = live
            held.preferred = preferred
        if promoted is not None and promoted.stop():
            with held.lock:
                if held.follower is promoted:
                    _add(held.retired, follower_counters(promoted))
                    held.follower = None
        if d.state is ReplicaState.LOAD:
            self._start_follower(held)  # catches up from the leader's channels; never campaigns
        elif d.state is ReplicaState.LIVE:
            self._check_bootstrap(held)
            if held.bootstrap_checked:
                self._start_follower(held)
            if held.election is None and self._may_campaign(held):
                self._campaign(held)
        else:
            self._retire_roles(held)
            self._ensure_lifecycle(held)

    def _retire_roles(self, held: HeldPartition) -> None:
        """UNLOAD: leave the election (a leader resigns; the next one adopts its channel) and end every role."""
        election = held.election
        if election is not None:
            election.replica_state = held.state  # start() refuses from now on
            with contextlib.suppress(Exception):
                election.close()
        with held.lock:
            held.election = None
            if held.leader is not None:
                held.leader.stop()
                _add(held.retired, leader_counters(held.leader))
                held.leader = None
                log.info("%s: resigned the leadership (%s)", held.replica.name, held.state.value)
            if held.intake is not None:
                held.intake.stop()
                held.intake = None
            if held.follower is not None:
                held.follower.stop()
                _add(held.retired, follower_counters(held.follower))
                held.follower = None
            held.replica.overlay = None

    def _ensure_lifecycle(self, held: HeldPartition) -> None:
        """Start the partition's lifecycle worker unless one runs (:mod:`storage_node.roles.lifecycle`)."""
        if self._stop.is_set() or (held.lifecycle is not None and not held.lifecycle.stopped.is_set()):
            return
        assert self._client is not None
        client, table, pid = self._client, held.table.name, held.partition_id

        def leading_epoch() -> int | None:
            leader, election = held.leader, held.election
            if leader is None or election is None or leader.stopped.is_set() or not leader.ready.is_set():
                return None
            lead = election.leadership
            return None if lead is None or election.state is not LeaderState.LEADER else lead.epoch

        def manifest_offset(segment_id: str) -> int | None:
            leader = held.leader
            publisher = None if leader is None else leader.publisher
            return None if publisher is None else publisher.manifest_offsets.get(segment_id)

        def leader_placement() -> int | None:
            return read_epoch(client.zk, client.layout, pid).placement_id

        def finalize_join(placement_id: int, epoch: int) -> None:
            client.coordinator.finalize_join(table, pid, placement_id, fence=EpochFence(pid, epoch))

        def finalize_leave(placement_id: int) -> None:
            client.coordinator.finalize_leave(table, pid, placement_id)

        def removed() -> None:
            with self._lock:
                if self._held.get(pid) is held:
                    del self._held[pid]
            log.info("node %s no longer holds %s", self.config.server_id, held.replica.name)
            file = self._files.get(table)
            if file is not None:  # a new placement of this node in the partition waited for this one
                self._on_file(file)

        view = LifecycleView(
            replica=lambda: held.replica,
            key_range=lambda: held.key_range,
            state=lambda: held.state,
            discovery=lambda: held.discovery,
            file=lambda: self._files.get(table),
            leader_placement=leader_placement,
            leading_epoch=leading_epoch,
            manifest_offset=manifest_offset,
            finalize_join=finalize_join,
            finalize_leave=finalize_leave,
            removed=removed,
        )
        held.lifecycle = LifecycleWorker(view, self.config.kafka, self.config.topics, self.lifecycle, pid).start()

    def _check_bootstrap(self, held: HeldPartition) -> None:
        """An empty replica with history (or an interrupted bootstrap) bootstraps before it campaigns,
        and a LIVE replica follows only once this check ran: a wiped replica that followed first
        would resume from its old Acks (committed in Kafka, above what it holds), stop being empty
        after the first segment, and pass the check later without bootstrapping."""
        if held.bootstrap_checked:
            return
        assert self._client is not None
        try:
            epoch = read_epoch(self._client.zk, self._client.layout, held.partition_id)
            # a split child's epoch is seeded with its parent's (no leader yet): its pieces are on the
            # staging channels, so it is checked like a partition that led
            never_led = epoch.placement_id is None and epoch.epoch == 0
            if never_led and not held.replica.catch_up.bootstrapping:  # a new partition: nothing to fetch
                held.bootstrap_checked = True
                return
            bootstrap.check_on_open(held.replica, self.config.kafka, self.config.topics)
            held.bootstrap_checked = True
        except Exception as exc:  # Kafka unreachable: no campaign until the check can run (_supervise)
            log.warning("%s: cannot check whether it must bootstrap yet: %s", held.replica.name, exc)

    @staticmethod
    def _may_campaign(held: HeldPartition) -> bool:
        """Only a replica with the data may lead (DESIGN.md section 7): not while it bootstraps."""
        return held.bootstrap_checked and held.replica.catch_up.eligible

    def _campaign(self, held: HeldPartition) -> None:
        assert self._client is not None
        if held.state is not ReplicaState.LIVE:
            return  # LOAD, UNLOAD and UNLOAD_FINAL replicas never campaign (seed 000 section 3.2)

        def on_change(state: LeaderState, leadership: Leadership | None) -> None:
            if state is LeaderState.LEADER:
                self._start_leader(held, leadership)
            elif state is LeaderState.LOST:
                if held.leader is not None and not held.leader.stopped.is_set():
                    held.leader_changes += 1  # this replica stops being leader
                if held.leader is not None:
                    held.leader.request_stop()  # it also stops by itself at its next batch (check_writable)
                _Handover(self, held).start()

        with self._lock:  # discovery and _supervise may both start the first campaign: only one election
            if held.election is not None:
                return
            election = PartitionElection(
                self._client.zk,
                held.partition_id,
                self.config.server_id,
                held.placement_id,
                replica_state=ReplicaState.LIVE,
                layout=self._client.layout,
                security=self.metadata_config.security,
                on_change=on_change,
                prefer=self._balanced_preference(held),
                eligible=self._in_sync_leaders(held),
            )
            held.election = election
        election.start()

    def _balanced_preference(self, held: HeldPartition) -> Callable[[Sequence[Candidate]], int | None]:
        """The caught-up preferred leader first (:mod:`storage_node.roles.rebalance`), else :meth:`_preference`."""
        assert self._rebalancer is not None
        fallback = self._preference(held)
        return self._rebalancer.election_preference(held.partition_id, lambda: held.preferred, fallback)

    def _rebalance(self, held: HeldPartition) -> None:
        """Hand leadership to the preferred leader when :class:`LeaderRebalancer` says so: the leader role
        stops writing first, then the candidacy is resigned (the handover follows and campaigns again)."""
        election, leader = held.election, held.leader
        if self._rebalancer is None or election is None or leader is None or not leader.ready.is_set():
            return
        if election.state is not LeaderState.LEADER:
            return
        now = time.monotonic()
        if now < self._rebalance_not_before.get(held.partition_id, 0.0):
            return
        # at most one check per interval, and a longer pause after a failed one: during a broker outage
        # many short admin requests are what librdkafka 2.16 aborts the process on (an eonce assertion)
        self._rebalance_not_before[held.partition_id] = now + REBALANCE_CHECK_S
        try:
            decision = self._rebalancer.check(held.table.name, held.partition_id, held.placement_id, held.preferred)
        except Exception as exc:  # ZooKeeper or Kafka unavailable for a moment: check again later
            self._rebalance_not_before[held.partition_id] = now + REBALANCE_BACKOFF_S
            log.warning(
                "%s: cannot check the preferred leader (again in %.0f s): %s",
                held.replica.name,
                REBALANCE_BACKOFF_S,
                exc,
            )
            return
        if decision.yield_now:
            held.leader_changes += 1  # this replica stops being leader (the role is stopped before the LOST)
            self._stop_intake(held)  # first: a major committed after the role's publisher stopped is never published
            leader.stop(30)
            election.resign()

    def _in_sync_leaders(self, held: HeldPartition) -> Callable[[Sequence[Candidate]], Eligibility]:
        """The election's ``eligible`` hook (DESIGN.md section 7, Kafka's ISR rule with unclean leader
        election off): the in-sync candidates; none while an in-sync LIVE placement is not in line
        (:func:`metadata.in_sync.prefer_in_sync`), read from ZooKeeper at every look at the line. The
        in-sync znode's version guards the winner's epoch bump (:class:`metadata.election.Eligibility`):
        an old leader that marks the winner out of sync after this read makes the bump fail."""
        assert self._client is not None
        client, partition_id = self._client, held.partition_id

        def eligible(line: Sequence[Candidate]) -> Eligibility:
            rec = read_in_sync(client.zk, client.layout, partition_id)
            allowed = prefer_in_sync([c.placement_id for c in line], rec.out_of_sync, held.live)
            return Eligibility(frozenset(allowed), client.layout.in_sync(partition_id), rec.version)

        return eligible

    def _preference(self, held: HeldPartition) -> Callable[[Sequence[Candidate]], int | None]:
        """TokuMX failover among the in-sync candidates (:func:`metadata.in_sync.prefer_in_sync`): prefer
        the one with the highest durable position on the old leader's channels
        (:func:`storage_node.replication.bootstrap.most_advanced`); a replica that bootstraps does not
        campaign at all."""
        assert self._client is not None and self._rebalancer is not None
        client, topics, kafka, rebalancer = self._client, self.config.topics, self.config.kafka, self._rebalancer
        partition_id = held.partition_id

        def prefer(line: Sequence[Candidate]) -> int | None:
            # only among the candidates that may lead (the election's eligible hook enforces it)
            eligible = prefer_in_sync(
                [c.placement_id for c in line],
                read_in_sync(client.zk, client.layout, partition_id).out_of_sync,
                held.live,
            )
            if line and line[0].placement_id not in eligible:
                return eligible[0] if eligible else None
            old = read_epoch(client.zk, client.layout, partition_id).placement_id
            others = [p for p in eligible if p != old]
            if old is None or len(others) < 2:
                return None
            groups = tuple(topics.replica_group(partition_id, p) for p in others)

            def acks(topic: str) -> list[int | None]:
                try:
                    return [
                        a for _, a in channel_indexes(kafka, topic, groups, timeout_s=5, admin=rebalancer.admin()).acks
                    ]
                except KafkaOperationError:  # that channel does not exist (yet)
                    return [None] * len(others)

            wal, segments = acks(topics.wal(partition_id, old)), acks(topics.segments(partition_id, old))
            return bootstrap.most_advanced(others, wal, segments)

        return prefer

    def _start_leader(self, held: HeldPartition, leadership: Leadership | None) -> None:
        if self._stop.is_set():
            return
        with held.lock:
            if held.leader is not None and not held.leader.stopped.is_set():
                return
            if held.follower is not None:  # the follower role ends before the leader role starts
                if not held.follower.stop():
                    # still running (a long scrub or apply): it would take the leader's memtable
                    # (retire_memtable) or move the root under it; _supervise leads once it ended
                    log.warning("%s: the follower role has not ended yet; leading once it has", held.replica.name)
                    return
                _add(held.retired, follower_counters(held.follower))
                held.follower = None
            held.replica.overlay = None  # a leader reads its memtable; adoption covers the overlay's rows
            if held.leader is not None:  # a previous term: its replica state is rebuilt by recovery
                held.leader.stop()
                _add(held.retired, leader_counters(held.leader))
                held.leader = None
                held.replica.close()
                held.replica = PartitionReplica(held.table, held.partition_id, held.placement_id, self.config.data_dir)
            election = held.election
            assert election is not None
            held.leader_epoch = leadership.epoch if leadership is not None else None
            leader = PartitionLeader(
                held.replica,
                self.config.leader_config(),
                lambda: election.check_writable().epoch,
                key_range=held.key_range,
                peers=lambda: held.peers,
                sync=self._in_sync(held, election),
                listed=lambda: self._listed(held),
            )
            held.leader = leader.start()
            held.leader_changes += 1
            if held.intake is not None:  # compaction majors are committed by the leader, fenced by its epoch
                held.intake.stop()
            held.intake = CompactionIntake(
                held.replica, lambda: election.check_writable().epoch, self.config.kafka, topics=self.config.topics
            ).start()
            log.info("node %s leads %s", self.config.server_id, held.replica.name)

    def _listed(self, held: HeldPartition) -> bool:
        """Whether the table's current METADATA (read from ZooKeeper and the store now, not this node's
        copy, which may not show a SPLIT_FINALIZE yet) lists ``held``'s partition."""
        assert self._client is not None
        file = self._client.coordinator.current(held.table.name)
        return any(p.partition_id == held.partition_id for p in file.partitions)

    def _in_sync(self, held: HeldPartition, election: PartitionElection) -> InSyncKeeper:
        """The in-sync bookkeeping of one leader term, its ZooKeeper writes fenced by the term's epoch."""
        assert self._client is not None
        store = PartitionInSync(
            self._client.zk,
            self._client.layout,
            held.partition_id,
            held.placement_id,
            lambda: election.check_writable().fence(),
            security=self.metadata_config.security,
        )
        return InSyncKeeper(store, self.config.replica_lag)

    @staticmethod
    def _stop_intake(held: HeldPartition) -> None:
        """End the compaction intake of a leader term that is ending (DESIGN.md section 9): until the
        candidacy is resigned the epoch still allows it to commit a major, which no publisher would
        replicate once the leader role stopped."""
        intake, held.intake = held.intake, None
        if intake is not None:
            intake.stop()

    def _start_follower(self, held: HeldPartition) -> None:
        """Follow the partition's current leader (a no-op while this replica leads)."""
        if self._stop.is_set() or held.state not in (ReplicaState.LOAD, ReplicaState.LIVE):
            return
        assert self._client is not None
        client = self._client
        with held.lock:
            if held.follower is not None and not held.follower.stopped.is_set():
                return
            if held.leader is not None and not held.leader.stopped.is_set():
                return
            if held.follower is not None:  # a follower role that ended (failed): a new one replaces it
                _add(held.retired, follower_counters(held.follower))
                held.follower = None
            self._stop_intake(held)  # majors are committed by a leader only
            pid, own = held.partition_id, held.placement_id

            def leader() -> int | None:
                rec = read_epoch(client.zk, client.layout, pid)
                if rec.placement_id == own and held.replica.catch_up.bootstrapping:
                    return own  # still recorded as leader after a restart: bootstrap from its own channels
                return None if rec.placement_id in (None, own) else rec.placement_id

            config = FollowerConfig(self.config.kafka, self.config.topics)
            held.follower = PartitionFollower(held.replica, config, leader, budget=self.budget).start()

    def _after_lost(self, held: HeldPartition) -> None:
        """After losing leadership: wait for the leader role to end, follow, and campaign again."""
        leader = held.leader
        if leader is not None:
            leader.stopped.wait(60)
        if self._stop.is_set() or held.state is not ReplicaState.LIVE:
            return
        self._start_follower(held)
        self._recampaign(held)

    def _recampaign(self, held: HeldPartition) -> None:
        election = held.election
        if election is None or election.state is not LeaderState.LOST or self._stop.is_set():
            return
        if held.state is not ReplicaState.LIVE or not self._may_campaign(held):
            return
        try:
            election.start()
        except Exception as exc:  # e.g. the session just expired: _supervise tries again
            log.warning("%s: cannot campaign again yet: %s", held.replica.name, exc)

    def _supervise(self, client: MetadataClient) -> None:
        """Keep every held partition in a role after faults (session loss, fencing, a failed thread).

        - re-register this node's Flight location if a new ZooKeeper session dropped it;
        - a leader role that ended (fenced, failed) while the election still says LEADER -> resign;
        - not leading -> a running follower; election LOST -> campaign again;
        - leading -> hand the leadership to a caught-up preferred leader (:meth:`_rebalance`);
        - every election: :meth:`~metadata.election.PartitionElection.recheck` (a candidate re-reads
          its line now and then; a stuck election step is logged with its stack).
        """
        try:
            if client.zk.exists(node_path(client.layout, self.config.server_id)) is None and self.location:
                register_node(
                    client.zk, client.layout, self.config.server_id, self.location, self.metadata_config.security
                )
                log.info("node %s registered again at %s", self.config.server_id, self.location)
        except Exception as exc:
            log.warning("cannot re-register node %s: %s", self.config.server_id, exc)
        self._start_splitters()
        self._start_forwarders()
        for held in self.partitions().values():
            if self._stop.is_set():  # stopping: _release_all ends every role, a pass would only delay it
                return
            if held.split_parent is not None:  # a LOAD split target: follows the parent, never campaigns
                self._start_split_follower(held)
                continue
            if held.state in (ReplicaState.UNLOAD, ReplicaState.UNLOAD_FINAL):
                self._ensure_lifecycle(held)
                continue
            election = held.election
            if election is not None:
                election.recheck()  # a candidate whose watch event never came checks the line again
            leading = held.leader is not None and not held.leader.stopped.is_set()
            if leading and held.discovery is not None and self._has_joiners(held):
                self._ensure_lifecycle(held)  # JOIN_FINALIZE once the joiners caught up
            ended = held.leader is not None and held.leader.stopped.is_set()
            lead = election.leadership if election is not None else None
            # the role's term: the epoch it was started for (a role that failed during start-up never
            # wrote, so its own ``term`` is None) or the one it last wrote with
            terms = {held.leader_epoch, held.leader.term if held.leader is not None else None}
            same_term = ended and lead is not None and lead.epoch in terms
            if same_term and election is not None and election.state is LeaderState.LEADER:
                log.warning(
                    "%s: the leader role ended (%s); resigning",
                    held.replica.name,
                    held.leader.role_state.value if held.leader else "none",
                )
                with contextlib.suppress(Exception):
                    election.resign()
                continue
            if ended and lead is not None and election is not None and election.state is LeaderState.LEADER:
                # a leadership resumed after SUSPENDED has a new epoch; the old role ended after it was granted
                self._start_leader(held, lead)
                continue
            following = held.follower is not None and not held.follower.stopped.is_set()
            won = election is not None and election.state is LeaderState.LEADER
            if held.leader is None and lead is not None and won and self._may_campaign(held):
                # won while the follower role was still ending (_start_leader waited for it); a follower
                # started since (discovery, a handover) is asked to end too: this node leads once it has
                # (not while its replica bootstraps: it leaves the election below)
                if following:
                    assert held.follower is not None
                    held.follower.request_stop()
                else:
                    self._start_leader(held, lead)
                continue
            if not leading:
                self._check_bootstrap(held)
                if held.bootstrap_checked:
                    self._start_follower(held)
                if not self._may_campaign(held):
                    if election is not None and election.state in (LeaderState.CANDIDATE, LeaderState.LEADER):
                        log.warning("%s: bootstrapping; leaving the election until caught up", held.replica.name)
                        with contextlib.suppress(Exception):
                            election.resign()
                    continue
                if election is None:
                    self._campaign(held)
                self._recampaign(held)
            else:
                self._rebalance(held)

    def _has_joiners(self, held: HeldPartition) -> bool:
        file = self._files.get(held.table.name)
        entries = () if file is None else file.partitions
        return any(e.partition_id == held.partition_id and e.servers_joining for e in entries)

    def stats(self) -> dict[str, dict[str, float]]:
        """Per partition: counters (monotonic across leader terms) and gauges, for ``/metrics``.

        Names are those documented in :mod:`storage_node.metrics`.
        """
        client = self._client
        out: dict[str, dict[str, float]] = {}
        for pid, held in self.partitions().items():
            counters = dict.fromkeys(NODE_COUNTERS, 0.0)
            _add(counters, held.retired)
            leader, follower = held.leader, held.follower
            if leader is not None:
                _add(counters, leader_counters(leader))
            if follower is not None:
                _add(counters, follower_counters(follower))
            counters["leader_changes"] = float(held.leader_changes)
            leading = leader is not None and not leader.stopped.is_set()
            epoch = -1
            if client is not None:
                with contextlib.suppress(Exception):
                    epoch = read_epoch(client.zk, client.layout, pid).epoch
            chain = held.replica.chain
            minors = sum(1 for e in chain.since_latest_major() if not e.is_major)
            counters.update(
                is_leader=float(leading),
                epoch=float(epoch),
                minors_awaiting_compaction=float(minors),
                segments=float(len(chain)),
            )
            out[pid] = counters
        return out

    def describe(self, table: str) -> list[dict[str, object]]:
        """``describe replica`` for every replica of ``table`` on this node (``shoal verify``)."""
        out = []
        for held in self.partitions().values():
            if held.table.name != table:
                continue
            role = "leader" if held.leader is not None and not held.leader.stopped.is_set() else "follower"
            try:
                info = describe_replica(held.replica)
            except ShoalError:
                if held.state in (ReplicaState.UNLOAD, ReplicaState.UNLOAD_FINAL):
                    continue  # UNLOAD_FINAL is removing its files right now: nothing left to describe
                raise
            info.update(server_id=self.config.server_id, role=role, lifecycle_state=held.state.value)
            if held.lifecycle is not None:
                info["lifecycle_progress"] = held.lifecycle.stats.progress
            if held.follower is not None:
                info["follower"] = asdict(held.follower.stats)
                info["following_placement_id"] = held.follower.leader_placement_id
            if held.leader is not None and held.leader.publisher is not None:
                info["published"] = asdict(held.leader.publisher.stats)
            out.append(info)
        return out

    def _release_all(self) -> None:
        """Stop every role within :data:`STOP_TIMEOUT_S` whatever the number of partitions held.

        Each stage asks all its workers to stop, then waits for them together
        (:func:`shoal.worker.stop_all`), so their Kafka clients close concurrently. The stages keep the
        order in which one partition's roles are released: lifecycle workers, followers, splitters and
        compaction intakes first (a major committed after the leader's publisher stopped would never
        be published, see :meth:`_stop_intake`); then the leaders (each ends its batch: commits or aborts
        its open WAL transaction, then closes its publisher, receiver, consumer and channel); then, once
        the leaders ended or the bound passed, the elections are left (ZooKeeper) and the replicas closed.
        """
        started = time.monotonic()
        deadline = Deadline(STOP_TIMEOUT_S)
        held = list(self.partitions().values())
        for w in list(self._watchers.values()):
            w.stop()
        first: list[Worker | None] = [*self._splitters.values(), *self._forwarders.values()]
        first += [role for h in held for role in (h.lifecycle, h.follower, h.intake)]
        left = stop_all(first, deadline)
        roles_s = time.monotonic() - started
        left += stop_all([h.leader for h in held], deadline)
        leaders_s = time.monotonic() - started - roles_s
        if left:
            log.warning(
                "node %s: %d role(s) still running after %.0f s: %s",
                self.config.server_id,
                len(left),
                STOP_TIMEOUT_S,
                ", ".join(w.name for w in left),
            )
        for h in held:
            if h.election is not None:
                h.election.close()
            h.replica.close()
        log.info(
            "node %s released %d partition(s) in %.2f s (other roles %.2f s, leaders %.2f s, elections %.2f s)",
            self.config.server_id,
            len(held),
            time.monotonic() - started,
            roles_s,
            leaders_s,
            time.monotonic() - started - roles_s - leaders_s,
        )


def _fence_of(election: PartitionElection) -> Callable[[], EpochFence]:
    """The election's current epoch fence (raises when it no longer leads)."""
    return lambda: election.check_writable().fence()


class _Handover(Worker):
    """After a lost leadership: :meth:`StorageNode._after_lost` on a thread ``handover-<pid8>``."""

    def __init__(self, node: StorageNode, held: HeldPartition) -> None:
        super().__init__(f"handover-{held.partition_id[:8]}")
        self.node = node
        self.held = held

    def run(self) -> None:
        self.node._after_lost(self.held)
