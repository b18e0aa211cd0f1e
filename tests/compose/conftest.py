"""The compose cluster test runs only through ``make compose-test`` (docker/compose-test.sh), which builds the
images and makes a Docker engine answer first; a plain ``pytest`` run of the main suite does not collect it."""

from __future__ import annotations

import os

if os.environ.get("SHOAL_COMPOSE_TEST") != "1":
    collect_ignore_glob = ["test_*.py"]
