"""An old leader pushes a segment the new leader lacks through its own segments channel; the leader MERGEs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from node_it_support import LeaderFixture, rows

from shoal.kafka.settings import KafkaSettings
from shoal.wire.records import Gtid
from shoal_app.testing.wait import wait_until
from storage_node.config import LeaderConfig
from storage_node.replica import PartitionReplica, versioned_rows
from storage_node.replication.publish import push_segments
from storage_node.roles.leader import PartitionLeader

pytestmark = pytest.mark.integration


def test_leader_merges_a_pushed_segment_keeping_gtids(cluster: Any, topic_prefix: str, tmp_path: Path) -> None:
    f = LeaderFixture(cluster.bootstrap_servers, topic_prefix, tmp_path / "new")
    # the old leader (placement 2) holds a segment of epoch 1 that the new leader never received
    old = PartitionReplica(f.table, f.partition_id, 2, tmp_path / "old")
    old.append(versioned_rows(rows(f.table, [500, 501], ["x", "y"]), Gtid(1, 7)), 0)
    pushed = old.flush(1)
    assert pushed is not None

    replica = PartitionReplica(f.table, f.partition_id, 1, tmp_path / "new")
    leader = PartitionLeader(
        replica, LeaderConfig(KafkaSettings(f.bootstrap), f.topics, f.flush), lambda: 2, peers=lambda: [2]
    )
    leader.start().wait_ready(60)
    try:
        n = push_segments(old, [pushed], kafka=KafkaSettings(f.bootstrap), topics=f.topics)
        assert n == 1
        assert push_segments(old, [pushed], kafka=KafkaSettings(f.bootstrap), topics=f.topics) == 0  # already there
        assert leader.merger is not None
        assert wait_until(lambda: leader.merger is not None and leader.merger.stats.merged == 1, 60)
        got = replica.scan(include_system=True)
        got = got.filter(pc.greater_equal(got.column("k"), 500))
        assert got.column("k").to_pylist() == [500, 501] and got.column("v").to_pylist() == ["x", "y"]
        assert got.column("_shoal_epoch").to_pylist() == [1, 1] and got.column("_shoal_seq").to_pylist() == [7, 8]
        chain = replica.chain
        assert pushed.segment_id not in chain  # merged, then deleted
        assert any(r.channel == (f.partition_id, 2) for r in chain.coverage())
        assert leader.stats.merged_segments == 1
    finally:
        leader.stop()
        replica.close()
        old.close()
