"""The Kafka ingest job: an external topic -> parse (JSON or Avro) -> the shoal sink.

DESIGN.md section 9 (Kafka ingest). ``spark.readStream.format("kafka")`` reads the source topic
(``startingOffsets``, ``maxOffsetsPerTrigger`` and ``failOnDataLoss`` passed through); JSON is parsed
in the JVM with ``from_json`` (PERMISSIVE, with a corrupt-record column), Avro on executors with
fastavro (:mod:`spark_jobs.avro_source`). Records that do not parse or do not fit the table go to
the deadletter topic with a reason and are counted (:mod:`spark_jobs.deadletter`); the rest are
written with ``format("shoal")`` (:mod:`spark_jobs.sink`), whose batch-id fence makes replays
harmless. The checkpoint holds the source offsets, so a restart continues where the last
committed batch ended; :class:`~spark_jobs.offsets_mirror.OffsetsMirror` copies them into the
consumer group ``TopicNames.spark_group(query_name)`` for offset monitoring.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metadata.client import MetadataClient, MetadataConfig
from metadata.table import ColumnType, TableDefinition
from shoal.errors import ConfigError
from shoal.ids import validate_table_name
from shoal.kafka.clients import spark_kafka_options
from shoal.kafka.settings import ConnectionSettings, KafkaSettings
from shoal.topics import TopicNames
from spark_jobs.datasource import register
from spark_jobs.deadletter import ERROR_COLUMN, META_COLUMNS, VALUE_COLUMN, DeadletterTarget, split_and_deadletter
from spark_jobs.errors import IngestError
from spark_jobs.offsets_mirror import OffsetsMirror
from spark_jobs.schema_map import spark_ddl_json, spark_ddl_nullable, spark_ddl_parsed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

_CORRUPT = "_corrupt_record"


class SourceFormat(enum.Enum):
    JSON = "json"
    AVRO = "avro"


@dataclass(frozen=True)
class IngestConfig:
    """One ingest query. ``source_bootstrap_servers`` defaults to the shoal cluster's Kafka."""

    source_topic: str
    table: str
    connection: MetadataConfig
    checkpoint: Path
    query_name: str
    format: SourceFormat = SourceFormat.JSON
    avro_schema: str | None = None
    source_bootstrap_servers: str | None = None
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    available_now: bool = False
    """Process what is in the topic now, then stop (a catch-up run); otherwise run until stopped."""
    trigger_interval: str | None = None

    def __post_init__(self) -> None:
        validate_table_name(self.table)
        if not isinstance(self.source_topic, str) or not self.source_topic.strip():
            raise ConfigError("the source topic must be a non-empty Kafka topic name")
        TopicNames(self.connection.topic_prefix).spark_group(self.query_name)
        if not isinstance(self.format, SourceFormat):
            object.__setattr__(self, "format", SourceFormat(self.format))
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger <= 0:
            raise ConfigError(f"max_offsets_per_trigger must be > 0, got {self.max_offsets_per_trigger}")
        if self.avro_schema is not None and self.format is not SourceFormat.AVRO:
            raise ConfigError("an Avro schema is only used with format avro")
        object.__setattr__(self, "checkpoint", Path(self.checkpoint))

    @property
    def group(self) -> str:
        return TopicNames(self.connection.topic_prefix).spark_group(self.query_name)

    @property
    def kafka_bootstrap(self) -> str:
        return self.source_kafka.bootstrap_servers

    @property
    def source_kafka(self) -> KafkaSettings:
        """The Kafka of the source topic: shoal's own unless ``source_bootstrap_servers`` names another."""
        if self.source_bootstrap_servers:
            return KafkaSettings(self.source_bootstrap_servers)
        return self.connection.kafka

    def sink_options(self) -> dict[str, str]:
        """The options of the ``format("shoal")`` sink: the table and the whole connection."""
        return {"table": self.table, **shoal_format_options(self.connection.connection)}


def shoal_format_options(connection: ConnectionSettings) -> dict[str, str]:
    """``connection`` as options of ``format("shoal")`` (:data:`spark_jobs.settings.CONNECTION_OPTIONS`):
    addresses and security settings, never a password (Spark shows options in its plans and UI). The
    sink resolves its connection in Spark's Python workers, which do not see this process's
    settings: they read the passwords from ``secretsFile``. Passwords that came from elsewhere (the
    environment) must reach the workers' environment the same way; a warning says so."""
    if connection.has_passwords and connection.secrets_file is None:
        log.warning(
            "the passwords of this connection come from the environment, not a secrets file: the shoal "
            "sink's Spark workers need the same SHOAL_*_PASSWORD variables (or give SHOAL_SECRETS_FILE)"
        )
    return {_OPTION_NAMES.get(key, _camel(key)): value for key, value in connection.public_options().items()}


_OPTION_NAMES = {"zk_hosts": "zk"}


def _camel(key: str) -> str:
    first, *rest = key.split("_")
    return first + "".join(part.capitalize() for part in rest)


@dataclass
class IngestJob:
    """A started ingest query, its malformed-record counter and its offsets mirror."""

    query: StreamingQuery
    malformed: Any
    mirror: OffsetsMirror
    spark: SparkSession

    @property
    def malformed_count(self) -> int:
        return int(self.malformed.value)

    def await_termination(self, timeout: int | None = None) -> bool | None:
        return self.query.awaitTermination(timeout)

    def stop(self) -> None:
        try:
            self.query.stop()
        finally:
            self.close()

    def close(self) -> None:
        """Stop mirroring; the final progress is mirrored here (listener events are asynchronous)."""
        try:
            self.mirror.mirror_progress(self.query.lastProgress)
        finally:
            self.spark.streams.removeListener(self.mirror)
            self.mirror.close()


def _source(spark: SparkSession, cfg: IngestConfig) -> DataFrame:
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(cfg.source_kafka))
        .option("subscribe", cfg.source_topic)
        .option("startingOffsets", cfg.starting_offsets)
        .option("failOnDataLoss", str(cfg.fail_on_data_loss).lower())
    )
    if cfg.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    return reader.load().select("value", "topic", "partition", "offset")


def _parsed_schema(table: TableDefinition) -> str:
    return f"{spark_ddl_parsed(table)}, `{ERROR_COLUMN}` string, `{VALUE_COLUMN}` binary, " + ", ".join(
        f"`{n}` {t}" for n, t in zip(META_COLUMNS, ("string", "int", "bigint"), strict=True)
    )


def parse_json(raw: DataFrame, table: TableDefinition) -> DataFrame:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructType

    parsed_schema = StructType.fromDDL(spark_ddl_json(table))
    assert isinstance(parsed_schema, StructType)
    schema = parsed_schema.add(_CORRUPT, StringType())
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    parsed = raw.select(
        F.from_json(F.col("value").cast("string"), schema, options).alias("r"),
        F.col("value").alias(VALUE_COLUMN),
        F.col("topic").alias(META_COLUMNS[0]),
        F.col("partition").alias(META_COLUMNS[1]),
        F.col("offset").alias(META_COLUMNS[2]),
    )
    error = (
        F.when(F.col(VALUE_COLUMN).isNull(), F.lit("empty (null) Kafka record value"))
        .when(F.col("r").isNull(), F.lit("not a JSON object"))
        .when(F.col(f"r.{_CORRUPT}").isNotNull(), F.lit("malformed JSON, or a value that does not fit its column"))
    )
    text = F.col(VALUE_COLUMN).cast("string")
    for c in table.columns:
        if c.type in (ColumnType.STRING, ColumnType.BINARY):
            # Spark reads any JSON value into a string column as its text (5 as "5", an object as
            # its JSON); `shoal write` takes only a JSON string there. Column names are identifiers.
            quoted = text.rlike(rf'"{c.name}"\s*:\s*"')
            error = error.when(
                F.col(f"r.`{c.name}`").isNotNull() & ~quoted, F.lit(f"column '{c.name}': a JSON string is expected")
            )
            continue
        if c.type not in (ColumnType.FLOAT32, ColumnType.FLOAT64):
            continue
        # Spark reads a JSON number beyond the column's range (1e400) as an infinity; only the
        # `Infinity` token (which `shoal write` takes too) means one. Column names are identifiers.
        value = F.col(f"r.`{c.name}`")
        infinite = value.isin(float("inf"), float("-inf"))
        token = text.rlike(rf'"{c.name}"\s*:\s*[-+]?(Infinity|INF)')
        error = error.when(infinite & ~token, F.lit(f"column '{c.name}': a number beyond the range of {c.type.value}"))
    error = error.otherwise(F.lit(None).cast("string"))
    return parsed.select(
        *[F.col(f"r.`{c.name}`").alias(c.name) for c in table.columns],
        error.alias(ERROR_COLUMN),
        VALUE_COLUMN,
        *META_COLUMNS,
    )


def parse_avro(raw: DataFrame, table: TableDefinition, schema_text: str) -> DataFrame:
    from spark_jobs.avro_source import decode_batches, parse_schema

    parse_schema(schema_text)  # fail on the driver, before the query starts

    def decode(it: Any) -> Any:
        return decode_batches(it, schema_text, table)

    return raw.mapInArrow(decode, _parsed_schema(table))


def build(spark: SparkSession, cfg: IngestConfig, table: TableDefinition, malformed: Any) -> DataFrame:
    """The parsed, checked stream of table rows (malformed records diverted to deadletter)."""
    import json

    raw = _source(spark, cfg)
    if cfg.format is SourceFormat.JSON:
        parsed = parse_json(raw, table)
    else:
        parsed = parse_avro(raw, table, cfg.avro_schema or json.dumps(table.avro_schema()))
    target = DeadletterTarget(cfg.connection.kafka, TopicNames(cfg.connection.topic_prefix).deadletter, table.name)

    def route(it: Any) -> Any:
        return split_and_deadletter(it, table, target, malformed)

    return parsed.mapInArrow(route, spark_ddl_nullable(table))


def start_ingest(spark: SparkSession, cfg: IngestConfig) -> IngestJob:
    """Start the ingest query (and its offsets mirror); returns at once."""
    register(spark)
    try:
        with MetadataClient(cfg.connection) as client:
            table = client.coordinator.current(cfg.table).table
    except Exception as exc:
        raise IngestError(f"cannot read table {cfg.table!r}: {exc}") from exc
    malformed = spark.sparkContext.accumulator(0)
    stream = build(spark, cfg, table, malformed)
    mirror = OffsetsMirror(cfg.query_name, cfg.group, cfg.source_kafka)
    spark.streams.addListener(mirror)
    writer = (
        stream.writeStream.format("shoal")
        .options(**cfg.sink_options())
        .option("checkpointLocation", str(cfg.checkpoint))
        .queryName(cfg.query_name)
    )
    if cfg.available_now:
        writer = writer.trigger(availableNow=True)
    elif cfg.trigger_interval:
        writer = writer.trigger(processingTime=cfg.trigger_interval)
    try:
        query = writer.start()
    except Exception:
        spark.streams.removeListener(mirror)
        mirror.close()
        raise
    log.info(
        "ingest query %s (%s): %s -> table %s, checkpoint %s",
        cfg.query_name,
        query.id,
        cfg.source_topic,
        cfg.table,
        cfg.checkpoint,
    )
    return IngestJob(query, malformed, mirror, spark)
