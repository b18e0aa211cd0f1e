"""Applying one received segment to a replica: source 3.5, "Upon receiving a segment".

:func:`apply_segment` is the follower's whole receive step for one manifest, without Kafka: decide
(:func:`~shoal.segments.decide_receive_detailed`), and for FAST_FORWARD / FAST_FORWARD_ADD
stream the chunks to a temp file (never parsed: only hashed, and the Parquet footer opened to
check it is a segment), verify size and sha256, fsync, rename, then add the entry and move the root
in one SQLite transaction. Only then may the caller ack (commit its consumer offset).

``chunks`` is any iterable of ``bytes`` (a Kafka reader, or a file for a benchmark). For
SEGMENT_EXISTS, OUT_OF_ORDER, INVALID and OVERLOADED the chunks are not read; the caller skips them
(or seeks back). A checksum mismatch, a short or long file, or a file that is not Parquet -> INVALID
with the reason, and nothing changes on disk or in the list.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from shoal.errors import SchemaError
from shoal.segments import (
    ChainError,
    PlainManifest,
    ReceiveOutcome,
    SegmentRecord,
    decide_receive_detailed,
    write_segment_bytes,
)
from shoal.segments.errors import (
    ChecksumMismatchError,
    CorruptSegmentError,
    InvalidSegmentEntryError,
)
from shoal.segments.parquet_io import delete_segment_file, read_segment_schema
from storage_node.replica import PartitionReplica

log = logging.getLogger(__name__)

DEFAULT_MAX_IN_FLIGHT_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class ApplyResult:
    outcome: ReceiveOutcome
    reason: str
    bytes_written: int = 0

    @property
    def acks(self) -> bool:
        return self.outcome.acks


@dataclass
class ReceiveStats:
    """Counters of one follower (exposed by ``describe replica`` and used by tests)."""

    manifests: int = 0
    fast_forwards: int = 0
    fast_forward_adds: int = 0
    exists: int = 0
    out_of_order: int = 0
    invalid: int = 0
    overloaded: int = 0
    refetches: int = 0
    repaired: int = 0
    """Chain segments whose local file was missing or corrupt, written again from the channel."""
    rewinds: int = 0
    """Times the chain diverged from the leader's and root was rewound to the leader's base."""
    pushed: int = 0
    """Detached segments published on this replica's own channel for the leader to merge."""
    acks: int = 0
    bytes_received: int = 0
    rows_decoded_to_apply: int = 0
    """Rows a follower decoded to apply a segment: stays 0 (fast-forward never reads rows)."""
    wal_records_tailed: int = 0
    errors: int = 0
    """Rounds that failed on a Kafka or disk error and were retried."""
    overlay_dropped: int = 0
    """A former leader's WAL records dropped from the overlay with no segment covering them, after
    ``FollowerConfig.retired_overlay_grace_s`` at the end of the new leader's segments channel."""
    deleted: int = 0
    """Weakly referenced segments deleted once the major folding them was durable here."""

    def count(self, result: ApplyResult) -> None:
        self.manifests += 1
        name = {
            ReceiveOutcome.FAST_FORWARD: "fast_forwards",
            ReceiveOutcome.FAST_FORWARD_ADD: "fast_forward_adds",
            ReceiveOutcome.SEGMENT_EXISTS: "exists",
            ReceiveOutcome.OUT_OF_ORDER: "out_of_order",
            ReceiveOutcome.INVALID: "invalid",
            ReceiveOutcome.OVERLOADED: "overloaded",
        }.get(result.outcome)
        if name is not None:
            setattr(self, name, getattr(self, name) + 1)
        self.bytes_received += result.bytes_written


@dataclass
class InFlightBudget:
    """Bytes being received across all followers of a node (source: MAX_REPL_INCOMING_SEGMENTS)."""

    max_bytes: int = DEFAULT_MAX_IN_FLIGHT_BYTES
    _used: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def used(self) -> int:
        with self._lock:
            return self._used

    def acquire(self, n: int) -> None:
        with self._lock:
            self._used += n

    def release(self, n: int) -> None:
        with self._lock:
            self._used = max(0, self._used - n)


def apply_segment(
    replica: PartitionReplica,
    manifest: PlainManifest,
    chunks: Iterable[bytes],
    *,
    leader_placement_id: int,
    budget: InFlightBudget | None = None,
) -> ApplyResult:
    """Source 3.5 receive procedure on a follower, for one manifest; returns what happened.

    Raises only what ``chunks`` raises (e.g. a Kafka error while fetching), after removing any
    partial temp file; every problem with the manifest or the bytes is an INVALID result.
    """
    budget = budget or InFlightBudget()
    decision = decide_receive_detailed(
        replica.chain,
        manifest,
        expected_partition_id=replica.partition_id,
        expected_placement_id=leader_placement_id,
        in_flight_bytes=budget.used,
        max_in_flight_bytes=budget.max_bytes,
    )
    outcome = decision.outcome
    if outcome not in (ReceiveOutcome.FAST_FORWARD, ReceiveOutcome.FAST_FORWARD_ADD):
        return ApplyResult(outcome, decision.reason)
    assert decision.entry is not None
    sid = decision.entry.segment_id
    budget.acquire(manifest.size_bytes)
    try:
        try:
            written = write_segment_bytes(
                replica.directory,
                sid,
                chunks,
                expected_sha256=manifest.sha256,
                expected_size=manifest.size_bytes,
            )
        except (ChecksumMismatchError, CorruptSegmentError) as exc:
            return ApplyResult(ReceiveOutcome.INVALID, f"segment {sid}: {exc}")
        if written.row_count != manifest.row_count:
            delete_segment_file(replica.directory, sid)
            return ApplyResult(
                ReceiveOutcome.INVALID,
                f"segment {sid}: file holds {written.row_count} rows, manifest says {manifest.row_count}",
            )
        try:
            replica.check_received_schema(read_segment_schema(replica.directory, sid), sid)  # its footer only
        except SchemaError as exc:
            delete_segment_file(replica.directory, sid)
            return ApplyResult(ReceiveOutcome.INVALID, str(exc))
        try:
            record = SegmentRecord(
                entry=decision.entry, sha256=written.sha256, row_count=written.row_count, size_bytes=written.size_bytes
            )
            replica.apply_received(record, add=outcome is ReceiveOutcome.FAST_FORWARD_ADD)
        except (ChainError, InvalidSegmentEntryError) as exc:  # the chain moved meanwhile
            delete_segment_file(replica.directory, sid)
            return ApplyResult(ReceiveOutcome.OUT_OF_ORDER, f"segment {sid}: {exc}")
    finally:
        budget.release(manifest.size_bytes)
    log.debug("%s: %s segment %s (%d bytes)", replica.name, outcome.value, sid, written.size_bytes)
    return ApplyResult(outcome, decision.reason, written.size_bytes)
