"""Container images of the compose test cluster and the testcontainers backend (one place, pinned)."""

from __future__ import annotations

from shoal.jvm import versions

KAFKA_IMAGE = f"apache/kafka:{versions.KAFKA_VERSION}"
ZOOKEEPER_IMAGE = f"zookeeper:{versions.ZOOKEEPER_VERSION}"
SHOAL_IMAGE = "shoal:local"
"""Built from docker/Dockerfile (``docker-compose -f docker/docker-compose.yml build``)."""
