"""The split of a partition, run by its leader (EventQL partitioning 4.1; segment replication seed 000 3.8).

On seeing its partition SPLITTING in METADATA, the leader's node starts a :class:`PartitionSplitter`
next to the leader role (thread ``split-<pid8>``). Step by step:

1. **Copy** (the table stays writable: the leader keeps accepting). For each child, the parent's
   chain since its latest major is rewritten by the child's key range, piece by piece, keeping
   segment ids, bases and included ids (:mod:`storage_node.replication.split`), into a staging
   replica ``(child, parent placement)``; the ordinary
   :class:`~storage_node.replication.publish.SegmentPublisher` publishes it on
   ``<p>.segments.<child>.<parent placement>``. Copying goes on until every child placement acked
   the channel's end, or for ``precopy_s`` when writes outpace it (so the next step has little
   left to move); a child that does not follow its channel yet never leads to a freeze.
2. **Freeze**: the leader stops consuming ingest and flushes its memtable
   (:attr:`PartitionLeader.ingest_paused`), so every accepted row is in a segment; the last
   accepted GTID ``through`` is fixed. Producers keep writing: their rows wait in the parent's
   ingest topic (acknowledged by Kafka, not yet accepted). Scans keep reading the parent.
3. The last pieces are staged and published; the splitter waits until every child placement's
   committed offset on its staging channel covers them (the seed's "all new leaders confirmed").
   A child that does not ack within ``freeze_timeout_s`` ends the freeze and the round is retried
   later (ingest resumes): a dead child node never stalls the table.
4. Each child's epoch znode is raised to the parent's epoch, so the child's first leader stamps
   GTIDs above every parent row it holds (DESIGN.md section 7: GTIDs strictly increase).
5. **SPLIT_FINALIZE** is committed, fenced by the parent's leader epoch, with its evidence
   (``through`` and each child placement's acked GTID), which :class:`metadata.operations.FinalizeSplit`
   checks. From here scans read the children and producers route to them (their partition maps
   follow METADATA). The parent stays frozen from here on: when the commit call raises, METADATA
   is asked until it says whether the change committed (ZooKeeper may have gone away between the
   write and its answer), and only a change that did not commit un-pauses the parent. A parent
   un-paused after its finalize would accept writes (acknowledged to their producers) that no
   child holds, and its channels are deleted at UNLOAD_FINAL.
6. **Forward stragglers** (:mod:`storage_node.roles.forward`, not this worker, which ends at the
   finalize): rows still in, or still reaching, the parent's ingest topic are forwarded to the
   children exactly once by the node leading the low child, for as long as it leads it, so the
   forwarding survives the node that committed the finalize.

Choices where the seeds are silent:

- Least new machinery: the child replicas receive pieces exactly as followers receive segments
  (same channel format, same receive procedure, acks = committed offsets). A child replica is
  held in LOAD by its node and follows the parent leader's staging channel (``storage_node.node``).
- A leader failover during the split restarts the copy on the new leader's own staging channels;
  pieces keep segment ids, so children answer SEGMENT_EXISTS for what they already hold.
- A producer keeps its own order across the split: it waits for its writes to the parent to be
  accepted (forwarded) before it writes by the new map (``Producer._order_across_splits``).
  Writes of one key by two producers are concurrent writes, as they are without a split.
- The staging replicas stay on disk after the split (under ``split-staging``); removing them, and
  the parent's replicas, is the UNLOAD_FINAL clean-up.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.exceptions import BadVersionError, NodeExistsError

from metadata.client import MetadataClient
from metadata.election import EpochFence, read_epoch
from metadata.keyspace import KeyRange
from metadata.metadata_file import MetadataFile, PartitionEntry, Placement
from metadata.zk_client import ensure_path
from metadata.zk_layout import EpochRecord
from shoal.errors import ShoalError
from shoal.kafka import clients
from shoal.kafka.admin import TRUNCATED_BY_TAIL, create_topic
from shoal.kafka.indexes import channel_indexes
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames
from shoal.worker import Deadline, Worker
from storage_node.replica import PartitionReplica
from storage_node.replication.publish import SegmentPublisher
from storage_node.replication.split import (
    Gtid,
    chain_max_gtid,
    stage_pieces,
    staging_replica,
)
from storage_node.roles.leader import PartitionLeader

log = logging.getLogger(__name__)


class SplitPhase(enum.Enum):
    COPYING = "COPYING"
    FROZEN = "FROZEN"
    FINALIZING = "FINALIZING"
    FINALIZED = "FINALIZED"
    FAILED = "FAILED"


@dataclass(frozen=True)
class SplitChild:
    partition_id: str
    key_range: KeyRange
    placements: tuple[Placement, ...]


def split_children(entry: PartitionEntry, key_range: KeyRange) -> tuple[SplitChild, SplitChild]:
    """The two children of a SPLITTING entry whose range is ``key_range``."""
    assert entry.splitting and entry.split_partition_id_low and entry.split_partition_id_high
    return (
        SplitChild(entry.split_partition_id_low, KeyRange(key_range.begin, entry.split_point), entry.split_servers_low),
        SplitChild(entry.split_partition_id_high, KeyRange(entry.split_point, key_range.end), entry.split_servers_high),
    )


@dataclass
class SplitStats:
    pieces: int = 0
    piece_rows: int = 0
    piece_bytes: int = 0
    rounds: int = 0
    freeze_s: float = 0.0
    through: Gtid | None = None
    acked: dict[int, Gtid | None] = field(default_factory=dict)


class PartitionSplitter(Worker):
    """Splits one partition this node leads, up to SPLIT_FINALIZE (see the module doc)."""

    def __init__(
        self,
        *,
        leader: PartitionLeader,
        file: MetadataFile,
        key_range: KeyRange,
        client: MetadataClient,
        kafka: KafkaSettings,
        topics: TopicNames,
        data_dir: Path,
        fence: Callable[[], EpochFence],
        precopy_s: float = 10.0,
        freeze_timeout_s: float = 30.0,
        poll_s: float = 0.3,
    ) -> None:
        parent = leader.replica
        super().__init__(f"split-{parent.partition_id[:8]}")
        self.leader = leader
        self.parent: PartitionReplica = parent
        self.table = file.table
        self.entry = file.partition(parent.partition_id)
        self.children = split_children(self.entry, key_range)
        self.client = client
        self.kafka = kafka
        self.topics = topics
        self.fence = fence
        self.precopy_s = precopy_s
        """Copy rounds while writes go on; then, if every child follows, the rest is copied frozen."""
        self.freeze_timeout_s = freeze_timeout_s
        self.poll_s = poll_s
        self.phase = SplitPhase.COPYING
        self.stats = SplitStats()
        self._staging = {
            c.partition_id: staging_replica(self.table, c.partition_id, parent.placement_id, data_dir)
            for c in self.children
        }
        self._publishers: dict[str, SegmentPublisher] = {}
        self._piece_gtids: dict[str, Gtid | None] = {}
        self._following: dict[int, bool] = {}
        """Child placement id -> it has acked something on its staging channel (it follows it)."""

    @property
    def partition_id(self) -> str:
        return self.parent.partition_id

    def start(self) -> PartitionSplitter:
        super().start()
        return self

    # -- the procedure -------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._prepare()
            while not self.stopping.is_set():
                if self.leader.stopped.is_set():
                    log.info("%s: the leader role ended; the next leader continues the split", self.parent.name)
                    return
                if self._round():
                    return  # FINALIZED: the low end's leader forwards the stragglers (StragglerForwarder)
        except BaseException:
            if self.phase is not SplitPhase.FINALIZED:
                unknown = self.phase is SplitPhase.FINALIZING and self._finalized() is not False
                self.phase = SplitPhase.FAILED
                if not unknown:  # never un-pause a parent that METADATA may no longer list
                    self.leader.ingest_paused.clear()
            log.exception("%s: split failed", self.parent.name)
            raise

    def on_exit(self) -> None:
        for pub in self._publishers.values():
            with contextlib.suppress(Exception):
                pub._close(flush_s=5)
        for staging in self._staging.values():
            staging.close()

    def _prepare(self) -> None:
        admin = clients.admin(self.kafka)
        for c in self.children:  # producers re-routed by the new map find the topic in place
            # truncated by the child's Tail, never by time: forwarded stragglers wait there for its leader
            ingest = self.topics.ingest(c.partition_id)
            create_topic(admin, ingest, policy=self.kafka.topics, config=TRUNCATED_BY_TAIL, repair=True)
            pub = SegmentPublisher(self._staging[c.partition_id], self.kafka, topics=self.topics)
            pub._open()
            self._publishers[c.partition_id] = pub

    def _copy(self) -> bool:
        """Stage and publish every piece not yet published; True if every child placement acked all."""
        targets = [(self._staging[c.partition_id], c.key_range) for c in self.children]
        for _staging, piece in stage_pieces(self.parent, targets):
            self._piece_gtids[piece.segment_id] = piece.max_gtid
            self.stats.pieces += 1
            self.stats.piece_rows += piece.rows
            self.stats.piece_bytes += piece.bytes
        for c in self.children:
            self._publishers[c.partition_id].publish_pending()
        # a parent segment can leave the chain between stage_pieces' listing and its lookup (a major
        # committed by the compaction intake, its folded minors collected by the publisher: neither
        # waits for the freeze); its piece was skipped and only the new major holds its rows. Done only
        # when every staging list holds the parent's chain as it is now, whatever the children acked.
        chain = self.parent.chain.since_latest_major()
        unstaged = any(st.record(e.segment_id) is None for st in self._staging.values() for e in chain)
        return not self._behind() and not unstaged

    def _behind(self) -> dict[int, Gtid | None]:
        """Child placements whose Ack on their staging channel is below its end (-> GTID they acked)."""
        behind: dict[int, Gtid | None] = {}
        for c in self.children:
            topic = self._publishers[c.partition_id].topic
            groups = [self.topics.replica_group(c.partition_id, p.placement_id) for p in c.placements]
            idx = channel_indexes(self.kafka, topic, groups, timeout_s=10)
            for p, (_g, ack) in zip(c.placements, idx.acks, strict=True):
                self._following[p.placement_id] = ack is not None or idx.append == 0
                acked = idx.tail if ack is None else ack  # nothing committed: at the channel's start
                got = self._acked_gtid(c.partition_id, acked)
                self.stats.acked[p.placement_id] = got
                if acked < idx.append:
                    behind[p.placement_id] = got
        return behind

    def _acked_gtid(self, child: str, acked_offset: int) -> Gtid | None:
        """The highest GTID among the pieces whose manifest lies below ``acked_offset`` on the channel."""
        best: Gtid | None = None
        for sid, offset in self._publishers[child].manifest_offsets.items():
            g = self._piece_gtids.get(sid)
            if offset < acked_offset and g is not None and (best is None or g > best):
                best = g
        return best

    def _round(self) -> bool:
        """One copy round; when everything is acked, freeze, finish and finalize. True once finalized."""
        self.stats.rounds += 1
        copying = Deadline(self.precopy_s)
        while not self._copy():
            if self.stopping.wait(self.poll_s) or self.leader.stopped.is_set():
                return False
            if copying.expired():
                if all(self._following.values()):
                    break  # every child follows but writes outpace the copy: the rest is copied frozen
                return False  # a child is not following yet (down, starting): do not stall ingest for it
        # the epoch the frozen leader leads at: SPLIT_FINALIZE is fenced by it, not by the election's
        # epoch when it commits (a term of the parent started since would not be paused, and what
        # it accepted would reach no child)
        try:
            fence = self.fence()
        except ShoalError as exc:  # it no longer leads: its role ends
            log.warning("%s: not freezing: %s", self.parent.name, exc)
            return False
        self.phase = SplitPhase.FROZEN
        self.leader.ingest_paused.set()
        # a quiesced signal left from an earlier freeze must not stand for this one: the leader may
        # have read the pause as clear and be consuming a batch right now; it signals again only
        # from a step that saw the pause, with its memtable flushed
        self.leader.ingest_quiesced.clear()
        began, frozen = time.monotonic(), Deadline(self.freeze_timeout_s)
        try:
            while not self.leader.ingest_quiesced.wait(self.poll_s):
                if self.stopping.is_set() or self.leader.stopped.is_set() or frozen.expired():
                    return False
            while not self._copy():
                if self.stopping.wait(self.poll_s) or self.leader.stopped.is_set() or frozen.expired():
                    log.warning("%s: children did not ack within the freeze; retrying", self.parent.name)
                    return False
            accepted = self.leader.accepted_through
            through = _max(None if accepted is None else (accepted.epoch, accepted.seq), chain_max_gtid(self.parent))
            behind = self._behind()
            acked = {p.placement_id: behind.get(p.placement_id, through) for c in self.children for p in c.placements}
            self.stats.through, self.stats.acked = through, dict(acked)
            self._seed_child_epochs()
            if self.leader.stopped.is_set():  # a new role of this partition would not be paused
                return False
            term = self.leader.term
            if term is not None and term > fence.epoch:  # it wrote at a newer epoch since it froze
                log.warning(
                    "%s: the parent wrote at epoch %d since it froze at %d; not finalizing",
                    self.parent.name,
                    term,
                    fence.epoch,
                )
                return False
            self.phase = SplitPhase.FINALIZING
            try:
                self.client.coordinator.finalize_split(
                    self.table.name, self.partition_id, through=through, acked=acked, fence=fence
                )
            except ShoalError as exc:
                # the commit may have happened all the same (CommitOutcomeUnknownError: ZooKeeper went
                # away while the outcome was read): the parent may accept again only once METADATA
                # says it did not
                if not self._finalized_after(exc):
                    return False
            self.phase = SplitPhase.FINALIZED
            log.info("%s: split finalized (children acked through GTID %s)", self.parent.name, through)
            return True
        finally:
            self.stats.freeze_s += time.monotonic() - began
            if self.phase in (SplitPhase.COPYING, SplitPhase.FROZEN):  # SPLIT_FINALIZE not committed
                self.phase = SplitPhase.COPYING
                self.leader.ingest_paused.clear()

    def _finalized(self) -> bool | None:
        """Whether METADATA no longer lists the parent (SPLIT_FINALIZE committed); None when it cannot
        be read now."""
        try:
            current = self.client.coordinator.current(self.table.name)
        except ShoalError:
            return None
        return all(e.partition_id != self.partition_id for e in current.partitions)

    def _finalized_after(self, exc: ShoalError) -> bool:
        """After ``finalize_split`` raised: True if SPLIT_FINALIZE committed all the same. Asks
        METADATA until it answers; while it cannot tell (or the splitter stops first) the phase
        stays FINALIZING, so the parent's ingest stays paused: un-pausing a parent that METADATA no
        longer lists would let its leader accept writes that no child will ever hold."""
        while True:
            done = self._finalized()
            if done is not None:
                if not done:
                    log.warning("%s: SPLIT_FINALIZE not committed (%s); retrying", self.parent.name, exc)
                    self.phase = SplitPhase.FROZEN  # the ``finally`` of the round un-pauses
                else:
                    log.warning("%s: SPLIT_FINALIZE committed although the call said %s", self.parent.name, exc)
                return done
            if self.stopping.wait(self.poll_s * 10):
                log.warning(
                    "%s: stopping with the outcome of SPLIT_FINALIZE unknown; ingest stays paused", self.parent.name
                )
                return False

    def _seed_child_epochs(self) -> None:
        """Raise each child's epoch znode to the parent's epoch (never lowers one)."""
        zk, layout = self.client.zk, self.client.layout
        parent_epoch = read_epoch(zk, layout, self.partition_id).epoch
        security = self.client.config.security
        for c in self.children:
            path = layout.epoch(c.partition_id)
            while True:
                rec = read_epoch(zk, layout, c.partition_id)
                if rec.epoch >= parent_epoch:
                    break
                new = EpochRecord(c.partition_id, parent_epoch, None, None).encode()
                try:
                    if rec.version < 0:
                        ensure_path(zk, layout.partition(c.partition_id), security)
                        zk.create(path, new, acl=security.acls())
                    else:
                        zk.set(path, new, version=rec.version)
                    break
                except (NodeExistsError, BadVersionError):
                    continue


def _max(a: Gtid | None, b: Gtid | None) -> Gtid | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)
