"""Split pieces: a parent's chain rewritten by a child's key range, keeping segment ids (seed 000 section 3.8).

"[The leader] will rewrite each segment file to exclude all records that do not match the target
keyrange, but otherwise leave the segment unchanged, i.e. not change its id or base_segment_id."
A *piece* is exactly that: the rows of one parent segment whose partition key lies in the child's
``[begin, end)`` (a pyarrow filter of the Parquet file, rows keep their GTIDs), written as a new file
under the same segment id, with the same ``base_segment_id``, ``included_segment_ids``,
``is_major``, creating placement, epoch and covered WAL ranges. Only the file fields (sha256, size,
row count) differ.

Pieces are staged in a *staging replica*: a :class:`~storage_node.replica.PartitionReplica` of
``(child partition, parent placement)`` under ``<data_dir>/split-staging``, whose segment list is
the parent's chain since its latest major, piece for piece. The parent's placement publishes that
list with the ordinary :class:`~storage_node.replication.publish.SegmentPublisher` on
``<p>.segments.<child>.<parent placement>``, and a child replica follows that channel as it would
follow its leader's: base == root -> fast-forward, a major -> fast-forward-add, acks = committed
offsets of ``replica_group(child, child placement)``. No new wire format, no new receive path.

Also here: :func:`route_ingest_message`, which splits one ingest message (an Arrow IPC batch) of the
parent between the children by the split point, for forwarding stragglers (DESIGN.md section 8).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from metadata.keyspace import UNBOUNDED, KeyRange, Keyspace
from metadata.table import TableDefinition
from shoal.errors import ShoalError, WireFormatError
from shoal.segments import SegmentEntry, SegmentRecord, read_segment, write_segment
from shoal.segments.versioned import EPOCH_COLUMN, SEQ_COLUMN
from shoal.wire.arrow_ipc import encode_batch
from storage_node.replica import PartitionReplica
from storage_node.replica.validate import IngestValidator, Rejected

log = logging.getLogger(__name__)

STAGING_DIR = "split-staging"
"""Staging replicas live under ``<data_dir>/split-staging``, apart from the node's own replicas."""

Gtid = tuple[int, int]


def key_range_mask(column: pa.ChunkedArray | pa.Array, key_range: KeyRange, keyspace: Keyspace) -> pa.ChunkedArray:
    """True for the rows whose partition key lies in ``key_range`` (columnar; the keyspace's order).

    STRING keys are compared as UTF-8 bytes (the keyspace order, as routing does); UINT64 keys as
    unsigned integers.
    """
    if keyspace is Keyspace.STRING:
        col = pc.cast(column, pa.binary())

        def bound(b: bytes) -> pa.Scalar:
            return pa.scalar(b, pa.binary())
    else:
        col = column if pa.types.is_uint64(column.type) else pc.cast(column, pa.uint64())

        def bound(b: bytes) -> pa.Scalar:
            return pa.scalar(keyspace.decode(b), pa.uint64())

    mask = pc.is_valid(col)
    if key_range.begin != UNBOUNDED:
        mask = pc.and_(mask, pc.greater_equal(col, bound(key_range.begin)))
    if key_range.end != UNBOUNDED:
        mask = pc.and_(mask, pc.less(col, bound(key_range.end)))
    return mask


def piece_rows(rows: pa.Table, table: TableDefinition, key_range: KeyRange) -> pa.Table:
    """The rows of one segment (or batch) that belong to ``key_range`` (GTIDs and tombstones kept)."""
    return rows.filter(key_range_mask(rows.column(table.partition_key), key_range, table.keyspace))


def max_gtid(rows: pa.Table) -> Gtid | None:
    """The highest ``(epoch, seq)`` among versioned rows (None for no rows)."""
    if rows.num_rows == 0:
        return None
    top = pc.max(rows.column(EPOCH_COLUMN)).as_py()
    seq = pc.max(rows.filter(pc.equal(rows.column(EPOCH_COLUMN), top)).column(SEQ_COLUMN)).as_py()
    return int(top), int(seq)


def piece_record(parent: SegmentRecord, *, sha256: str, size_bytes: int, row_count: int) -> SegmentRecord:
    """The staging list's record of a piece: the parent's entry unchanged, the piece's file fields."""
    return replace(parent, sha256=sha256, size_bytes=size_bytes, row_count=row_count)


@dataclass(frozen=True)
class StagedPiece:
    segment_id: str
    rows: int
    bytes: int
    max_gtid: Gtid | None


def staging_replica(table: TableDefinition, child_id: str, parent_placement: int, data_dir: Path) -> PartitionReplica:
    """The staging replica of ``child_id`` on the parent placement (its pieces, its segments channel)."""
    return PartitionReplica(table, child_id, parent_placement, Path(data_dir) / STAGING_DIR)


def stage_pieces(
    parent: PartitionReplica, targets: Sequence[tuple[PartitionReplica, KeyRange]]
) -> list[tuple[PartitionReplica, StagedPiece]]:
    """Write a piece of every parent chain entry (latest major -> root) that a staging list lacks.

    ``targets`` are (staging replica, child key range). Each parent segment is read once for all
    targets. Oldest first, so each minor piece lands on its base (fast-forward) and a major whose
    base is not the staging root is fast-forward-added (source 3.5). Returns the pieces written now.
    """
    staged: list[tuple[PartitionReplica, StagedPiece]] = []
    for entry in parent.chain.since_latest_major():
        missing = [(st, kr) for st, kr in targets if st.record(entry.segment_id) is None]
        record = parent.record(entry.segment_id) if missing else None
        if record is None:
            continue  # staged everywhere, or compacted away meanwhile (the next round sees the new major)
        with parent.reading([entry.segment_id]):
            rows = read_segment(parent.directory, entry.segment_id).replace_schema_metadata(None)
        top = max_gtid(rows)
        for staging, key_range in missing:
            staged.append((staging, _write_piece(parent, staging, record, rows, key_range, top)))
    return staged


def _write_piece(
    parent: PartitionReplica,
    staging: PartitionReplica,
    record: SegmentRecord,
    rows: pa.Table,
    key_range: KeyRange,
    top: Gtid | None,
) -> StagedPiece:
    sid = record.segment_id
    piece = piece_rows(rows, parent.table, key_range)
    written = write_segment(staging.directory, sid, piece, key_columns=list(parent.table.primary_key))
    new = piece_record(record, sha256=written.sha256, size_bytes=written.size_bytes, row_count=written.row_count)
    base, chain = new.entry.base_segment_id, staging.chain
    if (
        not new.entry.is_major
        and base is not None
        and base != chain.root
        and base in {s.segment_id for s in chain.walk()}
    ):
        # the parent's chain was rewound under the staging list (its placement followed another
        # leader meanwhile: PartitionFollower._diverged): the pieces above ``base`` hold rows the
        # parent holds again in the segments now based on it. The staging list follows the parent
        # as a follower follows its leader; each child replica rewinds the same way on OUT_OF_ORDER.
        log.warning("%s: the parent's chain was rewound to %s; so is the staging list", staging.name, base)
        staging.rewind(base)
    staging.apply_received(new, add=_needs_add(new.entry, staging.chain.root))
    log.info(
        "%s: staged piece %s (%d of %d rows, %d bytes)",
        staging.name,
        sid,
        written.row_count,
        rows.num_rows,
        written.size_bytes,
    )
    return StagedPiece(sid, written.row_count, written.size_bytes, top)


def _needs_add(entry: SegmentEntry, root: str | None) -> bool:
    if entry.base_segment_id == root:
        return False
    if entry.is_major or root is None:
        return True
    raise SplitStagingError(
        f"piece {entry.segment_id} is based on {entry.base_segment_id}, not on the staging root {root}, "
        "and is not a major: the parent's chain changed under the split"
    )


class SplitStagingError(ShoalError):
    """The parent's chain cannot be staged piece by piece (it diverged from what was staged)."""


def chain_max_gtid(replica: PartitionReplica) -> Gtid | None:
    """The highest GTID of any row on the replica's chain since its latest major (its files only)."""
    best: Gtid | None = None
    for entry in replica.chain.since_latest_major():
        with replica.reading([entry.segment_id]):
            rows = read_segment(replica.directory, entry.segment_id, columns=[EPOCH_COLUMN, SEQ_COLUMN])
        top = max_gtid(rows)
        if top is not None and (best is None or top > best):
            best = top
    return best


def route_ingest_message(
    data: bytes | None,
    validator: IngestValidator,
    split_point: bytes,
    low: str,
    high: str,
    headers: Sequence[tuple[str, str | bytes | None]] | Any = None,
) -> list[tuple[str, bytes]]:
    """Split one parent ingest message between the children: ``[(child partition id, payload)]``.

    The message is validated as the parent's leader would (``validator``, the leader's own). Rows
    of a valid message with a partition key below ``split_point`` go to ``low``, the others to
    ``high``, in their order. A message whose rows all go to one child is forwarded as it is (the
    bytes the parent's topic took); otherwise each child's rows are encoded again, cut by rows into
    messages of at most :data:`FORWARD_PIECE_BYTES` (and ``validator.max_bytes``): another writer may
    have compressed harder than Arrow's default zstd level, and the children's topics take no more
    than Kafka's default message size. A message the parent would refuse (undecodable, another
    schema, a null or out-of-range key, another table, oversized), or one with a row that does not
    fit a piece alone, is routed unchanged to ``low``, whose leader refuses it to deadletter with
    the reason: nothing invalid is accepted, and nothing a message holds can stop the forwarding.
    The forwarder refuses both kinds itself, in its own transaction (:func:`route_valid_message`
    answers None for the second), so a producer's ``sync()`` sees that refusal.
    """
    rows = validator.validate(data, headers)
    if isinstance(rows, Rejected):
        return [(low, bytes(data or b""))]
    routed = route_valid_message(data, rows, validator, split_point, low, high)
    return [(low, bytes(data or b""))] if routed is None else routed


def route_valid_message(
    data: bytes | None, rows: pa.Table, validator: IngestValidator, split_point: bytes, low: str, high: str
) -> list[tuple[str, bytes]] | None:
    """:func:`route_ingest_message` of a message ``validator`` already took (``rows``, its rows); None
    when a row does not fit a piece alone (the caller refuses the message: forwarded whole, the low
    child's leader would refuse it after the parent's group moved past it, unreported)."""
    whole = bytes(data or b"")
    below = key_range_mask(
        rows.column(validator.table.partition_key), KeyRange(UNBOUNDED, split_point), validator.table.keyspace
    )
    low_rows = pc.sum(below).as_py() or 0
    if low_rows in (0, rows.num_rows):
        return [(low if low_rows else high, whole)] if rows.num_rows else []
    # the children's ingest topics are made as the parent's was: they take a piece as big as the message
    limit = min(validator.max_bytes, max(FORWARD_PIECE_BYTES, len(whole)))
    out: list[tuple[str, bytes]] = []
    for child, mask in ((low, below), (high, pc.invert(below))):
        pieces = _pieces(rows.filter(mask), limit)
        if pieces is None:
            log.warning(
                "a straggler of %d bytes has a row that does not fit a message of %d bytes alone once encoded again",
                len(whole),
                limit,
            )
            return None
        out.extend((child, piece) for piece in pieces)
    return out


FORWARD_PIECE_BYTES = 1_000_000
"""The largest message the split forwarder sends: Kafka's default message size limit (ingest topics
keep it) and the producer's default ``max_message_bytes``."""


def _pieces(rows: pa.Table, max_bytes: int) -> list[bytes] | None:
    """``rows`` as Arrow IPC messages of at most ``max_bytes`` each, in order: halved by rows until
    each fits; None when a single row does not."""
    try:
        return [encode_batch(rows, max_bytes=max_bytes)]
    except WireFormatError:
        if rows.num_rows <= 1:
            return None
        half = rows.num_rows // 2
        first, second = _pieces(rows.slice(0, half), max_bytes), _pieces(rows.slice(half), max_bytes)
        return None if first is None or second is None else first + second
