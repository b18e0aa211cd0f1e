"""The one exception hierarchy of shoal.

Every error that shoal raises on purpose derives from :class:`ShoalError`, so callers can catch
one type. Each area has its own subclass; library errors are wrapped with ``raise ... from``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confluent_kafka import KafkaError


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
    """A Kafka operation failed; ``kafka_error`` is librdkafka's own error when there is one.

    ``fatal``, ``retriable``, ``txn_requires_abort`` and ``code`` come from that ``KafkaError``
    (False / None without one). The Kafka layer (``shoal.kafka.errors``) classifies exceptions into
    this class and its subclasses; it is defined here, at the root of the hierarchy, so that
    ``shoal.errors`` imports nothing from the layers above it.
    """

    def __init__(self, message: str, kafka_error: KafkaError | None = None) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error

    @property
    def fatal(self) -> bool:
        return self.kafka_error is not None and bool(self.kafka_error.fatal())

    @property
    def retriable(self) -> bool:
        return self.kafka_error is not None and bool(self.kafka_error.retriable())

    @property
    def txn_requires_abort(self) -> bool:
        return self.kafka_error is not None and bool(self.kafka_error.txn_requires_abort())

    @property
    def code(self) -> int | None:
        return None if self.kafka_error is None else int(self.kafka_error.code())


class ReassignmentError(KafkaOperationError):
    """Kafka's partition reassignment tool failed or did not finish: ``topics`` it was moving,
    ``returncode`` and ``output`` of the tool (None when it ran fine but the replicas never caught up)."""

    def __init__(
        self, message: str, topics: tuple[str, ...] = (), returncode: int | None = None, output: str = ""
    ) -> None:
        super().__init__(message)
        self.topics = topics
        self.returncode = returncode
        self.output = output


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
