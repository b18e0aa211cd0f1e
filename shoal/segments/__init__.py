"""Segments of a partition replica: the chain, the LWW merge, Parquet files and the segment list.

Source: EventQL segment based replication (seed 000, sections 3 to 3.6); GTIDs from TokuMX
(seed 003). DESIGN.md section 5. One module per job:

=================  ================================================================================
``chain``          SegmentEntry, SegmentChain: is_referenced, is_reference_weak, fast-forward (3, 3.3, 3.5)
``receive``        ReceiveOutcome and the receive procedure's decision (3.5, 3.6)
``replicate``      replicate_partition, the follower procedure, what to offer, JOIN/UNLOAD (3.5, 3.7, 3.8)
``compaction``     what a major folds, its entry, its fenced commit (3.1)
``coverage``       WAL offset ranges covered by segments
``versioned``      GTID system columns (``_shoal_epoch``, ``_shoal_seq``, ``_shoal_deleted``)
``merge``          lww_merge: newest version per primary key, columnar; check_major
``major_check``    a major checked against the files it replaces, key range by key range
``parquet_io``     atomic, fsynced, checksummed segment files
``segment_list``   the transactional SQLite segment list
``recovery``       make files agree with the list after a crash
=================  ================================================================================
"""

from shoal.segments.chain import MAX_SEGMENT_HISTORY, SegmentChain, SegmentEntry
from shoal.segments.compaction import commit_compaction, compaction_entry, segments_to_compact
from shoal.segments.coverage import WalRange
from shoal.segments.errors import (
    ChainError,
    ChecksumMismatchError,
    CompactionConflictError,
    CorruptChainError,
    CorruptSegmentError,
    InvalidSegmentEntryError,
    MajorContentError,
    MergeInputError,
    SegmentError,
    SegmentFileError,
    SegmentFileNotFoundError,
    SegmentListCorruptError,
    SegmentListError,
)
from shoal.segments.merge import check_major, check_major_schema, lww_merge
from shoal.segments.parquet_io import (
    WrittenSegment,
    file_sha256,
    read_segment,
    read_segment_near,
    write_segment,
    write_segment_bytes,
)
from shoal.segments.receive import (
    ManifestLike,
    PlainManifest,
    ReceiveDecision,
    ReceiveOutcome,
    decide_leader_receive,
    decide_receive,
    decide_receive_detailed,
)
from shoal.segments.replicate import (
    ActionKind,
    SegmentAction,
    follower_replication,
    replica_caught_up,
    replicate_partition,
    segments_to_offer,
    unload_pending,
)
from shoal.segments.segment_list import SegmentList, SegmentRecord, segment_list_path

__all__ = [
    "MAX_SEGMENT_HISTORY",
    "ActionKind",
    "ChainError",
    "ChecksumMismatchError",
    "CompactionConflictError",
    "CorruptChainError",
    "CorruptSegmentError",
    "InvalidSegmentEntryError",
    "MajorContentError",
    "ManifestLike",
    "MergeInputError",
    "PlainManifest",
    "ReceiveDecision",
    "ReceiveOutcome",
    "SegmentAction",
    "SegmentChain",
    "SegmentEntry",
    "SegmentError",
    "SegmentFileError",
    "SegmentFileNotFoundError",
    "SegmentList",
    "SegmentListCorruptError",
    "SegmentListError",
    "SegmentRecord",
    "WalRange",
    "WrittenSegment",
    "check_major",
    "check_major_schema",
    "commit_compaction",
    "compaction_entry",
    "decide_leader_receive",
    "decide_receive",
    "decide_receive_detailed",
    "file_sha256",
    "follower_replication",
    "lww_merge",
    "read_segment",
    "read_segment_near",
    "replica_caught_up",
    "replicate_partition",
    "segment_list_path",
    "segments_to_compact",
    "segments_to_offer",
    "unload_pending",
    "write_segment",
    "write_segment_bytes",
]
