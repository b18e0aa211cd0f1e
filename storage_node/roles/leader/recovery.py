"""A new leader's recovery (LinDB, seed 001; DESIGN.md section 4): rebuild the memtable from the WAL.

The replica was opened from its segment list (:class:`~storage_node.replica.PartitionReplica`
reloads it and reconciles it with the files on disk). What the durable segments do not cover is
replayed from this placement's WAL channel, from the offset the last segment covers: the record
just before it gives the chain's previous hash and last GTID, every replayed record is checked
against that hash chain and appended to the memtable. Ingest offsets and WAL records are committed
atomically, so the replayed memtable plus the segments hold exactly the accepted writes.

:func:`committed_offset` then gives the ingest offset the leader consumes from.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from shoal.errors import KafkaOperationError
from shoal.kafka.readers import read_wal_channel, read_wal_record_at
from shoal.kafka.settings import KafkaSettings
from shoal.wire.records import GENESIS_HASH, Gtid, verify_chain
from shoal.worker import Deadline
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
