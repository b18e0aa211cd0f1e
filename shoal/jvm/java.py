"""Locating Java and building JVM command lines."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

from shoal.errors import RuntimeLaunchError


def java_executable(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("java")
    if not found:
        raise RuntimeLaunchError("no Java runtime found: install Java 17+ or set JAVA_HOME")
    return found


C1_ONLY = "-XX:TieredStopAtLevel=1"
"""Compile with C1 only: the local runtime's JVMs (``shoal up``, the tests, the benchmarks, and the
docker compose test cluster's brokers through ``KAFKA_JVM_OPTS``) share a small machine with the
storage nodes, producers and Spark. Measured on 2 cores (3 brokers, 3 nodes,
RF 3, ``python -m bench.replicated --rows 500000``): with the default tiered compilation the brokers'
C2 compiler threads took more CPU than any other kind of thread during the first load (8.4 of 21.1
broker CPU seconds) and still 27% of the brokers' and nodes' CPU in a second run of the same load
(3.45 of 12.8 s); with C1 only, 0.11 of 6.4 s. In that run raw acks=all produce + consume took
2.35 -> 2.20 s, shoal's replicated write 7.9 -> 3.7 s (later runs: 0.27-0.60x, README P1). C2's
faster code pays off on a cluster that runs for hours with cores to spare, which the local runtime
is not."""


def jvm_options(heap_mb: int) -> list[str]:
    """JVM options of the local runtime's ZooKeeper and Kafka processes (:data:`C1_ONLY`)."""
    return [
        f"-Xms{min(heap_mb, 256)}m",
        f"-Xmx{heap_mb}m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        C1_ONLY,
        "-Djava.awt.headless=true",
        "-Djava.net.preferIPv4Stack=true",
    ]
