"""A new leader's recovery (LinDB, seed 001; DESIGN.md section 4): rebuild the memtable from the WAL.

The replica was opened from its segment list (:class:`~storage_node.replica.PartitionReplica`
reloads it and reconciles it with the files on disk). What the durable segments do not cover is
replayed from this placement's WAL channel, from the offset the last segment covers: the record
just before it gives the chain's previous hash and last GTID, every replayed record is checked
against that hash chain and appended to the memtable. Ingest offsets and WAL records are committed
atomically, so the replayed memtable plus the segments hold exactly the accepted writes.

Tail may already have truncated the record just before the covered end, so the WAL alone cannot
say where the GTIDs stopped. :func:`chain_high_gtid` reads it from what truncation cannot remove:
the Parquet footers of the chain's segment files (:mod:`shoal.segments.gtids`: the row-group
statistics of ``_shoal_epoch`` and ``_shoal_seq``, no data pages). :func:`first_seq` and
:func:`check_above` keep a leader from ever stamping a GTID at or below that floor (DESIGN.md
section 7: GTIDs strictly increase per partition).

:func:`committed_offset` then gives the ingest offset the leader consumes from.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from shoal.errors import KafkaOperationError, StaleEpochError
from shoal.kafka.readers import read_wal_channel, read_wal_record_at
from shoal.kafka.settings import KafkaSettings
from shoal.segments.gtids import segment_gtid_bound
from shoal.wire.records import GENESIS_HASH, Gtid, verify_chain
from shoal.worker import Deadline
from storage_node.errors import StorageNodeError
from storage_node.replica import PartitionReplica, versioned_rows

log = logging.getLogger(__name__)


@dataclass
class ChainPosition:
    """Where the WAL channel's hash chain ends: the last record's hash and last GTID (None: empty)."""

    last_hash: bytes = GENESIS_HASH
    last_gtid: Gtid | None = None


@dataclass(frozen=True)
class Replayed:
    records: int
    rows: int


def replay_wal(
    replica: PartitionReplica, kafka: KafkaSettings, wal_topic: str, schema: pa.Schema, position: ChainPosition
) -> Replayed:
    """Replay ``wal_topic`` from what the durable segments cover into the memtable; moves ``position``."""
    replica.drop_memtable()  # a term that ended in this process: its rows come back from the WAL below
    start = replica.covered_end()
    prev: bytes | None = GENESIS_HASH
    if start > 0:
        last = read_wal_record_at(kafka, wal_topic, start - 1)
        if last is None:
            log.warning("%s: WAL record %d (end of segment coverage) is gone", replica.name, start - 1)
            prev = None
        else:
            prev, position.last_hash, position.last_gtid = last.hash, last.hash, last.last_gtid
    records = list(read_wal_channel(kafka, wal_topic, start))
    verify_chain([r.record for r in records], prev_hash=prev)
    rows = 0
    for item in records:
        rec = item.record
        if (rec.partition_id, rec.placement_id) != (replica.partition_id, replica.placement_id):
            raise KafkaOperationError(f"WAL channel {wal_topic} holds a record of another placement")
        replica.append(versioned_rows(rec.rows(schema), rec.gtid), item.offset)
        position.last_hash, position.last_gtid = rec.hash, rec.last_gtid
        rows += rec.row_count
    log.info("%s: replayed %d WAL records from offset %d", replica.name, len(records), start)
    return Replayed(len(records), rows)


def committed_offset(consumer: Consumer, tp: TopicPartition, timeout_s: float = 60.0) -> int:
    """The group's committed offset (or a negative logical offset), retrying while the group
    coordinator is still loading (a fresh cluster creates ``__consumer_offsets`` on first use)."""
    deadline = Deadline(timeout_s)
    while True:
        try:
            return int(consumer.committed([tp], timeout=30)[0].offset)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if deadline.expired() or not isinstance(err, KafkaError) or err.fatal():
                raise KafkaOperationError(f"cannot read the committed offset of {tp.topic}: {exc}") from exc
            time.sleep(0.5)


class GtidRegressionError(StorageNodeError):
    """A leader was about to stamp ``gtid``, not above ``highest``, the highest GTID of its chain and
    WAL (DESIGN.md section 7). Nothing is written; the role ends and the node resigns, so the next
    role takes a fresh epoch. ``replica`` names the replica."""

    def __init__(self, replica: str, gtid: Gtid, highest: Gtid) -> None:
        super().__init__(f"{replica}: refusing to stamp GTID {gtid}, not above the highest GTID {highest} of its chain")
        self.replica = replica
        self.gtid = gtid
        self.highest = highest


def chain_high_gtid(replica: PartitionReplica) -> Gtid | None:
    """A bound of the highest GTID in the replica's segments (every entry of its list, detached ones too;
    footers only)."""
    best: Gtid | None = None
    for segment_id in replica.chain.entries:
        bound = segment_gtid_bound(replica.directory, segment_id)
        if bound is not None and (best is None or bound > best):
            best = bound
    return best


def highest(*gtids: Gtid | None) -> Gtid | None:
    present = [g for g in gtids if g is not None]
    return max(present) if present else None


def first_seq(replica: str, epoch: int, floor: Gtid | None) -> int:
    """The first seq a role leading with ``epoch`` may stamp above ``floor`` (the highest GTID it holds).

    An epoch below the floor's is a fenced leader: :class:`StaleEpochError`.
    """
    if floor is None or floor.epoch < epoch:
        return 0
    if floor.epoch > epoch:
        raise StaleEpochError(f"{replica}: epoch {epoch} is older than the highest GTID {floor} of its chain")
    return floor.seq + 1


def check_above(replica: str, gtid: Gtid, floor: Gtid | None) -> None:
    """Refuse (:class:`GtidRegressionError`) a GTID at or below ``floor``."""
    if floor is not None and gtid <= floor:
        raise GtidRegressionError(replica, gtid, floor)
