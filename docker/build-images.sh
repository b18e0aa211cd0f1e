#!/usr/bin/env bash
# Build the images of the compose cluster and the testcontainers backend from packages only:
#   shoal-base       debootstrap --variant=minbase bookworm + docker import (docker/base/packages.txt), with the
#                    host's CA certificates (pip, Java and Maven work behind an intercepting TLS proxy)
#   shoal-zookeeper  the pinned ZooKeeper jars of `shoal jars` (Maven Central), own entrypoint + healthcheck
#   shoal-kafka      the pinned Kafka jars of `shoal jars`, own entrypoint (env -> server.properties) + healthcheck
#   shoal            shoal[spark] from wheels built on the host (PyPI, through its pip cache) + the Spark Kafka jars
# Each image is tagged <name>:<version>-<content hash> and <name>:local (what docker-compose.yml and the
# testcontainers backend use). The hash covers the files that go into the image (contents and relative
# paths, never mtimes or the clone's path), so a second run, or a fresh clone on the same machine, reuses
# every image in seconds. Starts dockerd when no daemon answers and stops only a dockerd it started.
# Usage: docker/build-images.sh [--keep-daemon]   (run from anywhere; needs root for debootstrap/dockerd)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
KEEP_DAEMON=0
[ "${1:-}" = "--keep-daemon" ] && KEEP_DAEMON=1
PY="${PYTHON:-$ROOT/.venv/bin/python}"
CACHE="${SHOAL_CACHE_DIR:-$HOME/.cache/shoal}"
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
START=$(date +%s)

say() { printf '[build-images %3ss] %s\n' "$(( $(date +%s) - START ))" "$*"; }
die() { say "ERROR: $*" >&2; exit 1; }

# shellcheck source=docker/dockerd.sh
source "$ROOT/docker/dockerd.sh"
ensure_dockerd
if [ "$KEEP_DAEMON" = 0 ]; then trap stop_dockerd_if_started EXIT; fi

hash_files() {  # sha256 over (relative path, content) of the given files, sorted by path
  (for f in "$@"; do printf '%s\n' "$f"; done) | LC_ALL=C sort | while read -r f; do
    printf '%s  %s\n' "$(sha256sum < "$f" | cut -c1-64)" "$f"; done | sha256sum | cut -c1-12
}
build() {  # tag context: docker build, its output kept in a log and shown when it fails
  local log="$STAGE/build-${1//[:\/]/_}.log"
  docker build --build-arg "BASE_IMAGE=$BASE_TAG" -t "$1" "$2" > "$log" 2>&1 \
    || { tail -n 40 "$log" >&2; die "docker build of $1 failed (log above)"; }
}
have_image() { docker image inspect "$1" > /dev/null 2>&1; }
ca_files() { ls /etc/ssl/certs/ca-certificates.crt /usr/local/share/ca-certificates/*.crt 2>/dev/null || true; }

# --- base: debootstrap minbase + the host CA certificates ---------------------------------------------------
BASE_HASH=$(cd / && hash_files $(ca_files | sed 's|^/||') && true)
BASE_HASH=$( { echo "$SUITE $BASE_HASH"; cat "$ROOT/docker/base/packages.txt" "$ROOT/docker/base/build-base.sh"; } | sha256sum | cut -c1-12)
BASE_TAG="shoal-base:$SUITE-$BASE_HASH"
if have_image "$BASE_TAG"; then
  say "base: reusing $BASE_TAG"
else
  say "base: building $BASE_TAG (debootstrap $SUITE minbase; a few minutes)"
  bash "$ROOT/docker/base/build-base.sh" "$SUITE" "$MIRROR" "$BASE_TAG" "$ROOT/docker/base/packages.txt"
fi
docker tag "$BASE_TAG" shoal-base:local

# --- jars from the `shoal jars` cache (Maven Central) ------------------------------------------------------
JARS_DIR="$CACHE/jars"
KAFKA_VERSION=$("$PY" -c 'from shoal.jvm import versions; print(versions.KAFKA_VERSION)')
ZK_VERSION=$("$PY" -c 'from shoal.jvm import versions; print(versions.ZOOKEEPER_VERSION)')
SPARK_VERSION=$("$PY" -c 'from shoal.jvm import versions; print(versions.installed_spark_version())')
SPARK_JARS="spark-sql-kafka-$SPARK_VERSION"
for d in "kafka-$KAFKA_VERSION" "zookeeper-$ZK_VERSION" "$SPARK_JARS"; do
  if [ ! -f "$JARS_DIR/$d/.complete" ]; then
    say "jars: $d missing from $JARS_DIR, running shoal jars"
    "$ROOT/.venv/bin/shoal" jars
  fi
done

STAGE=$(mktemp -d /tmp/shoal-build.XXXXXX)
cleanup_stage() { rm -rf "$STAGE"; }
trap 'cleanup_stage; [ "$KEEP_DAEMON" = 1 ] || stop_dockerd_if_started' EXIT

jvm_image() {  # name version jar-dir
  local name=$1 version=$2 jars=$3 ctx="$STAGE/$1" h tag
  h=$( { (cd "$ROOT/docker/$name" && hash_files $(ls)); (cd "$JARS_DIR/$jars" && hash_files $(ls)); echo "$BASE_TAG"; } | sha256sum | cut -c1-12)
  tag="shoal-$name:$version-$h"
  if have_image "$tag"; then
    say "$name: reusing $tag"
  else
    say "$name: building $tag"
    mkdir -p "$ctx/libs"
    cp "$ROOT/docker/$name"/* "$ctx/"
    cp "$JARS_DIR/$jars"/*.jar "$ctx/libs/"
    build "$tag" "$ctx"
  fi
  docker tag "$tag" "shoal-$name:local"
  docker tag "$tag" "shoal-$name:$version"
}
jvm_image zookeeper "$ZK_VERSION" "zookeeper-$ZK_VERSION"
jvm_image kafka "$KAFKA_VERSION" "kafka-$KAFKA_VERSION"

# --- shoal: wheels built on the host (pip cache), installed offline in the image -----------------------------
mapfile -t SOURCES < <(git ls-files --cached --others --exclude-standard -- \
  shoal metadata producer storage_node spark_jobs monitor shoal_app pyproject.toml constraints.txt README.md \
  | while read -r f; do [ -f "$f" ] && printf '%s\n' "$f"; done)
SHOAL_VERSION=$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
SHOAL_HASH=$( { hash_files "${SOURCES[@]}" docker/Dockerfile; (cd "$JARS_DIR/$SPARK_JARS" && hash_files $(ls)); echo "$BASE_TAG"; } | sha256sum | cut -c1-12)
SHOAL_TAG="shoal:$SHOAL_VERSION-$SHOAL_HASH"
if have_image "$SHOAL_TAG"; then
  say "shoal: reusing $SHOAL_TAG"
else
  say "shoal: building wheels on the host (pip cache)"
  mkdir -p "$STAGE/shoal/wheels/deps" "$STAGE/shoal/wheels/shoal" "$STAGE/shoal/jars"
  "$PY" -m pip wheel --quiet --wheel-dir "$STAGE/shoal/wheels/deps" -c constraints.txt ".[spark]" \
    > "$STAGE/pip.log" 2>&1 || { tail -n 40 "$STAGE/pip.log" >&2; die "pip wheel failed"; }
  mv "$STAGE/shoal/wheels/deps"/shoal-*.whl "$STAGE/shoal/wheels/shoal/"
  rm -rf "$ROOT/build"  # setuptools' build/ folder from the wheel build
  cp -r "$JARS_DIR/$SPARK_JARS" "$STAGE/shoal/jars/"
  cp docker/Dockerfile "$STAGE/shoal/"
  say "shoal: building $SHOAL_TAG ($(du -sh "$STAGE/shoal/wheels/deps" | cut -f1) of dependency wheels)"
  build "$SHOAL_TAG" "$STAGE/shoal"
fi
docker tag "$SHOAL_TAG" shoal:local
say "images ready: $BASE_TAG $SHOAL_TAG and shoal-{zookeeper,kafka}:local ($(( $(date +%s) - START )) s)"
