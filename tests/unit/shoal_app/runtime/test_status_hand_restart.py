"""``shoal status`` sees a storage node restarted by hand with the README's node command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shoal.cluster_file import ClusterInfo, ProcessRecord
from shoal_app.runtime import kafka, launcher, storage_nodes


def _info(data_dir: Path) -> ClusterInfo:
    node = ProcessRecord(
        name="node-1", pid=2**22 + 17, marker=str(data_dir / "nodes" / "node-1"), log_path=str(data_dir / "n.log")
    )
    return ClusterInfo(
        data_dir=str(data_dir),
        bootstrap_servers="127.0.0.1:1",
        zk_connect="127.0.0.1:2",
        kafka_cluster_id="x",
        brokers=0,
        processes=(node,),
        extra={"nodes": 1},
    )


def test_a_node_restarted_by_hand_is_running_registered_and_healthy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = _info(tmp_path)
    monkeypatch.setattr(kafka, "broker_count", lambda *a, **k: 0)
    registered: set[str] = set()
    monkeypatch.setattr(storage_nodes, "registered", lambda *a, **k: set(registered))
    marker = info.processes[0].marker
    # the README's command line: `shoal ... node --id node-1 --data-dir DIR/nodes/node-1` (a stand-in program)
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "node", "--id", "node-1", "--data-dir", marker]
    proc = subprocess.Popen(argv)
    try:
        report = launcher.status(info)
        (node,) = report["processes"]
        assert node["running"] and node["pid"] == proc.pid and not node["healthy"]  # not registered yet
        registered.add("node-1")
        report = launcher.status(info)
        assert report["nodes_registered"] == ["node-1"] and report["healthy"], report
    finally:
        proc.kill()
        proc.wait()
    # gone from the process table but registered in ZooKeeper (started elsewhere): running and healthy
    report = launcher.status(info)
    assert report["processes"][0]["running"] and report["healthy"], report
    registered.clear()
    assert not launcher.status(info)["healthy"]
