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


def jvm_options(heap_mb: int) -> list[str]:
    return [
        f"-Xms{min(heap_mb, 256)}m",
        f"-Xmx{heap_mb}m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        "-Djava.net.preferIPv4Stack=true",
    ]
