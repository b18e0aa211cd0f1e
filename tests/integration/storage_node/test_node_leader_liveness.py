"""Liveness of a partition's leadership on three real in-process storage nodes.

A leader role that ends FAILED during start-up resigns the election, so another replica (or the same
node, campaigning again) leads; transient Kafka errors during start-up (NOT_LEADER_FOR_PARTITION on a
topic created a moment before) are retried with backoff instead of ending the role. Either way the
partition has a leader that accepts writes within a bound.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from node_it_support import in_process_nodes, make_table, produce_rows, rows

import storage_node.roles.leader.role as leader_role
from metadata.client import MetadataClient, MetadataConfig
from shoal.errors import KafkaOperationError
from shoal.topics import TopicNames
from shoal_app.testing.wait import wait_until
from storage_node.node import HeldPartition, StorageNode

pytestmark = pytest.mark.integration

NODES = ("node-1", "node-2", "node-3")
BOUND_S = 60.0
"""A leader accepting writes must exist within this after the faults (election + recovery + retries)."""


def _working_leader(nodes: dict[str, StorageNode], pid: str) -> HeldPartition | None:
    for node in nodes.values():
        held = node.partitions().get(pid)
        leader = held.leader if held is not None else None
        if leader is not None and leader.ready.is_set() and not leader.stopped.is_set():
            return held
    return None


def test_a_leader_failed_at_start_up_resigns_and_transient_errors_are_retried(
    cluster: Any,
    zk_hosts: str,
    topic_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first leader's replay fails for good (not retriable): it must resign. The next two replays
    hit NOT_LEADER_FOR_PARTITION (retriable): they are retried in the role. Then writes are accepted.

    The failed role is seen in the log, not by polling its state: the node replaces a FAILED role
    within milliseconds, faster than a poll can be sure to see it."""
    real = leader_role.replay_wal
    calls: list[str] = []

    def flaky_replay(replica: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(replica.name)
        if len(calls) == 1:
            raise KafkaOperationError("injected: the WAL channel is unreadable")
        if len(calls) <= 3:
            err = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "injected", retriable=True)
            raise KafkaOperationError("injected: cannot read the offsets of the WAL channel", err)
        return real(replica, *args, **kwargs)

    def failed_roles() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "shoal.worker" and "injected" in r.getMessage()]

    caplog.set_level(logging.ERROR, logger="shoal.worker")
    monkeypatch.setattr(leader_role, "replay_wal", flaky_replay)
    bs = cluster.bootstrap_servers
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    table = make_table(replication_factor=3)
    topics = TopicNames(topic_prefix)
    with MetadataClient(meta) as client, in_process_nodes(meta, tmp_path, NODES) as nodes:
        pid = client.coordinator.create_table(table, list(NODES), []).partitions[0].partition_id
        assert wait_until(lambda: len(calls) >= 4 and _working_leader(nodes, pid) is not None, BOUND_S), calls
        held = _working_leader(nodes, pid)
        assert held is not None and held.leader is not None and held.election is not None
        # one role failed (the permanent error); the two retriable errors were retried inside a role
        assert len(failed_roles()) == 1 and "the WAL channel is unreadable" in failed_roles()[0], failed_roles()
        assert held.election.check_writable().epoch >= 2, "the failed leader never resigned"

        produce_rows(bs, topics.ingest(pid), rows(table, list(range(10)), [f"v{k}" for k in range(10)]))

        def accepted() -> bool:
            lead = _working_leader(nodes, pid)
            return lead is not None and lead.replica.scan().num_rows == 10

        assert wait_until(accepted, BOUND_S)
