"""Kafka's own ConsumerGroupCommand reads shoal's Ack indexes as lag 0 on an idle, replicated table.

The leader writes its WAL and segments channels in transactions, so a commit marker follows the last
record; a follower acks the consumer's position past the markers once it is at the channel's end and
every delivered record is durable (DESIGN.md section 6). Kafka's ``kafka-consumer-groups`` then
shows the same lag as shoal (0) for every WAL and segments Ack group.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from node_it_support import in_process_nodes, make_table, produce_rows, rows

from metadata.client import MetadataClient, MetadataConfig
from shoal.jvm import jars
from shoal.jvm.java import java_executable
from shoal.kafka.indexes import channel_indexes
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames
from shoal_app.testing.wait import wait_until
from storage_node.node import StorageNode

pytestmark = pytest.mark.integration

NODES = ("node-1", "node-2", "node-3")


def kafka_group_lags(bootstrap: str, groups: list[str]) -> dict[tuple[str, str], int]:
    """``(group, topic) -> LAG`` from ``ConsumerGroupCommand --describe`` of the pinned Kafka jars."""
    cp = jars.classpath(jars.kafka_bundle(), jars.cache_dir_from(os.environ))
    argv = [java_executable(), "-cp", cp, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"]
    argv += ["--bootstrap-server", bootstrap, "--describe"]
    for g in groups:
        argv += ["--group", g]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
    lags: dict[tuple[str, str], int] = {}
    header: list[str] | None = None
    for line in out.splitlines():
        cols = line.split()
        if cols[:1] == ["GROUP"]:
            header = cols
        elif header is not None and len(cols) >= 6 and cols[0] in groups:
            row = dict(zip(header, cols, strict=False))
            lags[(row["GROUP"], row["TOPIC"])] = int(row["LAG"])
    return lags


def test_kafka_tools_show_lag_0_on_every_ack_group_of_an_idle_table(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    table = make_table(replication_factor=3)
    topics = TopicNames(topic_prefix)
    kafka = KafkaSettings(bs)
    with MetadataClient(meta) as client, in_process_nodes(meta, tmp_path, NODES) as nodes:
        pid = client.coordinator.create_table(table, list(NODES), []).partitions[0].partition_id

        def leader_placement(ns: dict[str, StorageNode]) -> int | None:
            for node in ns.values():
                held = node.partitions().get(pid)
                if held is not None and held.leader is not None and held.leader.ready.is_set():
                    return held.placement_id
            return None

        assert wait_until(lambda: leader_placement(nodes) is not None, 90)
        for batch in range(3):
            keys = list(range(batch * 25, batch * 25 + 25))
            produce_rows(bs, topics.ingest(pid), rows(table, keys, [f"v{k}" for k in keys]))
        leader = leader_placement(nodes)
        assert leader is not None
        followers = [h.placement_id for n in nodes.values() if (h := n.partitions()[pid]).placement_id != leader]
        groups = [topics.replica_group(pid, p) for p in followers]
        channels = (topics.wal(pid, leader), topics.segments(pid, leader))

        def shoal_lags() -> dict[tuple[str, str], int]:
            out = {}
            for topic in channels:
                idx = channel_indexes(kafka, topic, tuple(groups))
                for group, ack in idx.acks:
                    out[(group, topic)] = idx.append - (ack if ack is not None else idx.tail)
            return out

        def ingest_consumed() -> bool:
            # The leader may flush the first batch before it reads the next one: idle means every
            # produced batch was accepted (the leader group is at the ingest topic's end) as well.
            idx = channel_indexes(kafka, topics.ingest(pid), (topics.leader_group(pid),))
            return all(ack == idx.append for _, ack in idx.acks)

        def idle() -> bool:
            lead = next(n.partitions()[pid] for n in nodes.values() if n.partitions()[pid].placement_id == leader)
            return ingest_consumed() and lead.replica.memtable.rows == 0 and all(v == 0 for v in shoal_lags().values())

        assert wait_until(idle, 120), shoal_lags()
        ours = shoal_lags()
        theirs = kafka_group_lags(bs, groups)
        assert set(ours) <= set(theirs), (ours, theirs)
        assert {k: theirs[k] for k in ours} == ours, (ours, theirs)
