"""The SparkSession factory: local[*] by default, any master by config, Kafka connector loaded.

The spark-sql-kafka connector and its dependencies come from the jar cache (see
``shoal.jvm.jars``); jars that PySpark already ships (Scala, Hadoop client, slf4j ...) are
left out so only one copy of each is on the classpath.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from shoal.errors import ConfigError, SparkJobError
from shoal.jvm import jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-\d[\w.+-]*\.jar$")


@dataclass(frozen=True)
class SparkConfig:
    cache_dir: Path
    master: str = "local[*]"
    app_name: str = "shoal"
    python_executable: str = field(default_factory=lambda: sys.executable)
    shuffle_partitions: int = 4
    driver_memory: str = "1g"
    ui_enabled: bool = False
    extra_conf: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.master or any(c.isspace() for c in self.master):
            raise ConfigError(f"spark master must be a URL such as local[*] or spark://host:7077, got {self.master!r}")
        if self.shuffle_partitions < 1:
            raise ConfigError("shuffle_partitions must be >= 1")
        if not os.access(self.python_executable, os.X_OK):
            raise ConfigError(f"python_executable {self.python_executable!r} is not executable")


def _artifact(jar: Path) -> str:
    m = _VERSIONED_JAR.match(jar.name)
    return m.group("artifact") if m else jar.stem


def connector_jars(cache_dir: Path) -> list[Path]:
    """spark-sql-kafka and its dependencies, minus artifacts PySpark already ships."""
    import pyspark

    shipped = {_artifact(p) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [p for p in jars.jar_paths(jars.spark_kafka_bundle(), cache_dir) if _artifact(p) not in shipped]


def build_session(config: SparkConfig) -> SparkSession:
    """Create (or return the active) SparkSession with the Kafka connector, bound to 127.0.0.1."""
    from pyspark.sql import SparkSession

    # Spark starts Python workers with PYSPARK_PYTHON; the JVM reads SPARK_LOCAL_IP at launch.
    os.environ["PYSPARK_PYTHON"] = config.python_executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = config.python_executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(config.master)
        .appName(config.app_name)
        .config("spark.jars", ",".join(str(p) for p in connector_jars(config.cache_dir)))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", config.driver_memory)
        .config("spark.pyspark.python", config.python_executable)
        .config("spark.pyspark.driver.python", config.python_executable)
        .config("spark.ui.enabled", str(config.ui_enabled).lower())
        .config("spark.sql.shuffle.partitions", str(config.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
    )
    for key, value in config.extra_conf:
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        raise SparkJobError(f"could not start Spark (master {config.master}): {exc}") from exc
    spark.sparkContext.setLogLevel("WARN")
    log.info("spark %s session on %s", spark.version, config.master)
    return spark
