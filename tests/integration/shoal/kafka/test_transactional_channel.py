"""TransactionalChannel against the real broker: commit, abort, fencing and the call bound."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition

from shoal.errors import KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.admin import create_topic
from shoal.kafka.errors import ProducerFencedError, WedgedCallError
from shoal.kafka.indexes import log_bounds, stable_ends
from shoal.kafka.settings import KafkaSettings, TopicPolicy
from shoal.kafka.transaction import ChannelState, TransactionalChannel
from shoal_app.testing.cluster import TestCluster

pytestmark = pytest.mark.integration


def _read_committed(settings: KafkaSettings, topic: str, group: str, wait_s: float = 5.0) -> list[bytes]:
    consumer = clients.consumer(settings, group_id=group, **{"auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for msg in consumer.consume(100, timeout=0.5):
            if msg.error() is None:
                out.append(msg.value())
    consumer.close()
    return out


class _Boom(Exception):
    pass


def test_commit_visible_abort_invisible(cluster: TestCluster, kafka_admin, topic_prefix: str, group_id: str) -> None:
    settings = KafkaSettings(cluster.bootstrap_servers)
    topic = f"{topic_prefix}.chan"
    create_topic(kafka_admin, topic, policy=TopicPolicy())
    with TransactionalChannel(settings, f"{group_id}-txn", call_timeout_s=30) as channel:
        with channel.transaction() as txn:
            for i in range(3):
                txn.produce(topic, f"c{i}".encode(), partition=0)
        with pytest.raises(_Boom), channel.transaction() as txn:
            txn.produce(topic, b"aborted", partition=0)
            assert txn.flush(30) == 0  # in the log, then aborted
            raise _Boom
        assert channel.usable
        with channel.transaction() as txn:
            txn.produce(topic, b"after", partition=0)
    assert _read_committed(settings, topic, f"{group_id}-r") == [b"c0", b"c1", b"c2", b"after"]


def test_send_offsets_commits_the_group_offset(cluster: TestCluster, kafka_admin, topic_prefix, group_id) -> None:
    settings = KafkaSettings(cluster.bootstrap_servers)
    src, dst = f"{topic_prefix}.src", f"{topic_prefix}.dst"
    for t in (src, dst):
        create_topic(kafka_admin, t, policy=TopicPolicy())
    consumer = clients.consumer(settings, group_id=group_id)
    try:
        channel = TransactionalChannel(settings, f"{group_id}-txn", call_timeout_s=30)
        with channel, channel.transaction() as txn:
            txn.produce(dst, b"x", partition=0)
            txn.send_offsets([TopicPartition(src, 0, 7)], consumer.consumer_group_metadata())
        committed = consumer.committed([TopicPartition(src, 0)], timeout=10)[0].offset
    finally:
        consumer.close()
    assert committed == 7


def test_second_channel_fences_the_first(cluster: TestCluster, kafka_admin, topic_prefix, group_id) -> None:
    settings = KafkaSettings(cluster.bootstrap_servers)
    topic = f"{topic_prefix}.fence"
    create_topic(kafka_admin, topic, policy=TopicPolicy())
    old = TransactionalChannel(settings, f"{group_id}-txn", call_timeout_s=30).open()
    new = TransactionalChannel(settings, f"{group_id}-txn", call_timeout_s=30).open()
    try:
        with pytest.raises(ProducerFencedError) as info, old.transaction() as txn:
            txn.produce(topic, b"zombie", partition=0)
        assert info.value.kafka_error is not None
        assert old.state is ChannelState.FENCED and not old.usable
        with new.transaction() as txn:
            txn.produce(topic, b"owner", partition=0)
    finally:
        old.close()
        new.close()
    assert _read_committed(settings, topic, f"{group_id}-r") == [b"owner"]


def test_a_call_past_its_bound_abandons_the_channel(cluster: TestCluster, group_id: str) -> None:
    channel = TransactionalChannel(KafkaSettings(cluster.bootstrap_servers), f"{group_id}-txn", call_timeout_s=30)
    channel.open()
    try:
        started = time.monotonic()
        with pytest.raises(WedgedCallError):
            channel.call("sleeps", lambda: time.sleep(5), timeout_s=0.5)
        assert time.monotonic() - started < 3
        assert channel.abandoned and not channel.usable
        with pytest.raises(Exception, match="ABANDONED"):
            _ = channel.producer
        channel.open()  # a new producer (and helper thread) fences the abandoned one
        assert channel.usable
    finally:
        channel.close()


def _settled_end(kafka_admin, tp: tuple[str, int], wait_s: float = 30.0) -> int:
    """The log end once the last stable offset has reached it (every commit marker written)."""
    deadline = time.monotonic() + wait_s
    while True:
        end = log_bounds(kafka_admin, [tp])[tp][1]
        if stable_ends(kafka_admin, [tp]) == {tp: end} or time.monotonic() > deadline:
            return end
        time.sleep(0.05)


def test_the_last_stable_offset_waits_for_an_open_transaction(
    cluster: TestCluster, kafka_admin, topic_prefix: str, group_id: str
) -> None:
    """What the monitor reads to see a transaction holding readers back (``monitor.status.held_by_transaction``):
    the last stable offset stays at the open transaction's first offset until it commits."""
    settings = KafkaSettings(cluster.bootstrap_servers)
    topic = f"{topic_prefix}.lso"
    create_topic(kafka_admin, topic, policy=TopicPolicy())
    tp = (topic, 0)
    with TransactionalChannel(settings, f"{group_id}-txn", call_timeout_s=30) as channel:
        with channel.transaction() as txn:
            txn.produce(topic, b"first", partition=0)
        # The coordinator writes the commit marker after the commit returns: wait for it.
        committed_end = _settled_end(kafka_admin, tp)
        assert committed_end == 2  # the record and its commit marker
        with channel.transaction() as txn:
            for i in range(3):
                txn.produce(topic, f"open{i}".encode(), partition=0)
            assert txn.flush(30) == 0
            assert log_bounds(kafka_admin, [tp])[tp][1] == committed_end + 3
            assert stable_ends(kafka_admin, [tp]) == {tp: committed_end}
        assert _settled_end(kafka_admin, tp) == committed_end + 4
    with pytest.raises(KafkaOperationError):  # the monitor's poll goes on without the sample
        stable_ends(kafka_admin, [(f"{topic_prefix}.absent", 0)])
