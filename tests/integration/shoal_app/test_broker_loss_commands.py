"""The commands keep working with one of three brokers killed (kill -9): every shoal topic is
replicated by the topic policy (RF 3, min.insync.replicas 2), and metadata reads wait for the new
partition leader (DESIGN.md section 1). The commands that need no storage node are run here:
table describe / list / history, write, offsets and monitor; with storage nodes: write --sync,
scan (leaders and --node), verify and spark ingest."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from cli_it_support import create_table, rows, run

from shoal import cluster_file
from shoal.kafka import clients
from shoal.kafka.admin import create_topic
from shoal.kafka.settings import KafkaSettings, TopicPolicy
from shoal_app.demo.processes import start_monitor
from shoal_app.runtime.ports import free_port
from shoal_app.runtime.process import kill, stop
from shoal_app.testing.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_commands_work_with_the_metadata_leader_broker_killed(tmp_path: Path) -> None:
    data = tmp_path / "three"
    up = run(data, "up", "--brokers", "3")
    assert up.exit_code == 0, up.output
    try:
        create_table(data, ["node-1"], 1)
        assert run(data, "write", "ev", stdin=rows(0, 50)).exit_code == 0

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
            ["offsets", "ev", "--fail-on", "never", "--output", "json"],  # the killed broker is a problem
        ):
            result = run(data, *args)
            assert result.exit_code == 0, f"shoal {' '.join(args)}: {result.output}"
        wrote = run(data, "write", "ev", "--output", "json", stdin=rows(50, 50))
        assert wrote.exit_code == 0, wrote.output
        assert json.loads(wrote.stdout)["rows"] == 50
        status = json.loads(run(data, "status", "--output", "json").stdout)
        assert status["brokers_seen"] == 2 and not status["healthy"]

        # shoal monitor: it answers /healthz only after a successful poll, with the broker still down
        monitor = start_monitor(data / "cluster.json", tmp_path / "monitor", "ev", free_port(), interval_s=1.0)
        try:
            with urllib.request.urlopen(f"{monitor.url}/api/snapshot", timeout=10) as resp:
                snapshot = json.loads(resp.read())
            assert [t["table"] for t in snapshot["tables"]] == ["ev"]
        finally:
            stop(monitor.record)
    finally:
        run(data, "down")


def test_node_commands_with_a_broker_killed(tmp_path: Path) -> None:
    """write --sync, scan (leaders and --node) and verify with one of three brokers killed."""
    data = tmp_path / "nodes"
    up = run(data, "up", "--brokers", "3", "--nodes", "3")
    assert up.exit_code == 0, up.output
    try:
        create_table(data, ["node-1", "node-2", "node-3"], 3)
        first = run(data, "write", "ev", "--sync", "--timeout", "120", stdin=rows(0, 50))
        assert first.exit_code == 0, first.output
        info = cluster_file.read(data / "cluster.json")
        md = clients.admin(KafkaSettings(info.bootstrap_servers)).list_topics(timeout=10)
        [partition] = md.topics["shoal.metadata"].partitions.values()
        victim = info.process(f"kafka-{partition.leader}")
        assert victim is not None
        kill(victim)

        wrote = run(data, "write", "ev", "--sync", "--timeout", "180", stdin=rows(50, 50))
        assert wrote.exit_code == 0, wrote.output

        def scanned(*extra: str) -> int:
            out = run(data, "scan", "ev", "--output", "json", *extra)
            return sum(1 for line in out.stdout.splitlines() if line.startswith("{")) if out.exit_code == 0 else -1

        assert wait_until(lambda: scanned() == 100, 120)
        assert wait_until(lambda: scanned("--node", "node-2") == 100, 120)
        assert wait_until(lambda: run(data, "verify", "ev").exit_code == 0, 120)

        # shoal spark ingest (its own process and JVM): a source topic on the two live brokers -> ev
        kafka = KafkaSettings(info.bootstrap_servers)
        create_topic(clients.admin(kafka), "ev-source", policy=TopicPolicy())
        producer = clients.producer(kafka)
        for line in rows(100, 50).splitlines():
            producer.produce("ev-source", line.encode())
        assert producer.flush(60) == 0
        ingest = subprocess.run(
            [
                sys.executable,
                "-m",
                "shoal_app.cli.main",
                "--data-dir",
                str(data),
                "spark",
                "ingest",
                "--topic",
                "ev-source",
                "--table",
                "ev",
                "--available-now",
                "--master",
                "local[1]",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ingest.returncode == 0, ingest.stderr[-3000:]
        assert wait_until(lambda: scanned() == 150, 120)
    finally:
        run(data, "down")
