"""Writer stall (DESIGN.md section 5).

A leader slows ingest while too many minors await compaction, and loses nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from node_it_support import LeaderFixture, produce_rows, rows

from shoal_app.testing.wait import wait_until
from storage_node.replica import minor_backlog

pytestmark = pytest.mark.integration


def test_the_leader_stalls_when_minors_pile_up(cluster: Any, topic_prefix: str, tmp_path: Path) -> None:
    f = LeaderFixture(cluster.bootstrap_servers, topic_prefix, tmp_path, max_rows=5)
    leader = f.start(max_minors_before_stall=2, minor_stall_s=0.05)
    try:
        for batch in range(6):  # every batch passes max_rows: one segment each (the first is the major)
            keys = list(range(batch * 10, batch * 10 + 10))
            produce_rows(cluster.bootstrap_servers, f.ingest, rows(f.table, keys, [f"v{k}" for k in keys]))
            assert wait_until(lambda b=batch: leader.stats.segments >= b + 1, 30), leader.stats  # type: ignore[misc]
        assert minor_backlog(leader.replica) == 5
        assert wait_until(lambda: leader.stats.stalls > 0, 10), leader.stats
        assert leader.stats.stall_episodes == 1  # one episode, logged once
        # stalled, not stopped: writes still arrive, every row is there
        produce_rows(cluster.bootstrap_servers, f.ingest, rows(f.table, [999], ["last"]))
        assert wait_until(lambda: leader.stats.rows == 61, 30), leader.stats
        assert leader.replica.scan().num_rows == 61
    finally:
        leader.stop()
