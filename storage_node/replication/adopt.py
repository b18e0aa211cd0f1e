"""Failover, new leader side: adopt the other placements' WAL channels before serving.

DESIGN.md section 7 ("A new leader first adopts orphan channels: for every other placement's WAL
channel with records beyond what segments cover, it consumes them and merges"); TokuMX (seed 003):
only committed data is replicated, GTIDs order everything; LinDB (seed 001): the channel is the
unit of replication.

For each other placement of the partition:

1. fence the channel: ``init_transactions`` with the channel's ``transactional.id`` bumps its
   producer epoch, so a paused or partitioned old leader (a zombie) can commit nothing more there,
   and its open transaction is aborted. Its ingest offsets were committed in the same transactions,
   so nothing it accepted can be missed or taken twice;
2. read the channel (``read_committed``) from what this replica's segments cover of it to its end,
   check the GTID hash chain;
3. write those rows, keeping their GTIDs, as one segment based on root that covers those offsets
   (merge = re-insert keeping GTIDs: idempotent and order-independent), so they are durable and
   published to the followers like any other segment.

The segment claims the offsets it read: from where the read started (what this replica's segments
cover of the channel, or the channel's Tail if that is above) to one past the last record. Offsets
between the start and the first record are transaction markers and aborted records (the read is
``read_committed`` from exactly that start), so the claim has no gap and ``shoal verify`` can hold a
Tail to the union of what segments cover, not only to its highest offset. When the channel's Tail is
above what this replica's segments cover, the offsets in between are not claimed (they may hold rows
this replica never got: an in-sync replica never has such rows, since Tail never passes the minimum
Ack and an Ack never passes what is durable; :mod:`storage_node.replication.bootstrap` keeps
replicas that lack them out of elections), and a warning names them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pyarrow as pa

from shoal.kafka import clients
from shoal.kafka.admin import log_start_and_end
from shoal.kafka.errors import ChannelTruncatedError
from shoal.kafka.readers import ChannelRecord, read_wal_channel
from shoal.kafka.settings import KafkaSettings
from shoal.kafka.transaction import fence
from shoal.segments import SegmentRecord, WalRange
from shoal.topics import TopicNames
from shoal.wire.records import verify_chain
from storage_node.replica import PartitionReplica, versioned_rows

log = logging.getLogger(__name__)


def adopt_channels(
    replica: PartitionReplica,
    kafka: KafkaSettings,
    *,
    topics: TopicNames,
    peers: Sequence[int],
    epoch: int,
    schema: pa.Schema,
) -> list[SegmentRecord]:
    """Adopt every other placement's WAL records beyond what the chain covers; returns the new segments."""
    existing = set(clients.admin(kafka).list_topics(timeout=30).topics)
    out: list[SegmentRecord] = []
    for placement in peers:
        if placement == replica.placement_id:
            continue
        topic = topics.wal(replica.partition_id, placement)
        if topic not in existing:
            continue  # that placement never led
        fence(kafka, topic, what="WAL channel")
        channel = (replica.partition_id, placement)
        start = max((r.end_offset for r in replica.chain.coverage() if r.channel == channel), default=0)
        claim, records = _read_from(kafka, topic, start)
        if not records:
            continue
        verify_chain([r.record for r in records], prev_hash=None)
        tables = [versioned_rows(r.record.rows(schema), r.record.gtid) for r in records]
        if claim > start:
            log.warning(
                "%s: WAL channel %s starts at %d, above the %d this replica's segments cover; "
                "offsets [%d, %d) are not claimed",
                replica.name,
                topic,
                claim,
                start,
                start,
                claim,
            )
        covered = WalRange(replica.partition_id, placement, claim, records[-1].offset + 1)
        record = replica.write_adopted(tables, covered, epoch)
        out.append(record)
        log.info(
            "%s: adopted %d WAL records (%d rows) of placement %d, offsets [%d, %d)",
            replica.name,
            len(records),
            sum(t.num_rows for t in tables),
            placement,
            covered.start_offset,
            covered.end_offset,
        )
    return out


READS = 3
"""How many times adoption reads a channel whose Tail moves under the read."""


def _read_from(kafka: KafkaSettings, topic: str, start: int) -> tuple[int, list[ChannelRecord]]:
    """Every committed record of ``topic`` from exactly ``start``, or from its Tail if that is above:
    (the offset the read started at, the records). Every offset from that start to the first record
    is a marker or an aborted record, so a segment may claim it."""
    for attempt in range(READS):
        claim = start
        if attempt:
            claim = max(start, log_start_and_end(kafka, topic)[0])
        try:
            return claim, list(read_wal_channel(kafka, topic, claim, exact_start=True))
        except ChannelTruncatedError:
            if attempt == READS - 1:
                raise
    raise AssertionError("unreachable")
