"""The monitor's JSON shapes as types: the snapshot, the chart series and the history file.

:class:`Snapshot` is what ``shoal offsets --output json`` prints and ``/api/snapshot`` serves;
:class:`HistoryView` is ``/api/history``; :class:`HistoryFile` is ``<dir>/monitor-history.json``.
Offsets are Kafka offsets (DESIGN.md section 3 says what each index means); times are seconds
since the epoch unless the field name ends in ``_ms``. The JSON Schemas generated from these
models are committed under ``docs/schemas/`` and checked by the unit tests.

A channel whose topic does not exist has ``exists: false`` and none of the index fields, so each
channel is a union of its two shapes, told apart by ``exists``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from monitor.status import Status
from shoal.shapes import Shape

SNAPSHOT_VERSION: Literal[1] = 1
HISTORY_VERSION: Literal[1] = 1


class Window(Shape):
    samples: int
    interval_s: float
    warn_samples: int


class Leader(Shape):
    server_id: str
    placement_id: int | None
    alive: bool


class ReaderLag(Shape):
    """Lag and verdict of one group on one topic partition.

    ``lag_records`` counts offsets from the first data record the group has not committed to the
    log end (0 when only transaction markers are left); ``lag_seconds`` is the age of that record
    (null when it could not be read in time); ``lag_bytes_estimate`` is ``lag_records`` times the
    mean size of the records the monitor read on that topic. ``series`` names the history series
    plotted on the web page (``/api/history``)."""

    lag_records: int
    lag_seconds: float | None
    lag_bytes_estimate: int | None
    status: Status
    reason: str
    series: str


class AbsentIngest(Shape):
    topic: str
    exists: Literal[False]
    group: str
    status: Status
    reason: str


class Ingest(ReaderLag):
    """The ingest topic: ``accepted_index`` is the leader group's committed offset."""

    topic: str
    exists: Literal[True]
    group: str
    log_start: int
    log_end: int
    accepted_index: int | None


class ChannelOwner(Shape):
    server_id: str
    placement_id: int
    role: str


class ChannelHead(Shape):
    topic: str
    exists: bool
    topic_id: str | None
    owner: ChannelOwner
    is_leader_channel: bool


class WalReplica(ReaderLag):
    server_id: str
    placement_id: int
    role: str
    ack_group: str
    ack_index: int | None
    consume_group: str | None
    consume_index: int | None
    consume_lag_records: int | None


class AbsentWalChannel(ChannelHead):
    exists: Literal[False]
    replicas: list[WalReplica]
    status: Status
    reason: str


class WalChannel(ChannelHead):
    """``append_index`` is the log end, ``tail_index`` the log start; ``covered_index`` is the
    highest offset of this channel that segment manifests of the partition cover (or null)."""

    exists: Literal[True]
    covered_index: int | None
    append_index: int
    tail_index: int
    replicas: list[WalReplica]
    status: Status
    reason: str


class RecentSegment(Shape):
    offset: int
    segment_id: str
    is_major: bool
    created_at_ms: int
    size_bytes: int
    row_count: int
    acked_by: list[int]
    """Placement ids whose Ack on the segments channel is past this manifest."""


class SegmentsReplica(ReaderLag):
    server_id: str
    placement_id: int
    role: str
    ack_group: str
    ack_index: int | None
    unacked_segments: int


class AbsentSegmentsChannel(ChannelHead):
    exists: Literal[False]
    replicas: list[SegmentsReplica]
    recent: list[RecentSegment]
    status: Status
    reason: str


class SegmentsChannel(ChannelHead):
    exists: Literal[True]
    log_start: int
    log_end: int
    manifests: int
    majors: int
    minors_awaiting_compaction: int
    invalid_manifests: int
    recent: list[RecentSegment]
    replicas: list[SegmentsReplica]
    status: Status
    reason: str


AnyIngest = Annotated[Ingest | AbsentIngest, Field(discriminator="exists")]
AnyWalChannel = Annotated[WalChannel | AbsentWalChannel, Field(discriminator="exists")]
AnySegmentsChannel = Annotated[SegmentsChannel | AbsentSegmentsChannel, Field(discriminator="exists")]


class PartitionReport(Shape):
    partition_id: str
    leader: Leader | None
    preferred_leader: str | None = None
    """The server the nodes hand leadership back to once it is caught up (DESIGN.md section 7)."""
    epoch: int
    leader_changes: int
    ingest: AnyIngest
    segments: list[AnySegmentsChannel]
    wal: list[AnyWalChannel]
    status: Status


class TableReport(Shape):
    table: str
    status: Status
    partitions: list[PartitionReport]
    leaders_per_node: dict[str, int] = Field(default_factory=dict)
    """Partitions each server leads (a leader that is alive), every server of the table listed."""
    on_preferred_leader: int = 0
    """Partitions led by their preferred leader (all of them: the leaders are balanced)."""


class SparkPartition(ReaderLag):
    topic: str
    partition: int
    committed: int | None
    log_start: int
    log_end: int


class SparkQuery(Shape):
    query: str
    group: str
    status: Status
    lag_records: int
    partitions: list[SparkPartition]


class GroupReport(Shape):
    """A consumer group found by its name prefix, e.g. a storage node's compaction intake
    (``<prefix>.compaction-intake.<partition>.<placement>``) on a partition's compaction topic."""

    group: str
    status: Status
    lag_records: int
    partitions: list[SparkPartition]


class Problem(Shape):
    where: str
    status: Status
    reason: str


class Snapshot(Shape):
    """One poll of the monitor: every table's channels, Spark queries, and the problems found."""

    version: Literal[1] = SNAPSHOT_VERSION
    generated_at: float
    cluster_id: str | None
    status: Status
    """The worst status of everything below."""
    window: Window
    tables: list[TableReport]
    spark_queries: list[SparkQuery]
    compaction_intake: list[GroupReport] = Field(default_factory=list)
    """The leaders' compaction intake groups (the majors committed from the compaction topics)."""
    problems: list[Problem]


class Series(Shape):
    label: str
    points: list[tuple[float, int]]
    """``[ts, lag_records]`` per sample."""


class HistoryView(Shape):
    """``/api/history``: the lag series for the charts."""

    window_s: float
    series: dict[str, Series]


class PartitionMemoryFile(Shape):
    epoch: int
    leader: str | None
    leader_changes: int


Instant = Annotated[float, Field(allow_inf_nan=False)]
"""A timestamp in a history file: NaN or an infinity would never age out of a window."""


class HistoryFile(BaseModel):
    """``<history dir>/monitor-history.json``: the monitor's windows and events, kept across restarts.

    ``series`` rows are ``[ts, committed|null, log_start, log_end, lag, members]``; ``stable_ends``
    holds, per series key, the last stable offset of each of its rows in the same order (null: not
    read), kept apart so that a monitor of an earlier release, which knows six-field rows only and
    ignores unknown keys, still reads the file. Rows of seven fields (the last stable offset last)
    are read too. ``events`` rows are ``[ts, text]``. Unknown keys are ignored (a newer monitor may
    add some)."""

    version: Literal[1] = HISTORY_VERSION
    saved_at: Instant
    cluster_id: str | None
    topic_ids: dict[str, str]
    partitions: dict[str, PartitionMemoryFile]
    series: dict[
        str,
        list[
            tuple[Instant, int | None, int, int, int, int, int | None] | tuple[Instant, int | None, int, int, int, int]
        ],
    ]
    events: dict[str, list[tuple[Instant, str]]]
    stable_ends: dict[str, list[int | None]] = Field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


SCHEMAS: dict[str, type[BaseModel]] = {
    "monitor-snapshot": Snapshot,
    "monitor-history-view": HistoryView,
    "monitor-history-file": HistoryFile,
}
"""The monitor's JSON documents by schema name (``docs/schemas/<name>.json``)."""
