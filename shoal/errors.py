"""The one exception hierarchy of shoal.

Every error that shoal raises on purpose derives from :class:`ShoalError`, so callers can catch
one type. Each area has its own subclass; library errors are wrapped with ``raise ... from``.
"""

from __future__ import annotations


class ShoalError(Exception):
    """Root of every error shoal raises on purpose."""


class ConfigError(ShoalError, ValueError):
    """A configuration value is missing or invalid (names the setting and why)."""


class InvalidIdError(ShoalError, ValueError):
    """An id, name or path component from outside does not have the required form."""


class WireFormatError(ShoalError):
    """Bytes on the wire (Avro control record, Arrow IPC batch) are malformed or truncated."""


class SchemaError(ShoalError, ValueError):
    """A table or record schema is invalid, or data does not fit it."""


class RuntimeLaunchError(ShoalError):
    """The local runtime (ZooKeeper, Kafka, storage nodes) could not be started or stopped."""


class JarFetchError(RuntimeLaunchError):
    """Maven could not provide the pinned jars."""


class ClusterFileError(ShoalError):
    """The cluster file is missing, unreadable or does not describe a cluster."""


class KafkaOperationError(ShoalError):
    """A Kafka operation failed (wraps confluent_kafka.KafkaException)."""


class MetadataError(ShoalError):
    """Base for metadata (ZooKeeper, METADATA file) errors."""


class MetadataConflictError(MetadataError):
    """A compare-and-swap on metadata lost the race: the base version is no longer current."""


class StaleEpochError(MetadataError):
    """An operation carried a leader epoch older than the current one (a fenced leader)."""


class SparkJobError(ShoalError):
    """A Spark session or job could not be created or failed."""


class PartitionUnavailableError(ShoalError):
    """A partition cannot answer right now (e.g. its new leader is still recovering); retry shortly."""
