"""``shoal verify`` on real Kafka, ZooKeeper and a storage node: writes Kafka acknowledged that no
leader accepted (its node not running) are on no channel and in no replica; verify lists their
ingest topic and fails, where it passed as agreeing, and passes once the leader took them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from node_it_support import make_table, produce_rows, rows, run_node, stop_node

from metadata.client import MetadataClient, MetadataConfig
from shoal.topics import TopicNames
from shoal_app.cli.verify import verify
from shoal_app.testing.wait import wait_until

pytestmark = pytest.mark.integration


def test_acknowledged_writes_no_leader_accepted_fail_verify_until_it_does(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    table = make_table()
    topics = TopicNames(topic_prefix)
    with MetadataClient(meta) as client:
        pid = client.coordinator.create_table(table, ["node-1"], []).partitions[0].partition_id
        node = run_node(meta, "node-1", tmp_path)
        try:
            produce_rows(bs, topics.ingest(pid), rows(table, [1, 2], ["a", "b"]))
            assert wait_until(lambda: verify(client, "events").ok, 60), verify(client, "events")
        finally:
            stop_node(node)
        # acknowledged by Kafka (delivered, acks=all), while no leader runs
        produce_rows(bs, topics.ingest(pid), rows(table, [3], ["c"]))
        report = verify(client, "events")
        assert not report.ok
        (stuck,) = report.unaccepted
        assert stuck.topic == topics.ingest(pid) and stuck.error is None
        assert stuck.accepted_to is not None and stuck.last_unaccepted is not None
        assert stuck.accepted_to <= stuck.last_unaccepted
        node = run_node(meta, "node-1", tmp_path)
        try:
            assert wait_until(lambda: (r := verify(client, "events")).ok and not r.unaccepted, 90), verify(
                client, "events"
            )
        finally:
            stop_node(node)


def test_writes_behind_an_open_transaction_fail_verify_until_it_ends(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    """A transaction left open on an ingest topic (a killed Spark task's, until it is fenced or times
    out) holds back the writes acknowledged after it: the leader reads ``read_committed`` and cannot
    take them, the last stable offset stays at the open transaction, and the leader group is there.
    verify names the topic as held back (it passed as accepted) and passes once the transaction ends."""
    from confluent_kafka import Producer

    from shoal.wire.arrow_ipc import encode_batch
    from shoal.wire.ingest import TABLE_HEADER

    bs = cluster.bootstrap_servers
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    table = make_table()
    topics = TopicNames(topic_prefix)
    with MetadataClient(meta) as client:
        pid = client.coordinator.create_table(table, ["node-1"], []).partitions[0].partition_id
        node = run_node(meta, "node-1", tmp_path)
        txn = Producer({"bootstrap.servers": bs, "transactional.id": f"{topic_prefix}-it-open"})
        try:
            produce_rows(bs, topics.ingest(pid), rows(table, [1], ["a"]))
            assert wait_until(lambda: verify(client, "events").ok, 60), verify(client, "events")
            txn.init_transactions(30)
            txn.begin_transaction()
            txn.produce(
                topics.ingest(pid),
                encode_batch(rows(table, [2], ["b"])),
                partition=0,
                headers=[(TABLE_HEADER, b"events")],
            )
            assert txn.flush(30) == 0
            produce_rows(bs, topics.ingest(pid), rows(table, [3], ["c"]))  # acknowledged, behind it
            report = verify(client, "events")
            assert not report.ok
            (held,) = report.unaccepted
            assert held.topic == topics.ingest(pid) and held.error is None
            assert held.held_back_from is not None and held.high_water is not None
            assert held.held_back_from < held.high_water
            txn.abort_transaction(30)
            assert wait_until(lambda: (r := verify(client, "events")).ok and not r.unaccepted, 90), verify(
                client, "events"
            )
        finally:
            stop_node(node)
