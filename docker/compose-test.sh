#!/usr/bin/env bash
# `make compose-test`: make a Docker engine answer (starting dockerd when none does, stopping only the one it
# started), build or reuse the images (docker/build-images.sh), then run tests/compose against the compose
# cluster and the integration tests of docker/testcontainers-subset.txt on the testcontainers backend. Where no engine can start: in CI (CI=true) this fails with the reason, elsewhere it says so and
# exits 0 (`make test` runs it after the main suite).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
START=$(date +%s)
# shellcheck source=docker/dockerd.sh
source "$ROOT/docker/dockerd.sh"
if ! ensure_dockerd; then
  if [ "${CI:-}" = "true" ]; then
    echo "compose-test: FAILED: no Docker engine answers and none could be started (CI=true: the compose" \
         "cluster test must run; start dockerd or install docker.io)" >&2
    exit 1
  fi
  echo "compose-test: not run: no Docker engine answers and none could be started here" >&2
  exit 0
fi
trap stop_dockerd_if_started EXIT
bash docker/build-images.sh --keep-daemon
PY="${PYTHON:-.venv/bin/python}"
SHOAL_COMPOSE_TEST=1 "$PY" -m pytest -q -s -p no:cacheprovider tests/compose "$@"
echo "compose-test: the testcontainers backend (SHOAL_TEST_BACKEND=docker) on docker/testcontainers-subset.txt"
mapfile -t SUBSET < <(grep -v '^\s*#' docker/testcontainers-subset.txt | grep -v '^\s*$')
SHOAL_TEST_BACKEND=docker TESTCONTAINERS_RYUK_DISABLED=true "$PY" -m pytest -q -p no:cacheprovider "${SUBSET[@]}"
echo "compose-test: passed in $(( $(date +%s) - START )) s"
