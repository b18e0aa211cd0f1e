"""``format("shoal")``: the PySpark 4 Python data source behind the sink and the reader.

DESIGN.md section 9. Register once per session with :func:`register` (``spark.dataSource.register``).
Everything here runs on the driver: options and connection defaults are resolved, the table's
METADATA file is read, the DataFrame's schema is checked against the table before any task runs
(a mismatch fails the query with :class:`~spark_jobs.errors.SinkSchemaError`), and the reader's
partitions are bound to nodes. Executors get the resolved settings and the METADATA file pickled
into the writer/reader (:mod:`spark_jobs.sink`, :mod:`spark_jobs.reader`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamWriter, DataSourceWriter

from metadata.client import MetadataClient, MetadataConfig
from metadata.errors import MetadataNotCaughtUpError
from metadata.metadata_file import MetadataFile
from shoal.errors import KafkaOperationError
from shoal.worker import Backoff
from spark_jobs.errors import SinkOptionError
from spark_jobs.schema_map import check_write_schema, spark_ddl
from spark_jobs.settings import ReaderSettings, SinkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

FORMAT = "shoal"

log = logging.getLogger(__name__)


def _current(connection: MetadataConfig, table: str) -> MetadataFile:
    with MetadataClient(connection) as client:
        return client.coordinator.current(table)


def _current_retrying(connection: MetadataConfig, table: str, *, timeout_s: float) -> MetadataFile:
    """The table's current METADATA file, read again after a failure that may pass (a broker of the
    METADATA topic down: a non-fatal :class:`~shoal.errors.KafkaOperationError`, or a metadata server
    not caught up) until ``timeout_s``; waits 1 s, doubling up to 15 s, between tries. The read
    changes nothing, so trying again is safe. PySpark builds the stream writer again, in a fresh
    process, for every micro-batch's commit and abort: without this, a broker outage during a commit
    failed the query before the commit's own retries (``commitTimeout``) began."""
    deadline = time.monotonic() + timeout_s
    backoff = Backoff(initial_s=1.0, maximum_s=15.0, jitter=False)
    tries = 0
    while True:
        tries += 1
        try:
            return _current(connection, table)
        except (KafkaOperationError, MetadataNotCaughtUpError) as exc:
            if isinstance(exc, KafkaOperationError) and exc.fatal:
                raise
            left = deadline - time.monotonic()
            if left <= backoff.peek():
                raise
            log.warning(
                "reading the METADATA of table %s failed (try %d, %.0f s left), trying again: %s",
                table,
                tries,
                left,
                exc,
            )
        time.sleep(backoff.next_delay())


class ShoalDataSource(DataSource):
    """``spark.read.format("shoal")``, ``df.write.format("shoal")``, ``df.writeStream.format("shoal")``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        settings = ReaderSettings.from_options(self.options)
        return spark_ddl(_current(settings.connection, settings.table).table)

    def reader(self, schema: StructType) -> DataSourceReader:
        from spark_jobs.reader import ShoalReader, plan

        settings = ReaderSettings.from_options(self.options)
        with MetadataClient(settings.connection) as client:
            file = client.coordinator.current(settings.table)
            partitions = plan(settings, file, client)
        return ShoalReader(settings, file, partitions)

    def _sink(self, schema: StructType, overwrite: bool) -> tuple[SinkSettings, MetadataFile]:
        if overwrite:
            raise SinkOptionError("format('shoal') writes are upserts: use append mode (overwrite is not supported)")
        settings = SinkSettings.from_options(self.options)
        file = _current_retrying(settings.connection, settings.table, timeout_s=settings.commit_timeout_s)
        check_write_schema(schema, file.table)
        return settings, file

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark_jobs.sink import ShoalBatchWriter

        return ShoalBatchWriter(*self._sink(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from spark_jobs.sink import ShoalStreamWriter

        return ShoalStreamWriter(*self._sink(schema, overwrite))


def register(spark: SparkSession) -> None:
    """Make ``format("shoal")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(ShoalDataSource)
