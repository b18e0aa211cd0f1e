"""Segment helpers for tests: a major committed on a replica by hand, as the compaction intake does."""

from __future__ import annotations

from shoal.ids import new_segment_id
from shoal.segments import SegmentRecord, lww_merge, read_segment, write_segment
from shoal.segments.compaction import compaction_entry, segments_to_compact
from storage_node.replica import PartitionReplica


def commit_local_major(replica: PartitionReplica, *, epoch: int) -> tuple[str, list[str]]:
    """Fold the chain since its latest major into a new major written and committed on ``replica``
    (nothing published); returns the major's id and the folded ids."""
    chain = replica.chain
    folded = [e.segment_id for e in segments_to_compact(chain)]
    parts = [read_segment(replica.directory, sid).replace_schema_metadata(None) for sid in folded]
    sid = new_segment_id()
    w = write_segment(replica.directory, sid, lww_merge(parts, replica.key_columns), key_columns=replica.key_columns)
    entry = compaction_entry(chain, sid, placement_id=replica.placement_id, epoch=epoch)
    record = SegmentRecord(entry=entry, sha256=w.sha256, row_count=w.row_count, size_bytes=w.size_bytes)
    replica.commit_major(record, leader_epoch=epoch)
    return sid, folded
