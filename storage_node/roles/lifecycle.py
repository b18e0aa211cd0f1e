"""The partition lifecycle on a storage node: JOIN_FINALIZE, UNLOAD and UNLOAD_FINAL.

Table partitioning seed (002) sections 3, 4.2 and 4.3; segment replication seed (000) sections 3.2
and 3.7; DESIGN.md section 8. Discovery (:mod:`metadata.discovery`) says what each replica should
be; the node (:mod:`storage_node.node`) holds LOAD and LIVE replicas as followers (only LIVE ones
campaign and serve scans), and runs one :class:`LifecycleWorker` (thread ``lifecycle-<pid8>``) for a
partition that has lifecycle work:

- **JOIN_FINALIZE** (on the partition's leader, while ``servers_joining`` is not empty). A joining
  placement (LOAD) is an ordinary follower of the leader's channels: it catches up from the latest
  major manifest on the segments channel, the minors after it, then the WAL channel (DESIGN.md
  section 6), from Kafka alone. The leader commits FinalizeJoin, fenced by its epoch, once
  :func:`joiner_caught_up`: the joiner's Ack on the leader's segments channel is past the manifest of
  the leader's root segment, and its Ack on the leader's WAL channel reaches what the leader's
  segments cover of that channel (its covered end). Rows newer than the root are still in the WAL
  channel, which the joiner tails and which the Tail keeps for it (joiners count among the peers).
- **UNLOAD** (a placement in ``servers_leaving``, or no longer listed). It never campaigns (a leader
  resigns first, and the next leader adopts its WAL channel like any failed leader's, DESIGN.md
  section 7) and serves nothing, but keeps its data until :func:`unload_check` holds: every segment
  of its chain (latest major to root) is referenced on the current leader's segments channel (as a
  manifest, or folded into a major's ``included_segment_ids``), its own WAL channel is covered by
  the leader's segments up to its last record, and every remaining placement (servers and joining)
  acked the leader's segments channel past the last of those manifests. A segment the leader does
  not reference (a diverged old leader's) is pushed on the leaver's own segments channel for the
  leader to merge (source 3.5 PUSH), and counts once the leader acked it there and published a
  segment after it. Then the leaver commits FinalizeLeave (if it is still listed) and records
  UNLOAD_FINAL in a marker file, so a restart does not start over.
- **UNLOAD_FINAL**. After ``grace_s`` the replica's directory, its consumer groups
  (``replica_group``, ``consume_group``) and its own channels (WAL and segments) are removed, each
  logged. Nothing leaves UNLOAD_FINAL.

Every replica directory carries ``lifecycle.json`` (table, key range, UNLOAD_FINAL time), so a node
that restarts finds the replicas it holds (:func:`held_on_disk`) and runs discovery with them.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException

from metadata.discovery import HeldReplica, PartitionDiscovery, ReplicaState
from metadata.errors import InvalidOperationError
from metadata.keyspace import KeyRange
from metadata.metadata_file import MetadataFile
from shoal.errors import ShoalError
from shoal.ids import validate_partition_id, validate_placement_id
from shoal.kafka import clients
from shoal.kafka.admin import delete_topics
from shoal.kafka.groups import delete_groups
from shoal.kafka.indexes import channel_indexes
from shoal.kafka.readers import ChannelManifest, read_manifests, read_wal_channel
from shoal.kafka.settings import KafkaSettings
from shoal.segments.parquet_io import delete_segment_file, list_segment_files
from shoal.topics import TopicNames
from shoal.worker import Worker
from storage_node.replica import PartitionReplica
from storage_node.replication.publish import push_segments

log = logging.getLogger(__name__)

MARKER = "lifecycle.json"


@dataclass(frozen=True)
class LifecycleConfig:
    grace_s: float = 30.0
    """How long an UNLOAD_FINAL replica's data stays before it is removed."""
    poll_s: float = 1.0
    """How often a lifecycle worker checks progress."""


# -- the marker file --------------------------------------------------------------------------------


def write_marker(replica: PartitionReplica, key_range: KeyRange, *, unload_final_at: float | None = None) -> None:
    """Record what this replica directory is (and, once reached, when it became UNLOAD_FINAL)."""
    data = {
        "table": replica.table.name,
        "partition_id": replica.partition_id,
        "placement_id": replica.placement_id,
        "begin": key_range.begin.hex(),
        "end": key_range.end.hex(),
        "unload_final_at": unload_final_at,
    }
    path = replica.directory / MARKER
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def read_marker(directory: Path) -> dict[str, object] | None:
    try:
        data = json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def unload_final_at(directory: Path) -> float | None:
    data = read_marker(directory)
    value = None if data is None else data.get("unload_final_at")
    return float(value) if isinstance(value, int | float) else None


def held_on_disk(data_dir: Path, table: str) -> list[HeldReplica]:
    """The replicas of ``table`` this node has on disk (directories with a valid marker)."""
    out: list[HeldReplica] = []
    root = Path(data_dir) / "partitions"
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        data = read_marker(d)
        if data is None or data.get("table") != table:
            continue
        try:
            out.append(
                HeldReplica(
                    validate_partition_id(str(data["partition_id"])),
                    validate_placement_id(int(str(data["placement_id"]))),
                    KeyRange(bytes.fromhex(str(data["begin"])), bytes.fromhex(str(data["end"]))),
                    all_data_pushed=data.get("unload_final_at") is not None,
                )
            )
        except (ShoalError, ValueError, KeyError) as exc:
            log.warning("ignoring replica directory %s: bad %s: %s", d, MARKER, exc)
    return out


# -- pure decisions ---------------------------------------------------------------------------------


def joiner_caught_up(
    *,
    chain_empty: bool,
    root_manifest_offset: int | None,
    segments_ack: int | None,
    covered_end: int,
    wal_ack: int | None,
) -> bool:
    """JOIN_FINALIZE may be committed for a joiner (segment replication seed 3.7).

    ``root_manifest_offset``: where the leader's root segment's manifest is on its segments channel
    (None: not published yet); ``segments_ack`` / ``wal_ack``: the joiner's Ack on the leader's
    segments / WAL channel; ``covered_end``: what the leader's segments cover of its WAL channel.
    """
    root_acked = root_manifest_offset is not None and segments_ack is not None and segments_ack > root_manifest_offset
    if not chain_empty and not root_acked:
        return False
    return covered_end == 0 or (wal_ack is not None and wal_ack >= covered_end)


@dataclass(frozen=True)
class UnloadProgress:
    done: bool
    missing: tuple[str, ...] = ()
    """Segments of the leaver's chain the leader's segments channel does not reference."""
    wal_covered: bool = True
    """The leader's segments cover the leaver's own WAL channel up to its last record."""
    needed_offset: int | None = None
    """Every remaining placement must ack the leader's segments channel past this manifest."""
    waiting_for: tuple[int, ...] = ()
    """Remaining placements that have not acked that far."""

    def describe(self) -> str:
        if self.done:
            return "every remaining replica acked this replica's data"
        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} segment(s) not on the leader's channel")
        if not self.wal_covered:
            parts.append("own WAL channel not adopted yet")
        if self.waiting_for:
            parts.append(f"waiting for acks of placements {list(self.waiting_for)} past offset {self.needed_offset}")
        return "; ".join(parts) or "waiting"


def unload_check(
    *,
    own_segments: Sequence[str],
    own_wal_topic: str,
    own_wal_end: int,
    manifests: Sequence[ChannelManifest],
    acks: Mapping[int, int | None],
    resolved: Mapping[str, int] | None = None,
) -> UnloadProgress:
    """Has a leaving replica's data reached every remaining replica (table partitioning seed 4.3)?

    ``own_segments``: the leaver's chain from its latest major to root; ``own_wal_end``: one past
    the last record of its own WAL channel (0 if it never led); ``manifests``: the manifests on
    the current leader's segments channel; ``acks``: each remaining placement's Ack there;
    ``resolved``: segment id -> a manifest offset after the leader merged that pushed segment.
    """
    first_ref: dict[str, int] = {}
    wal_offset: int | None = None if own_wal_end > 0 else -1
    for m in manifests:
        for sid in (m.manifest.segment_id, *m.manifest.included_segment_ids):
            first_ref.setdefault(sid, m.offset)
        if wal_offset is None:
            for r in m.manifest.covered_wal_offsets:
                if r.topic == own_wal_topic and r.end_offset >= own_wal_end:
                    wal_offset = m.offset
                    break
    resolved = resolved or {}
    missing = tuple(s for s in own_segments if s not in first_ref and s not in resolved)
    offsets = [first_ref[s] if s in first_ref else resolved[s] for s in own_segments if s not in missing]
    if wal_offset is not None and wal_offset >= 0:
        offsets.append(wal_offset)
    needed = max(offsets, default=None)
    waiting: tuple[int, ...] = ()
    if needed is not None:
        waiting = tuple(sorted(p for p, a in acks.items() if a is None or a <= needed))
    done = not missing and wal_offset is not None and not waiting
    return UnloadProgress(done, missing, wal_offset is not None, needed, waiting)


# -- the worker -------------------------------------------------------------------------------------


@dataclass
class LifecycleView:
    """What a :class:`LifecycleWorker` needs from the node for one held partition (all callables: the
    node's state changes under it)."""

    replica: Callable[[], PartitionReplica]
    key_range: Callable[[], KeyRange]
    state: Callable[[], ReplicaState]
    discovery: Callable[[], PartitionDiscovery | None]
    file: Callable[[], MetadataFile | None]
    leader_placement: Callable[[], int | None]
    """The partition's current leader (from its epoch znode), or None."""
    leading_epoch: Callable[[], int | None]
    manifest_offset: Callable[[str], int | None]
    """While leading: the offset of a segment's manifest on this placement's segments channel (its
    publisher's record), or None if it is not published yet."""
    """This node's leader epoch for the partition when it leads (and its role is ready), else None."""
    finalize_join: Callable[[int, int], None]
    """(placement id, epoch): commit FinalizeJoin fenced by the epoch."""
    finalize_leave: Callable[[int], None]
    removed: Callable[[], None]
    """The replica's files are gone: the node forgets it."""


@dataclass
class LifecycleStats:
    joins_finalized: int = 0
    pushed: int = 0
    progress: str = ""
    removed: bool = False
    events: list[str] = field(default_factory=list)


class LifecycleWorker(Worker):
    """JOIN_FINALIZE on a leader; UNLOAD -> UNLOAD_FINAL -> removal on a leaver (module docstring)."""

    def __init__(
        self,
        view: LifecycleView,
        kafka: KafkaSettings,
        topics: TopicNames,
        config: LifecycleConfig,
        partition_id: str,
    ) -> None:
        super().__init__(f"lifecycle-{partition_id[:8]}")
        self.view = view
        self.kafka = kafka
        self.topics = topics
        self.config = config
        self.partition_id = partition_id
        self.stats = LifecycleStats()
        self._resolved: dict[str, int] = {}
        self._pushed: set[str] = set()
        self._merge_marks: dict[str, int] = {}
        self._manifests: dict[str, list[ChannelManifest]] = {}
        """Manifests read so far per segments channel (read on from the last one, not from 0 each round)."""

    def start(self) -> LifecycleWorker:
        super().start()
        return self

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                if self._step():
                    return
            except (ShoalError, KafkaException, OSError) as exc:
                log.warning("lifecycle of %s: %s (retrying)", self.partition_id, exc)
            self.stopping.wait(self.config.poll_s)

    def _step(self) -> bool:
        """One round; True when there is nothing more to do."""
        state = self.view.state()
        if state is ReplicaState.UNLOAD and unload_final_at(self.view.replica().directory) is not None:
            state = ReplicaState.UNLOAD_FINAL  # reached here; discovery has not said so yet
        if state is ReplicaState.UNLOAD:
            self._unload()
            return False
        if state is ReplicaState.UNLOAD_FINAL:
            return self._final()
        return self._finalize_joins()

    # -- JOIN_FINALIZE ----------------------------------------------------------------------------

    def join_progress(self, joiner: int) -> bool:
        """Is placement ``joiner`` caught up with this (leader) replica?"""
        replica = self.view.replica()
        own = replica.placement_id
        chain = replica.chain
        group = self.topics.replica_group(self.partition_id, joiner)
        seg = channel_indexes(self.kafka, self.topics.segments(self.partition_id, own), (group,), timeout_s=10)
        wal = channel_indexes(self.kafka, self.topics.wal(self.partition_id, own), (group,), timeout_s=10)
        return joiner_caught_up(
            chain_empty=chain.root is None,
            root_manifest_offset=None if chain.root is None else self.view.manifest_offset(chain.root),
            segments_ack=seg.ack(group),
            covered_end=replica.covered_end(),
            wal_ack=wal.ack(group),
        )

    def _finalize_joins(self) -> bool:
        epoch = self.view.leading_epoch()
        d = self.view.discovery()
        file = self.view.file()
        if d is None or file is None or epoch is None:
            return epoch is None  # not (or no longer) leading: nothing to do here
        entry = file.partitions[file.index_of(self.partition_id)]
        if not entry.servers_joining:
            return True
        for p in entry.servers_joining:
            if self.join_progress(p.placement_id):
                try:
                    self.view.finalize_join(p.placement_id, epoch)
                except InvalidOperationError as exc:  # finalized meanwhile, or it left
                    log.info("JOIN_FINALIZE of %s in %s not needed: %s", p, self.partition_id, exc)
                    continue
                self.stats.joins_finalized += 1
                log.info("JOIN_FINALIZE: %s caught up with %s and is LIVE", p, self.partition_id)
        return False

    # -- UNLOAD ---------------------------------------------------------------------------------

    def _unload(self) -> None:
        replica = self.view.replica()
        file = self.view.file()
        leader = self.view.leader_placement()
        if file is None or leader is None or leader == replica.placement_id:
            self.stats.progress = "waiting for a leader among the remaining replicas"
            return
        remaining: list[int] = []
        if self.partition_id in {e.partition_id for e in file.partitions}:
            entry = file.partitions[file.index_of(self.partition_id)]
            own_server = {p.server_id for p in entry.all_placements() if p.placement_id == replica.placement_id}
            # a new placement of this same server waits for this one to be removed: it is no target
            remaining = [
                p.placement_id for p in (*entry.servers, *entry.servers_joining) if p.server_id not in own_server
            ]
        remaining = [p for p in remaining if p not in (replica.placement_id, leader)]
        seg_topic = self.topics.segments(self.partition_id, leader)
        groups = tuple(self.topics.replica_group(self.partition_id, p) for p in remaining)
        idx = channel_indexes(self.kafka, seg_topic, groups, timeout_s=10)
        acks = {p: idx.ack(g) for p, g in zip(remaining, groups, strict=True)}
        manifests = self._read_manifests(seg_topic)
        progress = unload_check(
            own_segments=[e.segment_id for e in replica.chain.since_latest_major()],
            own_wal_topic=self.topics.wal(self.partition_id, replica.placement_id),
            own_wal_end=self._own_wal_end(replica),
            manifests=manifests,
            acks=acks,
            resolved=self._resolved,
        )
        if progress.missing:
            self._push(replica, progress.missing, leader, manifests)
        self.stats.progress = progress.describe()
        if not progress.done:
            return
        if self._listed_as_leaving(file, replica.placement_id):
            self.view.finalize_leave(replica.placement_id)
        write_marker(replica, self.view.key_range(), unload_final_at=time.time())
        log.info(
            "%s: UNLOAD_FINAL (every remaining replica acked its data); removal in %.0f s",
            replica.name,
            self.config.grace_s,
        )

    def _read_manifests(self, topic: str) -> list[ChannelManifest]:
        """The manifests on ``topic``, reading only what was appended since the last round."""
        seen = self._manifests.setdefault(topic, [])
        start = seen[-1].offset + 1 if seen else 0
        seen.extend(read_manifests(self.kafka, topic, start_offset=start, timeout_s=15))
        return seen

    def _listed_as_leaving(self, file: MetadataFile, placement_id: int) -> bool:
        return any(
            p.placement_id == placement_id
            for e in file.partitions
            if e.partition_id == self.partition_id
            for p in e.servers_leaving
        )

    def _own_wal_end(self, replica: PartitionReplica) -> int:
        """One past the last record on this placement's own WAL channel (0 if it never led)."""
        topic = self.topics.wal(self.partition_id, replica.placement_id)
        if topic not in clients.admin(self.kafka).list_topics(timeout=10).topics:  # all topics: never creates one
            return 0
        last = -1
        for r in read_wal_channel(self.kafka, topic, replica.covered_end()):
            last = r.offset
        return last + 1

    def _push(
        self, replica: PartitionReplica, missing: Sequence[str], leader: int, manifests: Sequence[ChannelManifest]
    ) -> None:
        """Source 3.5 PUSH of segments the leader does not reference; each counts as resolved once the
        leader acked (merged) it on this placement's channel and published a manifest after that."""
        fresh = [sid for sid in missing if sid not in self._pushed]
        if fresh:
            records = [r for sid in fresh if (r := replica.record(sid)) is not None]
            self.stats.pushed += push_segments(replica, records, kafka=self.kafka, topics=self.topics)
            self._pushed.update(fresh)
        own_topic = self.topics.segments(self.partition_id, replica.placement_id)
        merge_group = self.topics.replica_group(self.partition_id, leader)
        own = channel_indexes(self.kafka, own_topic, (merge_group,), timeout_s=10)
        merged = own.ack(merge_group)
        if merged is None or merged < own.append:
            return
        leader_end = channel_indexes(self.kafka, self.topics.segments(self.partition_id, leader), timeout_s=10).append
        for sid in missing:
            mark = self._merge_marks.setdefault(sid, leader_end)
            after = [m.offset for m in manifests if m.offset >= mark]
            if after:
                self._resolved[sid] = min(after)

    # -- UNLOAD_FINAL ---------------------------------------------------------------------------

    def _final(self) -> bool:
        replica = self.view.replica()
        since = unload_final_at(replica.directory)
        if since is None:
            write_marker(replica, self.view.key_range(), unload_final_at=time.time())
            return False
        if time.time() - since < self.config.grace_s:
            return False
        remove_replica(replica, self.kafka, self.topics)
        self.stats.removed = True
        self.view.removed()
        return True


def remove_replica(replica: PartitionReplica, kafka: KafkaSettings, topics: TopicNames) -> None:
    """UNLOAD_FINAL after the grace period: local files, consumer groups and own channels, each logged."""
    pid, own = replica.partition_id, replica.placement_id
    replica.close()
    # the segment files first: a crash inside rmtree must not leave files without their list, which
    # a later open refuses as a lost list (storage_node.replica.replica)
    for sid in list_segment_files(replica.directory):
        delete_segment_file(replica.directory, sid)
    shutil.rmtree(replica.directory, ignore_errors=True)
    log.info("%s: UNLOAD_FINAL: removed local files %s", replica.name, replica.directory)
    admin = clients.admin(kafka)
    groups = [topics.replica_group(pid, own), topics.consume_group(pid, own)]
    # in a child process: librdkafka 2.16 can abort the process on this coordinator request
    for group, why in delete_groups(kafka, groups, timeout_s=10).items():
        if why is None:
            log.info("%s: UNLOAD_FINAL: deleted consumer group %s", replica.name, group)
        else:
            log.info("%s: consumer group %s not deleted: %s", replica.name, group, why)
    channels = [topics.wal(pid, own), topics.segments(pid, own)]
    existing = set(admin.list_topics(timeout=10).topics)
    present = [t for t in channels if t in existing]
    if present:
        try:
            delete_topics(admin, present)
            log.info("%s: UNLOAD_FINAL: deleted channels %s", replica.name, present)
        except ShoalError as exc:
            log.warning("%s: channels %s not deleted: %s", replica.name, present, exc)


__all__ = [
    "LifecycleConfig",
    "LifecycleView",
    "LifecycleWorker",
    "UnloadProgress",
    "held_on_disk",
    "joiner_caught_up",
    "read_marker",
    "remove_replica",
    "unload_check",
    "write_marker",
]
