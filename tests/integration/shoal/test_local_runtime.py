"""`shoal up` / `status` / `down` as a user runs them: 3 brokers, RF 3, min ISR 2, nothing left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from shoal.kafka_admin import admin_client, create_topic
from shoal.runtime import cluster_file
from shoal.runtime.process import is_running

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def shoal(*args: str, data_dir: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHOAL_DATA_DIR": str(data_dir)}
    proc = subprocess.run([sys.executable, "-m", "shoal.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=300, check=False)  # fmt: skip
    if check and proc.returncode != 0:
        raise AssertionError(f"shoal {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_up_status_down_with_three_brokers(tmp_path: Path) -> None:
    data = tmp_path / "local"
    up = json.loads(shoal("up", "--brokers", "3", "--output", "json", data_dir=data).stdout)
    info = cluster_file.read(data / "cluster.json")
    try:
        assert [p.name for p in info.processes] == ["zookeeper", "kafka-1", "kafka-2", "kafka-3"]
        assert up["bootstrap_servers"] == info.bootstrap_servers and len(info.bootstrap_servers.split(",")) == 3
        assert all(a.startswith("127.0.0.1:") for a in [*info.bootstrap_servers.split(","), info.zk_connect])

        status = json.loads(shoal("status", "--output", "json", data_dir=data).stdout)
        assert status["healthy"] is True and status["brokers_seen"] == 3
        assert all(p["running"] and p["healthy"] for p in status["processes"])

        # A second `up` on a running cluster is refused, and changes nothing.
        again = shoal("up", data_dir=data, check=False)
        assert again.returncode == 2 and "already running" in again.stderr
        assert cluster_file.read(data / "cluster.json") == info

        # Production shape: RF 3 and min.insync.replicas 2 by default; acks=all writes succeed.
        admin = admin_client(info.bootstrap_servers)
        create_topic(admin, "rf3")
        md = admin.list_topics("rf3", timeout=10).topics["rf3"]
        assert len(md.partitions[0].replicas) == 3
        from confluent_kafka.admin import ConfigResource

        [cfg_future] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "rf3")]).values()
        assert cfg_future.result(30)["min.insync.replicas"].value == "2"
        producer = Producer({"bootstrap.servers": info.bootstrap_servers, "acks": "all", "enable.idempotence": True})
        producer.produce("rf3", value=b"x")
        assert producer.flush(30) == 0
    finally:
        down = shoal("down", "--output", "json", data_dir=data)
    assert sorted(json.loads(down.stdout)["stopped"]) == ["kafka-1", "kafka-2", "kafka-3", "zookeeper"]
    assert not any(is_running(p) for p in info.processes)
    for p in info.processes:  # not even under another name: the pids are gone
        assert not Path(f"/proc/{p.pid}").exists() or "Z" in Path(f"/proc/{p.pid}/stat").read_text().split()[2]

    status = shoal("status", "--output", "json", data_dir=data, check=False)
    assert status.returncode == 1 and json.loads(status.stdout)["running"] is False
