"""Errors of the Spark jobs (sink, reader, ingest, compaction): all under SparkJobError."""

from __future__ import annotations

from shoal.errors import SchemaError, SparkJobError


class SinkSchemaError(SparkJobError, SchemaError):
    """A DataFrame does not fit the table it is written to (raised on the driver, before any write)."""


class SinkOptionError(SparkJobError, ValueError):
    """A ``format("shoal")`` option is missing or invalid."""


class SinkCommitError(SparkJobError):
    """A micro-batch could not be recorded as committed.

    ``retriable``: the cause may pass (the leaders did not accept in time, a broker or the
    transaction coordinator unavailable), so the driver's commit tries again until its
    ``commitTimeout``; False for a refusal, a fatal Kafka error or bad input."""

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


class ReaderError(SparkJobError):
    """A partition could not be read (no leader, node not running, scan failed)."""


class IngestError(SparkJobError):
    """The Kafka ingest job could not be configured or started."""


class CompactionJobError(SparkJobError):
    """The compaction service could not compute or publish a major segment."""
