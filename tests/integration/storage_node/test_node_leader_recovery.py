"""Leader crash recovery (LinDB): segments + WAL replay give exactly the accepted writes; fencing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from node_it_support import LeaderFixture, produce_rows, read_all, rows

from shoal.errors import StaleEpochError
from shoal.wire.records import GENESIS_HASH, WalRecord, verify_chain
from shoal_app.testing.wait import wait_until
from storage_node.errors import FencedError
from storage_node.roles.leader import LeaderRoleState

pytestmark = pytest.mark.integration


def _expected(n: int) -> list[dict[str, Any]]:
    return [{"k": k, "v": f"v{k}"} for k in range(n)]


def test_crashed_leader_recovers_from_segments_and_wal(cluster: Any, topic_prefix: str, tmp_path: Path) -> None:
    bs = cluster.bootstrap_servers
    f = LeaderFixture(bs, topic_prefix, tmp_path, max_rows=10)
    t = f.table
    a = f.start()
    produce_rows(bs, f.ingest, *(rows(t, [i, i + 1, i + 2], [f"v{i}", f"v{i + 1}", f"v{i + 2}"]) for i in (0, 3, 6, 9)))
    assert wait_until(lambda: a.stats.rows == 12 and a.stats.segments == 1, 30), a.stats
    produce_rows(bs, f.ingest, rows(t, [12, 13], ["v12", "v13"]))  # stays in the memtable (12 - 12 + 2 < 10)
    assert wait_until(lambda: a.stats.rows == 14, 30)
    a.abandon()  # crash: no flush, nothing closed
    a.replica.close()

    b = f.start()
    try:
        assert b.stats.replayed_rows == 2, b.stats  # only what the segment does not cover
        assert b.replica.scan().sort_by("k").to_pylist() == _expected(14)
        produce_rows(bs, f.ingest, rows(t, [14], ["v14"]))
        assert wait_until(lambda: b.stats.rows == 1, 30)
        assert b.replica.scan().sort_by("k").to_pylist() == _expected(15)
        wal = [WalRecord.from_bytes(m.value()) for m in read_all(bs, f.wal())]
        verify_chain(wal, prev_hash=GENESIS_HASH)  # the chain continues across the crash
        assert [r.gtid.seq for r in wal] == [0, 3, 6, 9, 12, 14]
    finally:
        b.stop()


def test_killed_leader_process_loses_and_doubles_nothing(cluster: Any, topic_prefix: str, tmp_path: Path) -> None:
    bs = cluster.bootstrap_servers
    f = LeaderFixture(bs, topic_prefix, tmp_path)
    script = Path(__file__).with_name("node_leader_proc.py")

    def spawn() -> subprocess.Popen[str]:
        p = subprocess.Popen(
            [sys.executable, str(script), bs, topic_prefix, f.partition_id, str(tmp_path)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        assert p.stdout is not None and p.stdout.readline().strip() == "READY"
        return p

    t = f.table
    proc = spawn()
    try:
        for i in range(0, 60, 3):  # a stream of writes; kill -9 in the middle of it
            produce_rows(bs, f.ingest, rows(t, [i, i + 1, i + 2], [f"v{i}", f"v{i + 1}", f"v{i + 2}"]))
            if i == 30:
                time.sleep(0.3)
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
        leader = f.start()
        try:
            assert wait_until(lambda: leader.replica.scan().num_rows == 60, 30), leader.replica.scan().num_rows
            assert leader.replica.scan().sort_by("k").to_pylist() == _expected(60)
            wal = [WalRecord.from_bytes(m.value()) for m in read_all(bs, f.wal())]
            verify_chain(wal, prev_hash=GENESIS_HASH)
            assert sum(r.row_count for r in wal) == 60  # exactly once: no record written twice
        finally:
            leader.stop()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_zombie_leader_is_fenced_and_commits_nothing(cluster: Any, topic_prefix: str, tmp_path: Path) -> None:
    bs = cluster.bootstrap_servers
    f = LeaderFixture(bs, topic_prefix, tmp_path)
    t = f.table
    zombie = f.start(epoch=1)
    produce_rows(bs, f.ingest, rows(t, [1], ["a"]))
    assert wait_until(lambda: zombie.stats.rows == 1, 30)
    # a new incarnation of the same channel (e.g. the node restarted elsewhere) with a newer epoch
    new = f.start(epoch=2, data_dir=tmp_path / "new")
    try:
        produce_rows(bs, f.ingest, rows(t, [2], ["b"]))
        assert wait_until(lambda: new.stats.rows == 1, 30)
        # the zombie may have consumed the same message, but its transaction cannot commit
        assert wait_until(lambda: zombie.role_state is LeaderRoleState.FENCED or zombie.stats.rows == 1, 5)
        wal = [WalRecord.from_bytes(m.value()) for m in read_all(bs, f.wal())]
        assert [(r.gtid.epoch, r.gtid.seq) for r in wal] == [(1, 0), (2, 0)]
        if zombie.role_state is LeaderRoleState.FENCED:
            assert isinstance(zombie.error, FencedError)
        assert zombie.stats.rows == 1
    finally:
        zombie.stop()
        new.stop()
    # a process claiming the channel with an older epoch than the channel's records is refused
    old = f.start(epoch=1, data_dir=tmp_path / "old")
    try:
        produce_rows(bs, f.ingest, rows(t, [3], ["c"]))
        assert wait_until(lambda: old.stopped.is_set(), 30)
        assert old.role_state is LeaderRoleState.FENCED and isinstance(old.error, StaleEpochError)
        assert len(read_all(bs, f.wal())) == 2
    finally:
        old.stop()
