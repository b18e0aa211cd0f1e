"""``format("shoal")``: the PySpark 4 Python data source behind the sink and the reader.

DESIGN.md section 9. Register once per session with :func:`register` (``spark.dataSource.register``).
Everything here runs on the driver: options and connection defaults are resolved, the table's
METADATA file is read, the DataFrame's schema is checked against the table before any task runs
(a mismatch fails the query with :class:`~spark_jobs.errors.SinkSchemaError`), and the reader's
partitions are bound to nodes. Executors get the resolved settings and the METADATA file pickled
into the writer/reader (:mod:`spark_jobs.sink`, :mod:`spark_jobs.reader`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamWriter, DataSourceWriter

from metadata.client import MetadataClient, MetadataConfig
from metadata.metadata_file import MetadataFile
from spark_jobs.errors import SinkOptionError
from spark_jobs.schema_map import check_write_schema, spark_ddl
from spark_jobs.settings import ReaderSettings, SinkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

FORMAT = "shoal"


def _current(connection: MetadataConfig, table: str) -> MetadataFile:
    with MetadataClient(connection) as client:
        return client.coordinator.current(table)


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
        file = _current(settings.connection, settings.table)
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
