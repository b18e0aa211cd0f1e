"""Pinned jar bundles from Maven Central, cached outside the repository.

Each bundle is a list of Maven coordinates. ``ensure_bundle`` writes a throwaway POM, runs
``mvn dependency:copy-dependencies`` (runtime scope) into ``<cache>/<bundle>-<version>/`` and
marks the folder complete. A complete folder is used as it is: a second run starts no Maven at
all and downloads nothing. No jar is ever written into the repository.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from shoal.errors import JarFetchError
from shoal.jvm import versions

log = logging.getLogger(__name__)

_MARKER = ".complete"
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "shoal"


def cache_dir_from(environ: Mapping[str, str]) -> Path:
    """The jar cache: ``SHOAL_CACHE_DIR`` if set, else ``~/.cache/shoal`` (entry points pass their environment)."""
    return Path(environ.get("SHOAL_CACHE_DIR") or DEFAULT_CACHE_DIR).expanduser()


MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"

_SETTINGS = """<?xml version="1.0" encoding="UTF-8"?>
<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">
  <mirrors><mirror><id>shoal-central</id><mirrorOf>*</mirrorOf><url>{url}</url></mirror></mirrors>
</settings>
"""


@dataclass(frozen=True)
class JarBundle:
    """A named set of Maven artifacts (``group:artifact:version``) and their runtime dependencies."""

    name: str
    version: str
    coordinates: tuple[str, ...]
    exclusions: tuple[str, ...] = ()
    """``group:artifact`` pairs excluded from every coordinate's dependency tree."""

    def directory(self, cache_dir: Path) -> Path:
        return cache_dir / "jars" / f"{self.name}-{self.version}"


def kafka_bundle() -> JarBundle:
    v = versions.KAFKA_VERSION
    return JarBundle(
        name="kafka",
        version=v,
        coordinates=(
            f"org.apache.kafka:kafka_{versions.SCALA_BINARY_VERSION}:{v}",
            f"org.apache.kafka:kafka-tools:{v}",
            f"org.apache.logging.log4j:log4j-core:{versions.LOG4J_VERSION}",
            f"org.apache.logging.log4j:log4j-slf4j-impl:{versions.LOG4J_VERSION}",
        ),
    )


def zookeeper_bundle() -> JarBundle:
    v = versions.ZOOKEEPER_VERSION
    return JarBundle(
        name="zookeeper",
        version=v,
        coordinates=(
            f"org.apache.zookeeper:zookeeper:{v}",
            # provided / optional in ZooKeeper's POM, but the server needs them at run time
            f"io.dropwizard.metrics:metrics-core:{versions.ZK_DROPWIZARD_VERSION}",
            f"ch.qos.logback:logback-classic:{versions.ZK_LOGBACK_VERSION}",
            f"org.xerial.snappy:snappy-java:{versions.ZK_SNAPPY_VERSION}",
        ),
        exclusions=("io.netty:netty-tcnative-boringssl-static",),
    )


def spark_kafka_bundle(spark_version: str | None = None) -> JarBundle:
    """spark-sql-kafka for the installed PySpark (its Spark and Scala versions).

    Spark's own jars (provided scope) are not copied: PySpark ships them.
    """
    v = spark_version or versions.installed_spark_version()
    return JarBundle(
        name="spark-sql-kafka",
        version=v,
        coordinates=(f"org.apache.spark:spark-sql-kafka-0-10_{versions.SCALA_BINARY_VERSION}:{v}",),
    )


def all_bundles() -> list[JarBundle]:
    return [zookeeper_bundle(), kafka_bundle(), spark_kafka_bundle()]


def _pom(bundle: JarBundle) -> str:
    exclusions = "".join(
        f"<exclusion><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId></exclusion>"
        for g, a in (e.split(":", 1) for e in bundle.exclusions)
    )
    deps = []
    for coord in bundle.coordinates:
        group, artifact, version = coord.split(":")
        deps.append(
            f"<dependency><groupId>{escape(group)}</groupId><artifactId>{escape(artifact)}</artifactId>"
            f"<version>{escape(version)}</version><exclusions>{exclusions}</exclusions></dependency>"
        )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<project xmlns="http://maven.apache.org/POM/4.0.0">'
        "<modelVersion>4.0.0</modelVersion><groupId>dev.shoal.bundles</groupId>"
        f"<artifactId>{escape(bundle.name)}</artifactId><version>{escape(bundle.version)}</version>"
        f"<packaging>pom</packaging><dependencies>{''.join(deps)}</dependencies></project>\n"
    )


def is_complete(bundle: JarBundle, cache_dir: Path) -> bool:
    return (bundle.directory(cache_dir) / _MARKER).is_file()


def ensure_bundle(
    bundle: JarBundle,
    cache_dir: Path,
    *,
    mvn: str = "mvn",
    repository_url: str = MAVEN_CENTRAL,
    timeout_s: float = 1800,
) -> Path:
    """Return the folder holding the bundle's jars, fetching them with Maven only if needed.

    Maven runs with a settings file that mirrors every repository to ``repository_url``:
    some POMs (Spark's parent) declare extra repositories that are not reachable here.
    """
    target = bundle.directory(cache_dir)
    if is_complete(bundle, cache_dir):
        return target
    if shutil.which(mvn) is None:
        raise JarFetchError(f"Maven ({mvn!r}) is not on PATH; it is needed once to fetch the {bundle.name} jars")
    log.info("fetching %s %s jars from Maven Central into %s", bundle.name, bundle.version, target)
    staging = Path(tempfile.mkdtemp(prefix=f".{bundle.name}-", dir=_ensure_dir(target.parent)))
    try:
        pom = staging / "pom.xml"
        pom.write_text(_pom(bundle), encoding="utf-8")
        settings = staging / "settings.xml"
        settings.write_text(_SETTINGS.format(url=escape(repository_url)), encoding="utf-8")
        jars = staging / "jars"
        cmd = [
            mvn,
            "-B",
            "-q",
            "-s",
            str(settings),
            "-f",
            str(pom),
            f"{versions.MAVEN_DEPENDENCY_PLUGIN}:copy-dependencies",
            f"-DoutputDirectory={jars}",
            "-DincludeScope=runtime",
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise JarFetchError(f"Maven timed out after {timeout_s}s fetching {bundle.name}") from exc
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-3000:]
            raise JarFetchError(f"Maven failed to fetch {bundle.name} {bundle.version}:\n{tail}")
        if not any(jars.glob("*.jar")):
            raise JarFetchError(f"Maven fetched no jars for {bundle.name} {bundle.version}")
        (jars / _MARKER).write_text("\n".join(bundle.coordinates) + "\n", encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        jars.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def classpath(bundle: JarBundle, cache_dir: Path) -> str:
    """A Java classpath of every jar in the (complete) bundle."""
    folder = ensure_bundle(bundle, cache_dir)
    return ":".join(str(p) for p in sorted(folder.glob("*.jar")))


def jar_paths(bundle: JarBundle, cache_dir: Path) -> list[Path]:
    return sorted(ensure_bundle(bundle, cache_dir).glob("*.jar"))


def _ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
