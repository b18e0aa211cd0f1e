"""Errors of the metadata package.

Every error here derives from :class:`shoal.errors.MetadataError` (or from the core type that names
the same kind of failure), so callers can catch the core types and never import this module.
"""

from __future__ import annotations

from shoal.errors import KafkaOperationError, MetadataConflictError, MetadataError, SchemaError, StaleEpochError


class UnknownTableError(MetadataError, LookupError):
    """The table does not exist (no znode for it in the coordination service)."""


class TableExistsError(MetadataError):
    """``create table`` found a table of that name already."""


class UnknownPartitionError(MetadataError, LookupError):
    """A partition id is not in the METADATA file the operation is based on."""


class StaleTxnidError(MetadataConflictError):
    """The change was based on a METADATA transaction that is no longer current."""


class MetadataDecodeError(MetadataError):
    """A METADATA file, a table znode or a topic record could not be decoded or is inconsistent."""


class MetadataFileNotFoundError(MetadataError, LookupError):
    """No stored METADATA file exists for a (table, txnid), or only its tombstone."""


class MetadataStoreError(MetadataError, KafkaOperationError):
    """The compacted metadata topic could not be written or read."""


class MetadataNotCaughtUpError(MetadataError):
    """A metadata server does not hold the current transaction yet and serves nothing until it has."""


class CommitOutcomeUnknownError(MetadataError):
    """The connection broke during the compare-and-swap and the outcome could not be determined."""


class InvalidOperationError(MetadataError, ValueError):
    """A change does not apply to the METADATA file it is based on (e.g. splitting outside the range)."""


class InvalidKeyError(SchemaError):
    """A partition key value does not belong to the table's keyspace."""


class NotEligibleError(MetadataError):
    """A replica that is not LIVE tried to take part in leader election."""


class LeadershipLostError(StaleEpochError):
    """This replica is not (or no longer) the leader, or is suspended and must not accept writes."""


__all__ = [
    "CommitOutcomeUnknownError",
    "InvalidKeyError",
    "InvalidOperationError",
    "LeadershipLostError",
    "MetadataConflictError",
    "MetadataDecodeError",
    "MetadataError",
    "MetadataFileNotFoundError",
    "MetadataNotCaughtUpError",
    "MetadataStoreError",
    "NotEligibleError",
    "StaleEpochError",
    "StaleTxnidError",
    "TableExistsError",
    "UnknownPartitionError",
    "UnknownTableError",
]
