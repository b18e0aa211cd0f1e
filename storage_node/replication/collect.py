"""Segment garbage collection: the DELETE and MERGE_THEN_DELETE outcomes of source 3.5.

Source: EventQL segment based replication (seed 000), section 3.5 (``replicate_partition``: a
referenced but weakly referenced segment is deleted, an unreferenced one is merged and then
deleted; the follower procedure deletes what is weakly referenced). The plans are pure
(:mod:`shoal.segments.replicate`); this module applies them to a :class:`PartitionReplica`.

- Leader, weakly referenced (folded into the latest major): deleted once every other replica of
  the partition acknowledged that major, i.e. its ``replica_group`` committed offset on the
  leader's segments channel is past the major's manifest (the source's ``acked_servers``). Until
  then a follower that lags may still need to be offered the pre-major segments from the channel,
  and the leader keeps their files.
- Leader, unreferenced (left by a rewind, or a merge interrupted by a crash): merged (rows
  re-inserted keeping their GTIDs, as a new segment on root) and then deleted, on the leader's
  own thread (:func:`merge_unreferenced`).
- Follower, weakly referenced: deleted as soon as the major that folds them is durable locally
  (it is in the chain only after its file was fsynced).

Deleting is safe against scans: files a scan is reading are unlinked when it ends
(:meth:`PartitionReplica.delete_segments`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from shoal.errors import SchemaError
from shoal.segments import SegmentChain
from shoal.segments.replicate import ActionKind, replicate_partition
from storage_node.replica import PartitionReplica

log = logging.getLogger(__name__)


def weak_segments(chain: SegmentChain) -> list[str]:
    """Ids the chain references only weakly (folded into a newer major): their files are not needed."""
    return [a.segment_id for a in replicate_partition(chain) if a.kind is ActionKind.DELETE]


def unreferenced_segments(chain: SegmentChain) -> list[str]:
    """Ids in the list that the chain does not reference: to merge, then delete."""
    return [a.segment_id for a in replicate_partition(chain) if a.kind is ActionKind.MERGE_THEN_DELETE]


def leader_deletable(
    chain: SegmentChain, *, manifest_offsets: Mapping[str, int], acks: Sequence[int | None]
) -> list[str]:
    """Pure: weakly referenced ids the leader may delete now.

    Every weak segment is folded into the latest major (a major folds everything below it). They
    may go once the latest major's manifest is on the leader's segments channel and every other
    replica's committed offset (``acks``, one per replica; None = never acked) is past it. With no
    other replica (replication factor 1) they go at once.
    """
    weak = weak_segments(chain)
    if not weak:
        return []
    major = chain.latest_major()
    if major is None:
        return []
    offset = manifest_offsets.get(major.segment_id)
    if offset is None:
        return []
    if any(a is None or a <= offset for a in acks):
        return []
    return weak


def collect_on_leader(
    replica: PartitionReplica, *, manifest_offsets: Mapping[str, int], acks: Sequence[int | None]
) -> list[str]:
    """Delete what :func:`leader_deletable` allows; returns the deleted ids."""
    ids = leader_deletable(replica.chain, manifest_offsets=manifest_offsets, acks=acks)
    return replica.delete_segments(ids) if ids else []


def collect_on_follower(replica: PartitionReplica) -> list[str]:
    """Delete the weakly referenced segments (the folding major is durable: it is in the chain)."""
    ids = weak_segments(replica.chain)
    return replica.delete_segments(ids) if ids else []


def merge_unreferenced(replica: PartitionReplica, epoch: int) -> int:
    """Merge then delete every unreferenced segment (on the leader's thread); returns how many.

    One the merge refuses (columns that are not the table's, rows of an epoch above ``epoch``) is
    left where it is and logged at every pass; the ones after it are still merged."""
    n = 0
    for sid in unreferenced_segments(replica.chain):
        record = replica.record(sid)
        if record is None:
            continue
        try:
            replica.merge_detached(record, epoch)
        except SchemaError as exc:
            log.error("%s: unreferenced segment %s is not merged: %s", replica.name, sid, exc)
            continue
        log.info("%s: merged unreferenced segment %s, then deleted it", replica.name, sid)
        n += 1
    return n
