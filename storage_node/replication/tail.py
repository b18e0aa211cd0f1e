"""The Tail index: truncating a leader's WAL and segments channels (LinDB seed 001; DESIGN.md section 6).

- WAL channel: ``delete_records`` below the minimum Ack index of the other live replicas (their
  ``replica_group`` committed offsets on this channel = what their durable segments cover), and
  never beyond what this leader's own durable segments cover. A replica without any Ack holds the
  Tail where it is (it may still need everything).
- Segments channel: ``delete_records`` below the latest major manifest that every other replica
  acknowledged (committed offset past it), so a joining or out-of-order replica can always catch up
  from that major on.

Invariant kept: Tail <= every Ack <= Append, and Tail <= own covered end.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition

from shoal.errors import KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.errors import classify
from shoal.kafka.indexes import channel_indexes
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TailDecision:
    wal_tail: int | None
    """New log start of the WAL channel, or None to leave it."""
    segments_tail: int | None
    segments_acks: tuple[int | None, ...] = ()
    """The other replicas' committed offsets on the segments channel, as read (for garbage collection)."""


def decide_tail(
    *,
    wal_tail: int,
    wal_acks: Sequence[int | None],
    own_covered_end: int,
    segments_tail: int,
    segments_acks: Sequence[int | None],
    major_offsets: Sequence[int],
) -> TailDecision:
    """Pure: where Tail may move on each channel (None = stay). ``*_acks``: one per other replica."""
    new_wal: int | None = None
    if wal_acks and all(a is not None for a in wal_acks):
        target = min(min(a for a in wal_acks if a is not None), own_covered_end)
        if target > wal_tail:
            new_wal = target
    new_seg: int | None = None
    if segments_acks and all(a is not None for a in segments_acks):
        low_ack = min(a for a in segments_acks if a is not None)
        acked_majors = [m for m in major_offsets if m < low_ack]
        if acked_majors and max(acked_majors) > segments_tail:
            new_seg = max(acked_majors)
    return TailDecision(new_wal, new_seg, tuple(segments_acks))


def truncate(
    kafka: KafkaSettings,
    topics: TopicNames,
    partition_id: str,
    placement_id: int,
    peers: Sequence[int],
    *,
    own_covered_end: int,
    major_offsets: Sequence[int],
) -> TailDecision:
    """Read the indexes, decide, and ``delete_records`` on the leader's two channels."""
    groups = tuple(topics.replica_group(partition_id, p) for p in peers if p != placement_id)
    if not groups:
        return TailDecision(None, None)
    wal_topic = topics.wal(partition_id, placement_id)
    seg_topic = topics.segments(partition_id, placement_id)
    admin = clients.admin(kafka)
    wal = channel_indexes(kafka, wal_topic, groups, admin=admin)
    seg = channel_indexes(kafka, seg_topic, groups, admin=admin)
    decision = decide_tail(
        wal_tail=wal.tail,
        wal_acks=[a for _, a in wal.acks],
        own_covered_end=own_covered_end,
        segments_tail=seg.tail,
        segments_acks=[a for _, a in seg.acks],
        major_offsets=major_offsets,
    )
    targets = []
    if decision.wal_tail is not None:
        targets.append(TopicPartition(wal_topic, 0, decision.wal_tail))
    if decision.segments_tail is not None:
        targets.append(TopicPartition(seg_topic, 0, decision.segments_tail))
    if targets:
        try:
            for tp, fut in admin.delete_records(targets, operation_timeout=30, request_timeout=30).items():
                fut.result(timeout=30)
                log.info("tail of %s moved to %d", tp.topic, tp.offset)
        except KafkaException as exc:
            raise classify(exc, f"delete_records on {partition_id}") from exc
        except TimeoutError as exc:
            raise KafkaOperationError(f"delete_records on {partition_id} timed out") from exc
    return decision
