"""Errors of the segments area (chain, merge, segment files, segment list).

All derive from :class:`SegmentError`, itself a :class:`~shoal.errors.ShoalError`, so a caller can
catch the whole area with one type or the whole of shoal with the root type.
"""

from __future__ import annotations

from shoal.errors import SchemaError, ShoalError


class SegmentError(ShoalError):
    """Root of every error raised by ``shoal.segments``."""


class SegmentArgumentError(SegmentError, ValueError):
    """A caller passed an argument outside its domain (a programming error, not bad input data)."""


class InvalidSegmentEntryError(SegmentError, ValueError):
    """A segment entry or manifest field is malformed (bad id, negative epoch, too much history...)."""


class ChainError(SegmentError):
    """An operation is not allowed on the chain as it is (e.g. fast-forward of a base that is not root)."""


class CorruptChainError(ChainError):
    """The stored chain is inconsistent (a base-pointer cycle, a root that is not in the list)."""


class CompactionConflictError(ChainError):
    """A compaction can no longer be committed: root moved since it started, or its epoch is stale."""


class MergeInputError(SegmentError, SchemaError):
    """Tables given to the LWW merge lack the system columns, disagree on schema or have bad keys."""


class MajorContentError(SegmentError):
    """A major is not what the segments it replaces make: ``segment_id``; ``missing`` versions the
    last-writer-wins merge keeps that the major lacks (a lost or stale row), ``extra`` rows the major
    holds that the merge does not (an invented, stale or repeated row), ``changed`` rows at the
    merge's version with other values, and one ``example``. The counts are 0 when its columns or
    the WAL ranges it covers are wrong (the example says which)."""

    def __init__(self, segment_id: str, *, missing: int, extra: int, example: str, changed: int = 0) -> None:
        values = f", {changed} with other values" if changed else ""
        super().__init__(
            f"major {segment_id} is not the merge of the segments it replaces: {missing} version(s) missing, "
            f"{extra} extra{values}; e.g. {example}"
        )
        self.segment_id = segment_id
        self.missing = missing
        self.extra = extra
        self.changed = changed
        self.example = example


class SegmentFileError(SegmentError):
    """A segment file could not be written, found or read."""


class SegmentFileNotFoundError(SegmentFileError):
    """The segment file does not exist."""


class CorruptSegmentError(SegmentFileError):
    """The segment file exists but is not a readable Parquet file (truncated, bit rot, foreign bytes)."""


class SegmentChecksumError(CorruptSegmentError):
    """The segment file reads, but its sha256 is not the one its segment-list record holds (another
    valid Parquet file in its place, or a changed footer that only key scans would notice)."""

    def __init__(self, segment_id: str, expected: str, actual: str) -> None:
        super().__init__(f"segment {segment_id}: sha256 {actual[:16]}... is not the listed {expected[:16]}...")
        self.segment_id = segment_id
        self.expected = expected
        self.actual = actual


class ReplacedSegmentUnreadableError(SegmentFileError):
    """A segment a major replaces is missing or cannot be read here (``segment_id``, the file
    error as ``cause``): the major cannot be checked against it."""

    def __init__(self, segment_id: str, cause: SegmentFileError) -> None:
        super().__init__(str(cause))
        self.segment_id = segment_id
        self.cause = cause


class ChecksumMismatchError(CorruptSegmentError):
    """The bytes of a segment do not hash to the expected sha256 (corrupt or not the announced segment)."""


class SegmentListError(SegmentError):
    """The SQLite segment list could not be opened or changed."""


class SegmentListCorruptError(SegmentListError):
    """The segment list database holds rows that do not form valid entries or a valid chain."""
