"""`shoal admin fix-replication` repairs a cluster made with replication factor 1 topics (the old
metadata topic default): status and offsets report them, the command raises every shoal topic to
the policy (RF 3, min.insync.replicas 2 on 3 brokers) with Kafka's reassignment tool, and a
second run finds nothing to do (DESIGN.md section 1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_it_support import checked, create_table, rows, run
from confluent_kafka.admin import ConfigResource

from shoal.jvm import jars
from shoal.kafka import clients
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames
from shoal_app.testing.cluster import start_local

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_fix_replication_raises_an_rf1_cluster(tmp_path: Path) -> None:
    data = tmp_path / "three"
    cluster = start_local(data, jars.cache_dir_from(os.environ), brokers=3)
    try:
        old = {"SHOAL_TOPIC_REPLICATION_FACTOR": "1", "SHOAL_TOPIC_MIN_INSYNC_REPLICAS": "1"}
        create_table(data, ["node-1"], 1, env=old)
        wrote = run(data, "write", "ev", env=old, stdin=rows(0, 50))
        assert wrote.exit_code == 0, wrote.output

        status = run(data, "status", "--output", "json")
        report = checked("cli-status", status)
        assert status.exit_code == 1 and not report["healthy"]
        assert any("shoal.metadata" in p and "fix-replication" in p for p in report["topic_problems"])
        offsets = checked("monitor-snapshot", run(data, "offsets", "ev", "--output", "json"))
        assert any(p["where"] == "topic shoal.metadata" for p in offsets["problems"])

        fixed = run(data, "admin", "fix-replication", "--wait", "--output", "json")
        assert fixed.exit_code == 0, fixed.output
        result = checked("cli-admin-fix-replication", fixed)
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

        again = checked("cli-admin-fix-replication", run(data, "admin", "fix-replication", "--output", "json"))
        assert all(t["status"] == "ok" for t in again["topics"])
        healthy = run(data, "status", "--output", "json")
        assert checked("cli-status", healthy)["topic_problems"] == []
        described = run(data, "table", "describe", "ev", "--output", "json")
        assert described.exit_code == 0, described.output
    finally:
        cluster.close()


def _partitions(data: Path) -> list[str]:
    described = checked("cli-table-describe", run(data, "table", "describe", "ev", "--output", "json"))
    return [p["partition_id"] for p in described["partitions"]]
