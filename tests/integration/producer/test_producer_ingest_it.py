"""The producer against real Kafka + ZooKeeper: routing, no loss or duplicates, bad rows, splits, sync."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from producer_it_support import commit_as_leader, create, events_table, make_store, read_topic, topic_exists

from metadata.coordinator import MetadataCoordinator
from metadata.keyspace import Keyspace
from metadata.metadata_file import PartitionEntry
from producer import Producer, ProducerConfig, RowValidationError, SyncPolicy, SyncTimeoutError
from shoal.kafka.settings import ConnectionSettings
from shoal.topics import TopicNames
from shoal.wire.ingest import DELETED_COLUMN
from shoal_app.cli.write import write_command
from shoal_app.schemas import validate


def _no_rows_acked(entry: PartitionEntry) -> dict[int, tuple[int, int] | None]:
    """SPLIT_FINALIZE evidence for a parent that accepted no row: every child placement, nothing to ack."""
    return {p.placement_id: None for p in entry.split_servers_low + entry.split_servers_high}


pytestmark = pytest.mark.integration
U = Keyspace.UINT64.encode


@pytest.fixture
def coord(cluster: Any, zk: Any, topic_prefix: str) -> Iterator[MetadataCoordinator]:
    with make_store(cluster, topic_prefix) as store:
        yield MetadataCoordinator(zk, store)


def _config(cluster: Any, zk_hosts: str, prefix: str, **kw: Any) -> ProducerConfig:
    return ProducerConfig(ConnectionSettings.plain(cluster.bootstrap_servers, zk_hosts, topic_prefix=prefix), **kw)


def _keys_by_partition(cluster: Any, file: Any, prefix: str, group: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for entry in file.partitions:
        messages = read_topic(cluster.bootstrap_servers, TopicNames(prefix).ingest(entry.partition_id), group)
        assert all(header == b"events" for _, header in messages)
        assert all(not any(t.column(DELETED_COLUMN).to_pylist()) for t, _ in messages)
        out[entry.partition_id] = [k for t, _ in messages for k in t.column("k").to_pylist()]
    return out


def test_rows_reach_the_partition_that_owns_them(
    cluster: Any, zk_hosts: str, coord: MetadataCoordinator, topic_prefix: str, group_id: str
) -> None:
    file = create(coord, events_table(), [U(1000), U(2**63)])
    rnd = random.Random(3)
    keys = list({rnd.randrange(0, 2**64) for _ in range(3000)} | {0, 999, 1000, 2**63 - 1, 2**63, 2**64 - 1})
    reports: list[Any] = []
    with Producer(
        _config(cluster, zk_hosts, topic_prefix, max_message_bytes=20_000, max_row_bytes=8000, max_value_bytes=4000),
        on_delivery=reports.append,
    ) as p:
        result = p.write("events", [{"k": k, "v": f"v{k}", "n": i} for i, k in enumerate(keys)])
        assert sum(r.rows for r in result.wait(30)) == len(keys)
    assert sum(r.rows for r in reports) == len(keys) and all(r.ok for r in reports)
    assert len(reports) > 3  # the 20 kB message bound split the batches
    got = _keys_by_partition(cluster, file, topic_prefix, group_id)
    for i, (entry, krange) in enumerate(file.ranges()):
        assert got[entry.partition_id], f"partition {i} got nothing"
        assert all(krange.contains(U(k)) for k in got[entry.partition_id])
    flat = [k for ks in got.values() for k in ks]
    assert sorted(flat) == sorted(keys)  # nothing lost, nothing duplicated


def test_invalid_rows_send_nothing_and_deletes_are_tombstones(
    cluster: Any, zk_hosts: str, coord: MetadataCoordinator, topic_prefix: str, group_id: str, kafka_admin: Any
) -> None:
    file = create(coord, events_table(), [U(1000)])
    topics = TopicNames(topic_prefix)
    with Producer(_config(cluster, zk_hosts, topic_prefix)) as p:
        with pytest.raises(RowValidationError) as info:
            p.write("events", [{"k": 1, "v": "a"}, {"k": 2000, "v": "b"}, {"k": 3, "n": "x"}])
        assert (info.value.row, info.value.column) == (2, "n")
        p.flush(10)
        assert not any(topic_exists(kafka_admin, topics.ingest(e.partition_id)) for e in file.partitions)
        p.delete("events", [5, 5000])
    for entry in file.partitions:
        messages = read_topic(cluster.bootstrap_servers, topics.ingest(entry.partition_id), group_id)
        assert len(messages) == 1
        assert messages[0][0].column(DELETED_COLUMN).to_pylist() == [True]
        assert messages[0][0].column("v").to_pylist() == [None]


def test_split_routes_new_writes_to_children_and_sync(
    cluster: Any, zk_hosts: str, coord: MetadataCoordinator, topic_prefix: str, group_id: str
) -> None:
    file = create(coord, events_table(), [U(1000)])
    high = file.partitions[1].partition_id
    topics = TopicNames(topic_prefix)
    policy = SyncPolicy(initial_interval_s=0.05, max_interval_s=0.2)
    with Producer(_config(cluster, zk_hosts, topic_prefix, sync_policy=policy)) as p:
        p.write("events", [{"k": 5}, {"k": 1500}, {"k": 2500}])
        p.flush(30)
        started = time.monotonic()
        with pytest.raises(SyncTimeoutError, match="not accepted by their leader") as info:
            p.sync(timeout=1.5)
        assert 1.0 <= time.monotonic() - started < 10
        assert set(info.value.lagging) == {topics.ingest(e.partition_id) for e in file.partitions}
        for entry in file.partitions:  # play the leaders: consume and commit in the leader groups
            commit_as_leader(
                cluster.bootstrap_servers, topics.leader_group(entry.partition_id), topics.ingest(entry.partition_id)
            )
        p.sync(timeout=30)

        coord.split("events", high, U(2000), ["node-1"], ["node-1"])
        final = coord.finalize_split("events", high, acked=_no_rows_acked(coord.current("events").partition(high)))
        deadline = time.monotonic() + 20
        while p.partition_map("events").sequence < final.sequence and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.partition_map("events").sequence == final.sequence  # the watcher swapped the map in
        p.write("events", [{"k": 1500}, {"k": 2500}, {"k": 7}])
    low_child, high_child = final.partitions[1].partition_id, final.partitions[2].partition_id
    assert [
        t.column("k").to_pylist() for t, _ in read_topic(cluster.bootstrap_servers, topics.ingest(low_child), group_id)
    ] == [[1500]]
    assert [
        t.column("k").to_pylist() for t, _ in read_topic(cluster.bootstrap_servers, topics.ingest(high_child), group_id)
    ] == [[2500]]
    parent = read_topic(cluster.bootstrap_servers, topics.ingest(high), group_id)
    assert [t.column("k").to_pylist() for t, _ in parent] == [[1500, 2500]]  # only the write from before the split


def test_shoal_write_cli(
    cluster: Any, zk_hosts: str, coord: MetadataCoordinator, topic_prefix: str, group_id: str, kafka_admin: Any
) -> None:
    file = create(coord, events_table(), [U(1000)])
    topics = TopicNames(topic_prefix)
    conn = ["--zk", zk_hosts, "--bootstrap-servers", cluster.bootstrap_servers, "--topic-prefix", topic_prefix]
    runner = CliRunner()
    bad = '{"k": 1, "v": "a"}\n\n{"k": 2, "v": 7}\n'
    res = runner.invoke(write_command, ["events", "-", *conn], input=bad)
    assert res.exit_code != 0 and "line 3, column 'v'" in res.output and "nothing was sent" in res.output
    res = runner.invoke(write_command, ["events", "-", *conn], input='{"k": 1}\nnot json\n')
    assert res.exit_code != 0 and "line 2: not valid JSON" in res.output
    assert not any(topic_exists(kafka_admin, topics.ingest(e.partition_id)) for e in file.partitions)
    good = "".join(json.dumps({"k": k, "v": str(k)}) + "\n" for k in (1, 2, 1001))
    res = runner.invoke(write_command, ["events", "-", "--output", "json", *conn], input=good)
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    validate("cli-write", report)
    assert report["rows"] == 3 and report["batches"] == 2
    assert all(d["error"] is None and d["offset"] == 0 for d in report["deliveries"])
    got = {
        e.partition_id: read_topic(cluster.bootstrap_servers, topics.ingest(e.partition_id), group_id)
        for e in file.partitions
    }
    assert [t.column("k").to_pylist() for t, _ in got[file.partitions[0].partition_id]] == [[1, 2]]
    assert [t.column("k").to_pylist() for t, _ in got[file.partitions[1].partition_id]] == [[1001]]


def test_the_sink_finds_rows_a_split_parent_has_not_forwarded(
    cluster: Any, zk_hosts: str, coord: MetadataCoordinator, topic_prefix: str
) -> None:
    """The Spark sink's commit waits for a split parent's unforwarded records before it records a
    batch routed by a newer map (``spark_jobs.sink.retired_backlog``): read from the real METADATA
    history, the parent's ingest topic (a transaction's marker after its last record) and the
    parent's leader group."""
    from metadata.client import MetadataConfig
    from shoal.kafka.settings import KafkaSettings
    from shoal.kafka.transaction import TransactionalChannel
    from spark_jobs.settings import SinkSettings
    from spark_jobs.sink import retired_backlog

    file = create(coord, events_table(), [U(1000)])
    high = file.partitions[1].partition_id
    topics = TopicNames(topic_prefix)
    connection = ConnectionSettings.plain(cluster.bootstrap_servers, zk_hosts, topic_prefix=topic_prefix)
    settings = SinkSettings(table="events", connection=MetadataConfig(connection=connection))
    assert retired_backlog(settings, 30) == {}  # no split yet
    channel = TransactionalChannel(KafkaSettings(cluster.bootstrap_servers), f"{topic_prefix}-sink-test")
    channel.open()
    try:
        with (
            Producer(_config(cluster, zk_hosts, topic_prefix), kafka_producer=channel.producer) as p,
            channel.transaction(),
        ):
            p.write("events", [{"k": 1500, "v": "old"}])
            p.flush(30)
            written = p.written()
    finally:
        channel.close()
    parent = topics.ingest(high)
    assert written[parent][0] == high
    split = coord.split("events", high, U(2000), ["node-1"], ["node-1"])
    final = coord.finalize_split("events", high, acked=_no_rows_acked(coord.current("events").partition(high)))
    assert retired_backlog(settings, 30) == {parent: (high, written[parent][1])}
    # a batch last recorded with a map from before the split waits for it; one from after does not
    assert retired_backlog(settings, 30, since=split.sequence) == {parent: (high, written[parent][1])}
    assert retired_backlog(settings, 30, since=final.sequence) == {}
    commit_as_leader(cluster.bootstrap_servers, topics.leader_group(high), parent)  # the forwarder took it
    assert retired_backlog(settings, 30) == {}
