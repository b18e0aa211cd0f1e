# Sourced by docker/build-images.sh and the compose test: make a Docker engine answer, and stop only a
# dockerd this shell started (its pid is recorded; a daemon that was already running is left alone).
# The engine listens on its unix socket only (no TCP port).
SHOAL_DOCKERD_STARTED=""
SHOAL_DOCKERD_LOG="${SHOAL_DOCKERD_LOG:-/tmp/shoal-dockerd.log}"

ensure_dockerd() {
  if docker info > /dev/null 2>&1; then return 0; fi
  local dockerd
  dockerd="$(command -v dockerd || echo /usr/sbin/dockerd)"
  if [ ! -x "$dockerd" ]; then
    echo "no Docker engine answers and no dockerd is installed (apt-get install docker.io)" >&2
    return 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "no Docker engine answers, and starting dockerd needs root" >&2
    return 1
  fi
  echo "starting $dockerd (log: $SHOAL_DOCKERD_LOG)"
  "$dockerd" > "$SHOAL_DOCKERD_LOG" 2>&1 &
  SHOAL_DOCKERD_STARTED=$!
  local i
  for i in $(seq 1 120); do
    if docker info > /dev/null 2>&1; then return 0; fi
    if ! kill -0 "$SHOAL_DOCKERD_STARTED" 2> /dev/null; then
      echo "dockerd exited at start; its log:" >&2
      tail -n 30 "$SHOAL_DOCKERD_LOG" >&2
      SHOAL_DOCKERD_STARTED=""
      return 1
    fi
    sleep 0.5
  done
  echo "dockerd did not answer within 60 s; its log:" >&2
  tail -n 30 "$SHOAL_DOCKERD_LOG" >&2
  return 1
}

stop_dockerd_if_started() {
  [ -n "$SHOAL_DOCKERD_STARTED" ] || return 0
  echo "stopping the dockerd this run started (pid $SHOAL_DOCKERD_STARTED)"
  kill "$SHOAL_DOCKERD_STARTED" 2> /dev/null || true
  local i
  for i in $(seq 1 60); do
    kill -0 "$SHOAL_DOCKERD_STARTED" 2> /dev/null || break
    sleep 0.5
  done
  SHOAL_DOCKERD_STARTED=""
}
