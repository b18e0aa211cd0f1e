#!/usr/bin/env bash
# Installs what shoal needs from the system when it is missing: Java 17+ and Maven (servers, jars),
# Chromium (the monitor page's browser test) and docker-compose (offline validation of docker/).
# Uses apt-get (Debian/Ubuntu) and needs root or sudo; does nothing when both are present.
set -euo pipefail
need=()
if ! command -v java >/dev/null 2>&1; then need+=(openjdk-17-jdk-headless); fi
if ! command -v mvn >/dev/null 2>&1; then need+=(maven); fi
if ! command -v chromium >/dev/null 2>&1; then need+=(chromium); fi
if ! command -v docker-compose >/dev/null 2>&1; then need+=(docker-compose); fi
if ! command -v python3.11 >/dev/null 2>&1 && ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  need+=(python3 python3-venv)
fi
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing system packages: ${need[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
