"""Container images of the compose test cluster and the testcontainers backend (one place, pinned).

All of them are built locally by ``docker/build-images.sh`` from Debian packages (debootstrap), PyPI and
the Maven Central jars of ``shoal jars``: no image comes from a registry. The script tags each image with
its content hash and with the names below.
"""

from __future__ import annotations

from shoal.jvm import versions

KAFKA_IMAGE = f"shoal-kafka:{versions.KAFKA_VERSION}"
ZOOKEEPER_IMAGE = f"shoal-zookeeper:{versions.ZOOKEEPER_VERSION}"
SHOAL_IMAGE = "shoal:local"
BUILD_SCRIPT = "docker/build-images.sh"
LABEL = "org.shoal.cluster"
"""Label on every container the compose cluster and the testcontainers backend start (cleanup by label)."""
