"""The JSON that ``shoal ... --output json`` prints, as types (one model per command's document).

Every command builds its model and prints :meth:`~shoal.shapes.Shape.to_json`; the JSON Schemas
generated from these models (:mod:`shoal_app.schemas`) are committed under ``docs/schemas/`` and
checked by the unit tests. ``shoal up`` prints the cluster file
(:class:`shoal.cluster_file.ClusterInfo`) and ``shoal offsets`` the monitor snapshot
(:class:`monitor.models.Snapshot`); ``shoal scan`` prints the table's own rows, one object per
line, whose shape is the table's schema.

``shoal demo`` prints the summary that :func:`shoal_app.demo.full.run` fills step by step: a step
that did not run leaves its section with only the keys known so far (those keys are
:func:`~shoal.shapes.omitted`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from monitor.models import Problem
from monitor.status import Status
from producer import DeliveryReport
from shoal.shapes import Shape, ShapeRoot, omitted
from spark_jobs.compaction.service import CompactionOutcome

# -- shoal status / down / jars ----------------------------------------------------------------


class ProcessStatus(Shape):
    name: str
    pid: int
    port: int | None
    running: bool
    healthy: bool
    log: str
    metrics_url: str | None = omitted()
    """A storage node's Prometheus endpoint, when it serves one."""


class ClusterStatus(Shape):
    """``shoal status``: what runs and whether it is healthy (``healthy`` decides the exit code)."""

    data_dir: str
    bootstrap_servers: str
    zk_connect: str
    kafka_cluster_id: str
    brokers_expected: int
    brokers_seen: int
    nodes_expected: int
    nodes_registered: list[str]
    processes: list[ProcessStatus]
    running: bool
    healthy: bool
    topic_problems: list[str] = []
    """Shoal topics below the topic policy, without a leader or under-replicated (unhealthy if any)."""


class TopicFix(Shape):
    """One topic of ``shoal admin fix-replication``: its replication before and after.

    ``status``: ``ok`` (already at the policy), ``raised`` (replicas added and in sync, or
    ``min.insync.replicas`` set), ``reassigning`` (replicas still copying: run again with ``--wait``),
    ``below_policy`` (as many replicas as the live brokers allow, fewer than the policy wants, and
    ``min.insync.replicas`` capped by them: run again once the brokers are back).
    """

    topic: str
    replication_factor_before: int
    replication_factor: int
    min_insync_replicas_before: int | None
    min_insync_replicas: int | None
    status: Literal["ok", "raised", "reassigning", "below_policy"]


class ReplicationFix(Shape):
    """``shoal admin fix-replication``: the policy applied and every shoal topic's result."""

    replication_factor: int
    """The policy's replication factor for the live brokers."""
    min_insync_replicas: int
    complete: bool
    """Every topic is at the policy (False: some replicas are still copying, or too few brokers are live)."""
    topics: list[TopicFix]


class Started(Shape):
    """``shoal start NAME`` and ``shoal up`` on a partly running cluster: the processes started
    again in place (same command line, ports and data), by name; empty when all were running."""

    started: list[str]


class Stopped(Shape):
    """``shoal down`` and ``shoal demo --stop``: the processes stopped, by name."""

    stopped: list[str]


class JarBundle(Shape):
    version: str
    dir: str
    cached: bool
    jars: int


class Jars(ShapeRoot[dict[str, JarBundle]]):
    """``shoal jars``: each pinned bundle by name."""


# -- shoal table -------------------------------------------------------------------------------


class ColumnJson(Shape):
    name: str
    type: str
    nullable: bool


class TableJson(Shape):
    """A table definition as ``TableDefinition.to_json`` writes it (and ``--schema-file`` reads it)."""

    name: str
    columns: list[ColumnJson]
    primary_key: list[str]
    partition_key: str
    keyspace: str
    replication_factor: int


class PlacementJson(Shape):
    server_id: str
    placement_id: int


class PartitionLeader(Shape):
    server_id: str
    placement_id: int | None
    alive: bool


KeyValue = int | str | None
"""A partition key value as JSON (null: unbounded)."""


class SplitJson(Shape):
    split_point: KeyValue
    split_partition_id_low: str | None
    split_partition_id_high: str | None
    split_servers_low: list[PlacementJson]
    split_servers_high: list[PlacementJson]


class SplitChildJson(Shape):
    partition_id: str
    begin: KeyValue
    end: KeyValue
    servers: list[PlacementJson]


class SplitResult(Shape):
    """``shoal table split``: the SPLIT_PARTITION committed and, with ``--wait``, its SPLIT_FINALIZE."""

    table: str
    partition_id: str
    split_point: KeyValue
    low: SplitChildJson
    high: SplitChildJson
    state: Literal["SPLITTING", "FINALIZED"]
    metadata_sequence: int
    seconds: float


class ReplicaLifecycleJson(Shape):
    """One replica of a partition: its lifecycle state (table partitioning seed section 3) and how far
    it has acked the leader's channels (its catch-up progress; None where nothing was read)."""

    server_id: str
    placement_id: int
    state: Literal["LOAD", "LIVE", "UNLOAD"]
    leader: bool
    segments_ack: int | None = None
    """Its Ack on the leader's segments channel."""
    segments_end: int | None = None
    """The leader's segments channel's end (Append index)."""
    wal_ack: int | None = None
    """Its Ack on the leader's WAL channel."""
    wal_end: int | None = None


class PartitionJson(Shape):
    partition_id: str
    begin: KeyValue
    end: KeyValue
    servers: list[PlacementJson]
    servers_joining: list[PlacementJson]
    servers_leaving: list[PlacementJson]
    leader: PartitionLeader | None
    preferred_leader: PlacementJson
    """The first of ``servers``: the leader the nodes hand leadership back to once it is caught up."""
    epoch: int
    splitting: bool
    out_of_sync: list[PlacementJson] = Field(default_factory=list)
    """Replicas the leader marked out of sync (lagging or dead: they do not hold the Tail and are not
    elected while an in-sync replica can be); every other replica of ``servers`` is in sync."""
    split: SplitJson | None = omitted()
    """Only while the partition is splitting."""
    replicas: list[ReplicaLifecycleJson] = []
    """Every replica with its lifecycle state and catch-up progress."""


class LeaderBalanceJson(Shape):
    """How leadership is spread (:func:`metadata.rebalance.leader_balance`)."""

    leaders_per_node: dict[str, int]
    preferred_per_node: dict[str, int]
    on_preferred: int
    """Partitions led by their preferred leader."""
    partitions: int
    balanced: bool
    """Every partition is led by its preferred leader."""


class TableDescription(Shape):
    """``shoal table describe``: the current METADATA file with each partition's leader and epoch."""

    table: TableJson
    metadata_txnid: str
    metadata_sequence: int
    metadata_servers: list[str]
    partitions: list[PartitionJson]
    balance: LeaderBalanceJson


class PartitionRebalance(Shape):
    partition_id: str
    preferred_leader: str
    leader_before: str | None
    leader_after: str | None
    epoch_before: int
    epoch_after: int
    on_preferred: bool


class TableRebalance(Shape):
    """``shoal table rebalance``: a preferred-leader election, each partition's leader before and after.

    ``after`` is read when the command returns: with ``--wait``, once every partition is on its
    preferred leader or the timeout passed (``balanced`` says which)."""

    table: str
    request_id: str
    waited: bool
    seconds: float
    balanced: bool
    partitions: list[PartitionRebalance]
    before: LeaderBalanceJson
    after: LeaderBalanceJson


class ReplicaChange(Shape):
    """``shoal table add-replica`` / ``remove-replica``: the lifecycle operation committed, and with
    ``--wait`` where it ended (LIVE after JOIN_FINALIZE; REMOVED once the leaver unloaded)."""

    table: str
    partition_id: str
    server_id: str
    placement_id: int
    action: Literal["add-replica", "remove-replica"]
    state: Literal["LOAD", "LIVE", "UNLOAD", "REMOVED"]
    metadata_sequence: int
    waited: bool
    seconds: float


class DrainMove(Shape):
    """One replica moved off the drained node: a new replica joined elsewhere, then the old one left."""

    table: str
    partition_id: str
    from_placement_id: int
    to_server_id: str
    to_placement_id: int
    """0 (and ``to_server_id`` empty) when the partition held its replication factor elsewhere
    already (a drain run again after one that stopped between its join and its leave)."""
    was_leader: bool
    state: Literal["LOAD", "LIVE", "UNLOAD", "REMOVED"]
    """Where the old replica ended: REMOVED when the move completed (``--wait``)."""


class DrainResult(Shape):
    """``shoal node drain``: every replica moved off ``server_id`` (leaders last)."""

    server_id: str
    moves: list[DrainMove]
    complete: bool
    """Every old replica is REMOVED (only with ``--wait``)."""
    seconds: float


class TableHead(Shape):
    table: str
    metadata_txnid: str
    metadata_sequence: int


class TableList(ShapeRoot[list[TableHead]]):
    """``shoal table list``."""


class HistoryEntry(Shape):
    sequence: int
    txnid: str
    parent_txnid: str | None
    change: str
    summary: str
    created_at_ms: int
    partitions: int


class TableHistory(ShapeRoot[list[HistoryEntry]]):
    """``shoal table history``: the committed METADATA transactions, oldest first."""


# -- shoal write -------------------------------------------------------------------------------


class WriteResult(Shape):
    """``shoal write``."""

    table: str
    rows: int
    batches: int
    synced: bool
    deliveries: list[DeliveryReport]
    """One per Kafka message (one Arrow IPC batch), as ``DeliveryReport.to_json`` writes it."""


# -- shoal verify ------------------------------------------------------------------------------


class ReplicaError(Shape):
    server_id: str
    placement_id: int
    error: str


class ReplicaDescription(BaseModel):
    """What the node says of its replica (``describe replica`` over Arrow Flight); the node may add keys."""

    model_config = ConfigDict(extra="allow")

    server_id: str
    placement_id: int
    partition_id: str
    root: str | None
    chain: list[str]
    row_count: int
    content_hash: str
    key_min: int | str | None = None
    """The lowest partition key the replica holds (None when it holds no rows)."""
    key_max: int | str | None = None
    """The highest partition key the replica holds (None when it holds no rows)."""


class WalChannelCheck(Shape):
    """One channel from its Tail to its end: a WAL channel's GTID hash chain and GTID order (``records``
    = WAL records), or a segments channel's GTID order (``records`` = manifests)."""

    topic: str
    records: int
    tail: int | None
    append: int | None
    ok: bool
    error: str | None


class PartitionVerification(Shape):
    partition_id: str
    agree: bool
    chains_equal: bool
    replicas: list[ReplicaError | ReplicaDescription]
    wal_channels: list[WalChannelCheck]
    wal_chains_ok: bool
    segments_channels: list[WalChannelCheck]
    gtids_ok: bool
    """Every channel's GTIDs in order (DESIGN.md section 10) and no epoch written by two placements."""
    gtid_error: str | None
    """Why the GTIDs are not in order across channels (an epoch two placements used, GTIDs that do not
    follow the order the ingest offsets were accepted in), else None."""
    in_range: bool = True
    """Every replica's rows lie inside the partition's key range (EventQL table partitioning, section 2)."""
    range_error: str | None = None
    """Which replicas hold keys outside the partition's key range, else None."""
    covered: bool | None = None
    """Every replica holds every write still on the partition's channels (its WAL channels from their
    Tails, every segment on its segments channels), at least at its GTID (DESIGN.md section 6); None
    when not checked."""
    coverage_error: str | None = None
    """Which replicas miss which writes on the channels (a few examples), or which WAL records and
    segments could not be read, else None."""


class RetiredVerification(Shape):
    """A partition an earlier METADATA version listed and the current one does not (a split parent):
    the channels it left until its replicas' UNLOAD_FINAL deletes them, and whether the listed
    partitions hold every write on them (:mod:`shoal_app.cli.verify_retired`)."""

    partition_id: str
    key_range: str
    wal_channels: list[WalChannelCheck]
    segments_channels: list[WalChannelCheck]
    """A channel already deleted shows ``tail`` None and ``ok`` true: nothing left to check."""
    channels_ok: bool
    """Every channel still there reads whole, with its hash chain intact and its GTIDs in order."""
    gtid_error: str | None
    covered: bool | None
    """Every write on the channels is on every replica of the listed partition that now holds its
    key, at its GTID or newer; None when not checked."""
    coverage_error: str | None


class UnacceptedIngest(Shape):
    """An ingest topic holding a write Kafka acknowledged that its leader has not accepted
    (:mod:`shoal_app.cli.verify_ingest`): no replica holds it yet (no leader running, one that
    cannot take it, or, with ``held_back_from``, a transaction still open in front of it); or, with
    ``error``, one whose offsets could not be read."""

    partition_id: str
    topic: str
    accepted_to: int | None = None
    """The leader group's committed offset: every record below it was accepted (None: none was)."""
    last_unaccepted: int | None = None
    """The offset of the last acknowledged record not accepted after verify waited for it."""
    held_back_from: int | None = None
    """The topic's last stable offset, when a transaction open there still held back the records
    from it up to ``high_water`` (its leader cannot read them yet) after verify waited."""
    high_water: int | None = None
    """The topic's high watermark when verify began (with ``held_back_from``)."""
    error: str | None = None


class Verification(Shape):
    """``shoal verify``: ``ok`` when every partition's replicas agree and hold only keys of its range,
    every WAL chain is intact, every channel's GTIDs are in order, every write on the channels
    (the listed partitions' and the ``retired`` ones') is held by the replicas that should hold it,
    Kafka deletes none of those topics' records by time or size (``time_retained``), and the leaders
    accepted every write the ingest topics acknowledged (``unaccepted``)."""

    table: str
    ok: bool
    partitions: list[PartitionVerification]
    retired: list[RetiredVerification] = []
    """Split parents whose channels verify read (each one's, until they are deleted)."""
    time_retained: dict[str, str] = {}
    """Topics shoal truncates itself (ingest topics, WAL and segments channels, retired ones too) that
    Kafka deletes records of by time or size: topic -> those settings. Records could expire before a
    replica took them, and a channel truncated that way looks like one the Tail truncated, so
    ``ok`` is false while any is listed."""
    unaccepted: list[UnacceptedIngest] = []
    """Ingest topics (the listed partitions' and the retired ones') with an acknowledged write their
    leader did not accept while verify waited (15 s), or whose offsets could not be read: ``ok`` is
    false while any is listed."""


# -- shoal acl ---------------------------------------------------------------------------------


class AclRuleJson(Shape):
    """One ALLOW ACL (:class:`shoal.security.acls.AclRule`): ``principal`` may ``operation`` on the
    resource, from any host."""

    role: Literal["writer", "node", "monitor", "spark-ingest", "admin"]
    principal: str
    resource_type: Literal["TOPIC", "GROUP", "TRANSACTIONAL_ID", "CLUSTER"]
    name: str
    pattern: Literal["LITERAL", "PREFIXED"]
    operation: str
    permission: Literal["ALLOW"]
    host: Literal["*"]


class AclPlan(ShapeRoot[list[AclRuleJson]]):
    """``shoal acl plan --output json``: the ACLs each role needs, sorted."""


# -- shoal spark -------------------------------------------------------------------------------


class IngestSummary(Shape):
    """``shoal spark ingest``, once the query stopped."""

    query: str
    query_id: str
    checkpoint: str
    malformed_to_deadletter: int
    batches: int
    consumer_group: str
    mirrored_offsets: dict[str, int]
    """The source offsets mirrored to ``consumer_group``, by ``topic/partition``."""
    error: str | None


class Compactions(ShapeRoot[list[CompactionOutcome]]):
    """``shoal spark compact``."""


# -- shoal demo --roundtrip --------------------------------------------------------------------


class RoundtripStep(BaseModel):
    """One step; each step adds its own details as further keys."""

    model_config = ConfigDict(extra="allow")

    name: str
    ok: bool
    seconds: float


class Roundtrip(Shape):
    """``shoal demo --roundtrip``."""

    ok: bool
    seconds: float
    steps: list[RoundtripStep]


# -- shoal demo --------------------------------------------------------------------------------


class ClusterSection(Shape):
    brokers: int
    nodes: int
    bootstrap_servers: str | None
    zk_connect: str | None
    cluster_file: str


class GeneratorSection(Shape):
    events: int
    rate_per_s: float
    produced: int
    acknowledged: int
    failed: int


class IngestSection(Shape):
    query: str
    pid: int | None = omitted()
    checkpoint: str | None = omitted()
    group: str | None = omitted()
    log: str | None = omitted()
    deadletter_records: int | None = omitted()
    rows_in_shoal: int | None = omitted()


class FailedOverPartition(Shape):
    partition_id: str
    old_leader: str
    old_epoch: int
    new_leader: str | None
    new_epoch: int


class FailoverSection(Shape):
    happened: bool
    partitions: list[FailedOverPartition]
    killed: str | None = omitted()
    killed_pid: int | None = omitted()
    seconds: float | None = omitted()
    error: str | None = omitted()


class RestartSection(Shape):
    server_id: str | None = omitted()
    pid: int | None = omitted()
    seconds: float | None = omitted()
    same_command_line: bool | None = omitted()
    error: str | None = omitted()


class LeadersSection(Shape):
    """The leaders at the end of the demo, after a preferred-leader election (``shoal table rebalance``)."""

    per_node: dict[str, int]
    """Partitions each storage node leads."""
    on_preferred: int
    partitions: int
    balanced: bool
    """Every partition is led by its preferred leader."""
    per_node_before: dict[str, int] | None = omitted()
    """Before the preferred-leader election."""
    seconds: float | None = omitted()
    error: str | None = omitted()


class CompactionSection(Shape):
    majors: list[CompactionOutcome]
    committed: int
    ok: bool
    error: str | None = omitted()


class VerifiedReplica(Shape):
    server_id: str
    row_count: int | None
    content_hash: str | None
    error: str | None


class VerifiedPartition(Shape):
    partition_id: str
    agree: bool
    chains_equal: bool | None
    wal_chains_ok: bool
    covered: bool | None = None
    """Every replica holds every write still on the channels (``shoal verify``'s ``covered``)."""
    replicas: list[VerifiedReplica]


class VerifySection(Shape):
    ok: bool
    attempts: int | None = omitted()
    partitions: list[VerifiedPartition] | None = omitted()
    exit_code: int | None = omitted()
    error: str | None = omitted()


class ContentSection(Shape):
    """Every acknowledged event in shoal exactly once, with its own content."""

    ok: bool
    acknowledged: int | None = omitted()
    rows: int | None = omitted()
    distinct_ids: int | None = omitted()
    missing: int | None = omitted()
    unexpected: int | None = omitted()
    wrong_content: int | None = omitted()
    missing_sample: list[int] | None = omitted()


class MonitorSection(Shape):
    url: str | None
    pid: int | None
    status: Status | None = omitted()
    problems: list[Problem] | None = omitted()
    """The first problems of the monitor's last snapshot."""


class DemoProcess(Shape):
    name: str
    pid: int
    running: bool


class DemoSummary(Shape):
    """``shoal demo``: ``ok`` only if the failover happened, a compaction was committed, ``shoal
    verify`` agreed and every acknowledged event is in shoal exactly once."""

    ok: bool
    verified: bool
    data_dir: str
    table: str
    source_topic: str
    partitions: int
    partition_ids: list[str]
    replication_factor: int
    cluster: ClusterSection
    generator: GeneratorSection
    ingest: IngestSection
    caught_up: bool
    failover: FailoverSection
    restart: RestartSection
    compaction: CompactionSection
    leaders: LeadersSection
    verify: VerifySection
    content: ContentSection
    monitor: MonitorSection
    kept_running: bool
    errors: list[str]
    processes: list[DemoProcess]
    seconds: float
