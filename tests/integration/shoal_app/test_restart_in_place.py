"""One process of the local cluster stopped and started again in place: `shoal stop NAME`,
`shoal start NAME`, and `shoal up` on a partly running cluster starting only what is missing, with
the same ports and data (shoal_app.runtime.restart)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_it_support import checked, run

from shoal import cluster_file
from shoal_app.runtime.process import is_running

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_stop_start_and_up_restart_only_what_is_missing(tmp_path: Path) -> None:
    data = tmp_path / "local"
    up = run(data, "up", "--brokers", "3", "--nodes", "1", "--output", "json")
    assert up.exit_code == 0, up.output
    before = cluster_file.read(data / "cluster.json")
    try:
        assert checked("cli-stopped", run(data, "stop", "kafka-2", "--output", "json")) == {"stopped": ["kafka-2"]}
        assert checked("cli-stopped", run(data, "stop", "node-1", "--output", "json")) == {"stopped": ["node-1"]}
        assert checked("cli-stopped", run(data, "stop", "node-1", "--output", "json")) == {"stopped": []}
        assert run(data, "status", "--output", "json").exit_code == 1

        again = checked("cli-started", run(data, "up", "--output", "json"))
        assert again == {"started": ["kafka-2", "node-1"]}
        after = cluster_file.read(data / "cluster.json")
        assert [(p.name, p.port, p.metrics_port) for p in after.processes] == [
            (p.name, p.port, p.metrics_port) for p in before.processes
        ]
        assert after.bootstrap_servers == before.bootstrap_servers and all(is_running(p) for p in after.processes)
        assert run(data, "status", "--output", "json").exit_code == 0

        assert checked("cli-started", run(data, "start", "kafka-3", "--output", "json")) == {"started": []}
        run(data, "stop", "kafka-3")
        assert checked("cli-started", run(data, "start", "kafka-3", "--output", "json")) == {"started": ["kafka-3"]}
        assert run(data, "status", "--output", "json").exit_code == 0
        unknown = run(data, "start", "kafka-9")
        assert unknown.exit_code == 1 and "no process named 'kafka-9'" in unknown.output
    finally:
        down = run(data, "down", "--output", "json")
    assert sorted(checked("cli-stopped", down)["stopped"]) == ["kafka-1", "kafka-2", "kafka-3", "node-1", "zookeeper"]
