"""The commands keep working with one of three brokers killed (kill -9): every shoal topic is
replicated by the topic policy (RF 3, min.insync.replicas 2), and metadata reads wait for the new
partition leader (DESIGN.md section 1). The commands that need no storage node are run here:
table describe / list / history, write and offsets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from shoal import cluster_file
from shoal.kafka import clients
from shoal.kafka.settings import KafkaSettings
from shoal_app.cli.main import cli
from shoal_app.runtime.process import kill

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _run(data: Path, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data), *args], input=stdin)


def _rows(first: int, n: int) -> str:
    return "".join(json.dumps({"k": k, "v": f"v{k}"}) + "\n" for k in range(first, first + n))


def test_commands_work_with_the_metadata_leader_broker_killed(tmp_path: Path) -> None:
    data = tmp_path / "three"
    up = _run(data, "up", "--brokers", "3")
    assert up.exit_code == 0, up.output
    try:
        table = ["table", "create", "ev", "--column", "k:uint64:not_null", "--column", "v:string"]
        created = _run(
            data,
            *table,
            "--primary-key",
            "k",
            "--partition-key",
            "k",
            "--replication-factor",
            "1",
            "--server",
            "node-1",
        )
        assert created.exit_code == 0, created.output
        assert _run(data, "write", "ev", stdin=_rows(0, 50)).exit_code == 0

        info = cluster_file.read(data / "cluster.json")
        md = clients.admin(KafkaSettings(info.bootstrap_servers)).list_topics(timeout=10)
        [partition] = md.topics["shoal.metadata"].partitions.values()
        assert len(partition.replicas) == 3
        victim = info.process(f"kafka-{partition.leader}")
        assert victim is not None
        kill(victim)  # SIGKILL: the leader of every shoal.metadata read is gone

        for args in (
            ["table", "describe", "ev", "--output", "json"],
            ["table", "list", "--output", "json"],
            ["table", "history", "ev", "--output", "json"],
            ["offsets", "ev", "--output", "json"],
        ):
            result = _run(data, *args)
            assert result.exit_code == 0, f"shoal {' '.join(args)}: {result.output}"
        wrote = _run(data, "write", "ev", "--output", "json", stdin=_rows(50, 50))
        assert wrote.exit_code == 0, wrote.output
        assert json.loads(wrote.stdout)["rows"] == 50
        status = json.loads(_run(data, "status", "--output", "json").stdout)
        assert status["brokers_seen"] == 2 and not status["healthy"]
    finally:
        _run(data, "down")
