"""`shoal up` / `status` / `down` as a user runs them: brokers, RF 3, min ISR 2, storage nodes, no leftovers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from shoal import cluster_file
from shoal.jvm.java import C1_ONLY
from shoal.kafka import clients
from shoal.kafka.admin import create_topic
from shoal.kafka.settings import KafkaSettings, TopicPolicy
from shoal_app.runtime.process import is_running
from shoal_app.schemas import validate
from shoal_app.testing.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _get(url: str) -> str:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return str(resp.read().decode())
    except OSError:
        return ""


def shoal(
    *args: str, data_dir: Path, check: bool = True, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "SHOAL_DATA_DIR": str(data_dir), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "shoal_app.cli.main", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
        check=False,
        input=stdin,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"shoal {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def checked(schema: str, text: str) -> Any:
    """The JSON a command printed, checked against its committed schema (docs/schemas/)."""
    document = json.loads(text)
    validate(schema, document)
    return document


def test_up_status_down_with_three_brokers(tmp_path: Path) -> None:
    data = tmp_path / "local"
    up = checked("cluster-file", shoal("up", "--brokers", "3", "--output", "json", data_dir=data).stdout)
    info = cluster_file.read(data / "cluster.json")
    try:
        assert [p.name for p in info.processes] == ["zookeeper", "kafka-1", "kafka-2", "kafka-3"]
        assert up["bootstrap_servers"] == info.bootstrap_servers and len(info.bootstrap_servers.split(",")) == 3
        assert all(a.startswith("127.0.0.1:") for a in [*info.bootstrap_servers.split(","), info.zk_connect])
        # Every JVM compiles with C1 only (shoal.jvm.java.C1_ONLY: C2 starved a 2-core machine).
        for p in info.processes:
            assert C1_ONLY in Path(f"/proc/{p.pid}/cmdline").read_bytes().decode().split("\0"), p.name

        status = checked("cli-status", shoal("status", "--output", "json", data_dir=data).stdout)
        assert status["healthy"] is True and status["brokers_seen"] == 3
        assert all(p["running"] and p["healthy"] for p in status["processes"])

        # A second `up` on a running cluster is refused, and changes nothing.
        again = shoal("up", data_dir=data, check=False)
        assert again.returncode == 2 and "already running" in again.stderr
        assert cluster_file.read(data / "cluster.json") == info

        # Production shape: RF 3 and min.insync.replicas 2 by default; acks=all writes succeed.
        admin = clients.admin(KafkaSettings(info.bootstrap_servers))
        create_topic(admin, "rf3", policy=TopicPolicy())
        # Each broker's metadata cache learns of the topic on its own: ask until the one answering knows.
        seen: list[Any] = []

        def rf3_known() -> bool:
            seen.append(admin.list_topics("rf3", timeout=10).topics["rf3"])
            return seen[-1].error is None and bool(seen[-1].partitions)

        assert wait_until(rf3_known, timeout=30, interval=0.2)
        md = seen[-1]
        assert len(md.partitions[0].replicas) == 3
        from confluent_kafka.admin import ConfigResource

        configs: list[Any] = []

        def rf3_configs() -> bool:  # the broker asked may still not know the topic: ask again
            [cfg_future] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "rf3")]).values()
            try:
                configs.append(cfg_future.result(30))
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise
                return False
            return True

        assert wait_until(rf3_configs, timeout=30, interval=0.2)
        assert configs[-1]["min.insync.replicas"].value == "2"
        producer = Producer({"bootstrap.servers": info.bootstrap_servers, "acks": "all", "enable.idempotence": True})
        producer.produce("rf3", value=b"x")
        assert producer.flush(30) == 0
    finally:
        down = shoal("down", "--output", "json", data_dir=data)
    assert sorted(checked("cli-stopped", down.stdout)["stopped"]) == ["kafka-1", "kafka-2", "kafka-3", "zookeeper"]
    assert not any(is_running(p) for p in info.processes)
    for p in info.processes:  # not even under another name: the pids are gone
        assert not Path(f"/proc/{p.pid}").exists() or "Z" in Path(f"/proc/{p.pid}/stat").read_text().split()[2]

    status = shoal("status", "--output", "json", data_dir=data, check=False)
    assert status.returncode == 1 and checked("cli-status", status.stdout)["running"] is False


def test_up_with_storage_nodes_writes_and_scans(tmp_path: Path) -> None:
    data = tmp_path / "with-nodes"
    shoal("up", "--nodes", "2", "--output", "json", data_dir=data)
    info = cluster_file.read(data / "cluster.json")
    try:
        assert [p.name for p in info.processes] == ["zookeeper", "kafka-1", "node-1", "node-2"]
        for name in ("node-1", "node-2"):
            rec = info.process(name)
            assert rec is not None and is_running(rec)
            assert rec.log_path == str((data / "nodes" / name / "node.log").resolve())
            assert Path(rec.log_path).exists()
            cmdline = Path(f"/proc/{rec.pid}/cmdline").read_bytes().split(b"\0")
            assert [b"node", b"--id", name.encode()] == cmdline[cmdline.index(b"node") :][:3]

        status = checked("cli-status", shoal("status", "--output", "json", data_dir=data).stdout)
        assert status["healthy"] is True and status["nodes_registered"] == ["node-1", "node-2"]
        assert {p["name"]: p["healthy"] for p in status["processes"]}["node-2"] is True
        # A node process allocates Arrow buffers from the pool its spec names (storage_node.allocator):
        # pyarrow's default and Arrow C++'s (from the variable in the node's spec).
        node_1 = info.process("node-1")
        assert node_1 is not None
        assert "Arrow memory pool: system (default before: system)" in Path(node_1.log_path).read_text()
        # Each node serves Prometheus metrics on the port recorded in the cluster file.
        metrics_url = {p["name"]: p.get("metrics_url") for p in status["processes"]}["node-1"]
        assert metrics_url is not None
        assert wait_until(lambda: "shoal_node_" in _get(metrics_url), 30)

        # Through the CLI as a user would: a table with RF 2 over both nodes, written and scanned back.
        env: dict[str, str] = {}  # no addresses: every command (write included) finds them in the cluster file
        shoal(
            "table",
            "create",
            "ev",
            "--column",
            "k:uint64:not_null",
            "--column",
            "v:string",
            "--primary-key",
            "k",
            "--partition-key",
            "k",
            "--replication-factor",
            "2",
            "--server",
            "node-1",
            "--server",
            "node-2",
            "--split-point",
            "150",
            data_dir=data,
            env=env,
        )
        described = checked(
            "cli-table-describe", shoal("table", "describe", "ev", "--output", "json", data_dir=data, env=env).stdout
        )
        assert len(described["partitions"]) == 2
        lines = "".join(json.dumps({"k": k, "v": f"v{k}"}) + "\n" for k in range(300))
        shoal("write", "ev", "--sync", "--timeout", "120", data_dir=data, env=env, stdin=lines)

        def scanned() -> list[dict[str, object]]:
            out = shoal("scan", "ev", "--output", "json", data_dir=data, env=env, check=False)
            return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]

        assert wait_until(lambda: len(scanned()) == 300, 60)
        assert scanned() == [{"k": k, "v": f"v{k}"} for k in range(300)]
    finally:
        down = shoal("down", "--output", "json", data_dir=data)
    assert sorted(checked("cli-stopped", down.stdout)["stopped"]) == ["kafka-1", "node-1", "node-2", "zookeeper"]
    assert not any(is_running(p) for p in info.processes)
    status = shoal("status", "--output", "json", data_dir=data, check=False)
    assert status.returncode == 1 and checked("cli-status", status.stdout)["running"] is False
