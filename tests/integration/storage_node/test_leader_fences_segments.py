"""A new leader fences the old leader's segments channel, not only its WAL channel (DESIGN.md section 7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from node_it_support import LeaderFixture

from shoal.errors import KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.admin import create_topic
from shoal.kafka.errors import ends_producer
from shoal.kafka.settings import KafkaSettings
from shoal.kafka.transaction import TransactionalChannel
from storage_node.config import LeaderConfig
from storage_node.replica import PartitionReplica
from storage_node.roles.leader import PartitionLeader

pytestmark = pytest.mark.integration


def test_a_new_leader_fences_the_old_leaders_segment_publisher(cluster: Any, topic_prefix: str, tmp_path: Path) -> None:
    bs = cluster.bootstrap_servers
    kafka = KafkaSettings(bs)
    fx = LeaderFixture(bs, topic_prefix, tmp_path)
    old_channel = fx.topics.segments(fx.partition_id, 2)
    create_topic(clients.admin(kafka), old_channel, policy=kafka.topics)
    # placement 2 led before and its segment publisher still runs (a paused or partitioned zombie)
    zombie = TransactionalChannel(kafka, old_channel, call_timeout_s=30).open()
    try:
        replica = PartitionReplica(fx.table, fx.partition_id, 1, tmp_path)
        config = LeaderConfig(kafka, fx.topics, fx.flush)
        leader = PartitionLeader(replica, config, lambda: 2, peers=lambda: (2,)).start()
        try:
            leader.wait_ready(90)
            with pytest.raises(KafkaOperationError) as raised, zombie.transaction() as txn:
                txn.produce(old_channel, b"manifest of a zombie", partition=0)
                txn.flush(10)
            assert ends_producer(raised.value), raised.value
        finally:
            leader.stop()
    finally:
        zombie.close()
