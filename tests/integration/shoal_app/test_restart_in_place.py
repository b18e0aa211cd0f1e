"""One process of the local cluster stopped and started again in place: `shoal stop NAME`,
`shoal start NAME`, and `shoal up` on a partly running cluster starting only what is missing, with
the same ports and data (shoal_app.runtime.restart)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from shoal import cluster_file
from shoal_app.cli.main import cli
from shoal_app.runtime.process import is_running
from shoal_app.schemas import validate

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _run(data: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data), *args])


def _json(schema: str, result: Result) -> Any:
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    validate(schema, document)
    return document


def test_stop_start_and_up_restart_only_what_is_missing(tmp_path: Path) -> None:
    data = tmp_path / "local"
    up = _run(data, "up", "--brokers", "3", "--nodes", "1", "--output", "json")
    assert up.exit_code == 0, up.output
    before = cluster_file.read(data / "cluster.json")
    try:
        assert _json("cli-stopped", _run(data, "stop", "kafka-2", "--output", "json")) == {"stopped": ["kafka-2"]}
        assert _json("cli-stopped", _run(data, "stop", "node-1", "--output", "json")) == {"stopped": ["node-1"]}
        assert _json("cli-stopped", _run(data, "stop", "node-1", "--output", "json")) == {"stopped": []}
        assert _run(data, "status", "--output", "json").exit_code == 1

        again = _json("cli-started", _run(data, "up", "--output", "json"))
        assert again == {"started": ["kafka-2", "node-1"]}
        after = cluster_file.read(data / "cluster.json")
        assert [(p.name, p.port, p.metrics_port) for p in after.processes] == [
            (p.name, p.port, p.metrics_port) for p in before.processes
        ]
        assert after.bootstrap_servers == before.bootstrap_servers and all(is_running(p) for p in after.processes)
        assert _run(data, "status", "--output", "json").exit_code == 0

        assert _json("cli-started", _run(data, "start", "kafka-3", "--output", "json")) == {"started": []}
        _run(data, "stop", "kafka-3")
        assert _json("cli-started", _run(data, "start", "kafka-3", "--output", "json")) == {"started": ["kafka-3"]}
        assert _run(data, "status", "--output", "json").exit_code == 0
        unknown = _run(data, "start", "kafka-9")
        assert unknown.exit_code == 1 and "no process named 'kafka-9'" in unknown.output
    finally:
        down = _run(data, "down", "--output", "json")
    assert sorted(_json("cli-stopped", down)["stopped"]) == ["kafka-1", "kafka-2", "kafka-3", "node-1", "zookeeper"]
