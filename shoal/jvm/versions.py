"""Pinned versions of everything the local runtime fetches from Maven Central."""

from __future__ import annotations

KAFKA_VERSION = "4.1.1"
ZOOKEEPER_VERSION = "3.9.4"
ZK_DROPWIZARD_VERSION = "4.1.12.1"  # as ZooKeeper 3.9.4's parent POM
ZK_LOGBACK_VERSION = "1.3.15"
ZK_SNAPPY_VERSION = "1.1.10.5"
SCALA_BINARY_VERSION = "2.13"
LOG4J_VERSION = "2.24.3"
MAVEN_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


def installed_spark_version() -> str:
    """The Spark version of the installed PySpark; the Kafka connector must match it."""
    import pyspark

    return pyspark.__version__
