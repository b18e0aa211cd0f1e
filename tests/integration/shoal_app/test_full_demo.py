"""`shoal demo` end to end, as `make demo` runs it, with a small volume.

A fresh 3-broker, 3-node cluster in a tmp data dir; a table with RF 3 and 4 partitions; a generator
writing JSON events to an external topic; `shoal spark ingest`; the leader of a partition killed
with -9 and the failover; the node restarted; `shoal spark compact --once`; leaders moved back to
their preferred leaders; `shoal verify`. The JSON summary must show every replica agreeing, every
acknowledged event in shoal exactly once, a failover to a new leader with a higher epoch, a
committed compaction, leaders spread over the nodes, and nothing left running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shoal import cluster_file
from shoal_app.runtime.process import is_running
from shoal_app.schemas import validate

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

EVENTS = 6000


def _processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Live processes whose command line contains ``text`` (every process the demo starts names its data dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if text in cmd and state not in ("Z", "X"):
            found.append((int(entry.name), cmd[:200]))
    return found


@pytest.mark.timeout(1200)
def test_full_demo_end_to_end(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    argv = [
        sys.executable,
        "-m",
        "shoal_app.cli.main",
        "demo",
        "--data-dir",
        str(data),
        "--events",
        str(EVENTS),
        "--rate",
        "150",
        "--partitions",
        "4",
        "--output",
        "json",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1100, check=False)
    summary = json.loads(proc.stdout)
    validate("cli-demo", summary)
    brief = {k: summary.get(k) for k in ("errors", "failover", "restart", "compaction", "leaders", "verify", "content")}
    detail = f"exit {proc.returncode}\n{json.dumps(brief, indent=1)[:6000]}\n--- stderr (tail)\n{proc.stderr[-4000:]}"

    # nothing the demo started is left: not the cluster, the monitor, the ingest job, nor Spark's JVM
    assert summary["processes"], detail
    assert [p for p in summary["processes"] if p["running"]] == [], detail
    assert _processes_mentioning(str(data)) == [], detail
    info = cluster_file.read(data / "cluster.json")
    assert not any(is_running(p) for p in info.processes)

    assert summary["errors"] == [], detail
    assert summary["ok"] is True and proc.returncode == 0, detail

    # the generator's acknowledged events are all in shoal, each once, with their own content
    gen, content = summary["generator"], summary["content"]
    assert gen["produced"] == gen["acknowledged"] == EVENTS and gen["failed"] == 0
    assert content["ok"] is True
    assert content["rows"] == content["distinct_ids"] == content["acknowledged"] == EVENTS
    assert content["missing"] == content["unexpected"] == content["wrong_content"] == 0
    assert summary["ingest"]["rows_in_shoal"] == EVENTS

    # every replica of every partition holds the same rows (`shoal verify` agreed)
    verify = summary["verify"]
    assert verify["ok"] is True and verify["exit_code"] == 0
    assert len(verify["partitions"]) == summary["partitions"] == 4
    total = 0
    for part in verify["partitions"]:
        assert part["agree"] and part["wal_chains_ok"], part
        assert part["covered"] is True, part  # every write still on a WAL channel is in every replica
        replicas = part["replicas"]
        assert len(replicas) == summary["replication_factor"] == 3
        assert len({r["row_count"] for r in replicas}) == 1 and len({r["content_hash"] for r in replicas}) == 1
        total += replicas[0]["row_count"]
    assert total == EVENTS

    # the leader was killed and every partition it led failed over to a live node with a higher epoch
    failover = summary["failover"]
    assert failover["happened"] is True and failover["partitions"], failover
    for p in failover["partitions"]:
        assert p["old_leader"] == failover["killed"] and p["new_leader"] not in (None, failover["killed"])
        assert p["new_epoch"] > p["old_epoch"]
    restart = summary["restart"]
    assert restart["server_id"] == failover["killed"] and restart["pid"] != failover["killed_pid"]
    assert restart["same_command_line"] is True

    # a compaction was computed by Spark and committed by the leaders
    compaction = summary["compaction"]
    assert compaction["ok"] is True and compaction["committed"] >= 1
    for major in compaction["majors"]:
        assert major["partition_id"] in summary["partition_ids"] and major["rows"] > 0 and major["folded"] >= 2

    # the demo ends with leaders spread: no node leads every partition (each is back on its preferred leader)
    leaders = summary["leaders"]
    assert leaders["partitions"] == 4 and sum(leaders["per_node"].values()) == 4, leaders
    assert max(leaders["per_node"].values()) < leaders["partitions"], leaders

    assert summary["monitor"]["url"].startswith("http://127.0.0.1:") and summary["kept_running"] is False
