"""`shoal admin fix-replication` repairs a cluster made with replication factor 1 topics (the old
metadata topic default): status and offsets report them, the command raises every shoal topic to
the policy (RF 3, min.insync.replicas 2 on 3 brokers) with Kafka's reassignment tool, and a
second run finds nothing to do (DESIGN.md section 1)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from confluent_kafka.admin import ConfigResource

from shoal.jvm import jars
from shoal.kafka import clients
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames
from shoal_app.cli.main import cli
from shoal_app.schemas import validate
from shoal_app.testing.cluster import start_local

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _run(data: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data), *args], env=env or {}, input=stdin)


def _json(schema: str, result: Result) -> Any:
    document = json.loads(result.stdout)
    validate(schema, document)
    return document


def test_fix_replication_raises_an_rf1_cluster(tmp_path: Path) -> None:
    data = tmp_path / "three"
    cluster = start_local(data, jars.cache_dir_from(os.environ), brokers=3)
    try:
        old = {"SHOAL_TOPIC_REPLICATION_FACTOR": "1", "SHOAL_TOPIC_MIN_INSYNC_REPLICAS": "1"}
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
            env=old,
        )
        assert created.exit_code == 0, created.output
        rows = "".join(json.dumps({"k": k, "v": f"v{k}"}) + "\n" for k in range(50))
        wrote = _run(data, "write", "ev", env=old, stdin=rows)
        assert wrote.exit_code == 0, wrote.output

        status = _run(data, "status", "--output", "json")
        report = _json("cli-status", status)
        assert status.exit_code == 1 and not report["healthy"]
        assert any("shoal.metadata" in p and "fix-replication" in p for p in report["topic_problems"])
        offsets = _json("monitor-snapshot", _run(data, "offsets", "ev", "--output", "json"))
        assert any(p["where"] == "topic shoal.metadata" for p in offsets["problems"])

        fixed = _run(data, "admin", "fix-replication", "--wait", "--output", "json")
        assert fixed.exit_code == 0, fixed.output
        result = _json("cli-admin-fix-replication", fixed)
        assert result["complete"] and (result["replication_factor"], result["min_insync_replicas"]) == (3, 2)
        topics = {t["topic"]: t for t in result["topics"]}
        assert {"shoal.metadata", *(TopicNames("shoal").ingest(pid) for pid in _partitions(data))} <= set(topics)
        for t in topics.values():
            assert (t["replication_factor_before"], t["replication_factor"]) == (1, 3), t
            assert (t["min_insync_replicas"], t["status"]) == (2, "raised"), t

        admin = clients.admin(KafkaSettings(cluster.bootstrap_servers))
        md = admin.list_topics(timeout=10)
        for name in topics:
            [partition] = md.topics[name].partitions.values()
            assert len(partition.replicas) == len(partition.isrs) == 3
            res = ConfigResource(ConfigResource.Type.TOPIC, name)
            assert admin.describe_configs([res])[res].result(30)["min.insync.replicas"].value == "2"

        again = _json("cli-admin-fix-replication", _run(data, "admin", "fix-replication", "--output", "json"))
        assert all(t["status"] == "ok" for t in again["topics"])
        healthy = _run(data, "status", "--output", "json")
        assert _json("cli-status", healthy)["topic_problems"] == []
        described = _run(data, "table", "describe", "ev", "--output", "json")
        assert described.exit_code == 0, described.output
    finally:
        cluster.close()


def _partitions(data: Path) -> list[str]:
    described = _json("cli-table-describe", _run(data, "table", "describe", "ev", "--output", "json"))
    return [p["partition_id"] for p in described["partitions"]]
