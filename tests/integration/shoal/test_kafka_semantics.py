"""The Kafka behaviours shoal relies on, against the real broker."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from shoal.kafka.admin import create_topic, log_start_and_end
from shoal.kafka.settings import KafkaSettings, TopicPolicy
from shoal_app.testing.cluster import TestCluster

pytestmark = pytest.mark.integration


def _consume_all(bootstrap: str, topic: str, group: str, isolation: str, expect: int, wait_s: float = 20) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for msg in consumer.consume(100, timeout=0.5):
            if msg.error() is None:
                out.append(msg.value())
        if len(out) >= expect:
            # one more short poll so an extra (wrongly visible) record would show up
            out += [m.value() for m in consumer.consume(100, timeout=1.0) if m.error() is None]
            break
    consumer.close()
    return out


def test_transaction_with_offsets_commit_and_abort(cluster: TestCluster, kafka_admin, topic_prefix, group_id) -> None:
    src, dst = f"{topic_prefix}.src", f"{topic_prefix}.dst"
    for t in (src, dst):
        create_topic(kafka_admin, t, policy=TopicPolicy())
    plain = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True})
    for i in range(10):
        plain.produce(src, value=f"in-{i}".encode())
    assert plain.flush(30) == 0

    # The consume-transform-produce loop that shoal's leader runs: read src, write dst, commit src offsets.
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group_id,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(src, 0, 0)])
    txp = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": f"{group_id}-txn"})
    txp.init_transactions(30)

    def transform(n: int) -> list:
        msgs = []
        while len(msgs) < n:
            msgs += [m for m in consumer.consume(n - len(msgs), timeout=1.0) if m.error() is None]
        return msgs

    # Transaction 1 (commit): records 0-4 and their offsets.
    batch = transform(5)
    txp.begin_transaction()
    for m in batch:
        txp.produce(dst, value=b"out-" + m.value())
    txp.send_offsets_to_transaction(
        [TopicPartition(src, 0, batch[-1].offset() + 1)], consumer.consumer_group_metadata(), 30
    )
    txp.commit_transaction(30)

    # Transaction 2 (abort): records 5-9; neither their output nor their offsets may become visible.
    batch = transform(5)
    txp.begin_transaction()
    for m in batch:
        txp.produce(dst, value=b"out-" + m.value())
    txp.send_offsets_to_transaction(
        [TopicPartition(src, 0, batch[-1].offset() + 1)], consumer.consumer_group_metadata(), 30
    )
    # abort_transaction purges what is still queued in the producer, so without this flush 0 to 5 of
    # the aborted records reach the log; delivered first, all 5 are in it, behind an abort marker.
    assert txp.flush(30) == 0
    txp.abort_transaction(30)
    consumer.close()

    committed = _consume_all(cluster.bootstrap_servers, dst, f"{group_id}-rc", "read_committed", expect=5)
    assert committed == [f"out-in-{i}".encode() for i in range(5)]
    uncommitted = _consume_all(cluster.bootstrap_servers, dst, f"{group_id}-ru", "read_uncommitted", expect=10)
    # the aborted records are in the log, just never visible to read_committed
    assert sorted(uncommitted) == sorted([f"out-in-{i}".encode() for i in range(10)])

    # Committed offsets read back: only the committed transaction's offsets count.
    reader = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group_id})
    try:
        [tp] = reader.committed([TopicPartition(src, 0)], timeout=10)
    finally:
        reader.close()
    assert tp.offset == 5


def test_fenced_zombie_producer_commits_nothing(cluster: TestCluster, kafka_admin, topic_prefix, group_id) -> None:
    topic = f"{topic_prefix}.wal"
    create_topic(kafka_admin, topic, policy=TopicPolicy())
    conf = {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": f"{group_id}-channel"}
    old = Producer(conf)
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, value=b"from-old-leader")
    new = Producer(conf)
    new.init_transactions(30)  # the new leader of the same channel fences the old one
    with pytest.raises(KafkaException):
        old.commit_transaction(30)
    new.begin_transaction()
    new.produce(topic, value=b"from-new-leader")
    new.commit_transaction(30)
    assert _consume_all(cluster.bootstrap_servers, topic, group_id, "read_committed", 1) == [b"from-new-leader"]


def test_delete_records_moves_the_log_start_offset(cluster: TestCluster, kafka_admin, topic_prefix) -> None:
    topic = f"{topic_prefix}.trunc"
    create_topic(kafka_admin, topic, policy=TopicPolicy())
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(20):
        p.produce(topic, value=str(i).encode())
    assert p.flush(30) == 0
    assert log_start_and_end(KafkaSettings(cluster.bootstrap_servers), topic) == (0, 20)

    futures = kafka_admin.delete_records([TopicPartition(topic, 0, 12)], request_timeout=30, operation_timeout=30)
    [result] = [f.result(30) for f in futures.values()]
    assert result.low_watermark == 12
    assert log_start_and_end(KafkaSettings(cluster.bootstrap_servers), topic) == (12, 20)


def test_a_channel_read_that_the_tail_overtakes_is_an_error_not_a_jump_to_the_end(
    cluster: TestCluster, kafka_admin, topic_prefix
) -> None:
    """A reader's position below the log start (delete_records under the read): with librdkafka's
    default ``auto.offset.reset`` the consumer would jump to the end and the read would end early in
    silence; channel readers (``READ_CONFIG``) get ``_AUTO_OFFSET_RESET`` and raise ChannelTruncatedError."""
    from confluent_kafka import KafkaError

    from shoal.kafka import clients
    from shoal.kafka.errors import ChannelTruncatedError
    from shoal.kafka.readers import READ_CONFIG, read_to_end

    topic = f"{topic_prefix}.overtaken"
    create_topic(kafka_admin, topic, policy=TopicPolicy())
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(20):
        p.produce(topic, value=str(i).encode())
    assert p.flush(30) == 0
    futures = kafka_admin.delete_records([TopicPartition(topic, 0, 12)], request_timeout=30, operation_timeout=30)
    assert [f.result(30).low_watermark for f in futures.values()] == [12]
    settings = KafkaSettings(cluster.bootstrap_servers)
    consumer = clients.consumer(settings, group_id="shoal-test-overtaken", **READ_CONFIG)
    try:
        consumer.assign([TopicPartition(topic, 0, 3)])  # where a read was when the Tail moved to 12
        msg = None
        deadline = time.monotonic() + 30
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        assert msg is not None and msg.error() is not None, msg and msg.value()
        assert msg.error().code() == KafkaError._AUTO_OFFSET_RESET, msg.error()
    finally:
        consumer.close()

    # read_to_end turns that error into ChannelTruncatedError (its own start is clamped to the log start)
    reads = read_to_end(settings, topic, 0, what="channel", group_id="shoal-test-overtaken")
    assert [int(m.value()) for m in reads] == list(range(12, 20))
    import shoal.kafka.readers as readers

    real = clients.consumer

    def below_the_log_start(*args, **kwargs):  # the Tail moved between the watermark read and the assign
        c = real(*args, **kwargs)
        assign = c.assign
        return _Assigning(c, lambda parts: assign([TopicPartition(t.topic, 0, 3) for t in parts]))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(readers.clients, "consumer", below_the_log_start)
        with pytest.raises(ChannelTruncatedError) as err:
            list(read_to_end(settings, topic, 0, what="channel", group_id="shoal-test-overtaken"))
    assert err.value.topic == topic and err.value.offset == 12


class _Assigning:
    """A consumer whose ``assign`` is replaced (confluent-kafka's Consumer is a C type: no attribute set)."""

    def __init__(self, consumer, assign) -> None:
        self._consumer, self.assign = consumer, assign

    def __getattr__(self, name):
        return getattr(self._consumer, name)


def test_committed_offsets_read_back_through_admin(cluster: TestCluster, kafka_admin, topic_prefix, group_id) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions

    topic = f"{topic_prefix}.acks"
    create_topic(kafka_admin, topic, policy=TopicPolicy())
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(7):
        p.produce(topic, value=str(i).encode())
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group_id, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    c.close()
    futures = kafka_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)])
    res = futures[group_id].result(30)
    offsets = {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}
    assert offsets == {(topic, 0): 4}


def test_channel_indexes_closes_the_consumers_of_the_admin_client_it_made(
    cluster: TestCluster, kafka_admin, topic_prefix, group_id, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-call admin client ends with its offset readers closed (never left to the garbage collector,
    which destroys them on whichever thread drops them); a caller's own admin client keeps them."""
    from shoal.kafka import clients, indexes

    topic = f"{topic_prefix}.indexes"
    create_topic(kafka_admin, topic, policy=TopicPolicy())
    settings = KafkaSettings(cluster.bootstrap_servers)
    made = []
    real_admin = clients.admin

    def admin(s: KafkaSettings):  # type: ignore[no-untyped-def]
        made.append(real_admin(s))
        return made[-1]

    monkeypatch.setattr(clients, "admin", admin)
    idx = indexes.channel_indexes(settings, topic, (group_id,), timeout_s=10)
    assert (idx.tail, idx.append, idx.ack(group_id)) == (0, 0, None)
    assert len(made) == 1 and made[0].shoal_offset_readers == {}

    own = real_admin(settings)
    indexes.channel_indexes(settings, topic, (group_id,), timeout_s=10, admin=own)
    assert len(own.shoal_offset_readers) == 1
    indexes.close_offset_readers(own)
    assert own.shoal_offset_readers == {}


def test_committed_offsets_of_many_groups_at_once_and_without_waiting_for_an_open_transaction(
    cluster: TestCluster, kafka_admin, topic_prefix, group_id, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More groups than readers kept and than concurrent reads: each group gets its own offset and no
    reader is closed while another thread uses it. A group whose offsets a transaction holds pending
    reads as its last committed offset with ``stable=False`` at once; ``stable=True`` waits for it."""
    from shoal.errors import KafkaOperationError
    from shoal.kafka import clients, indexes

    topic = f"{topic_prefix}.many"
    create_topic(kafka_admin, topic, policy=TopicPolicy())
    settings = KafkaSettings(cluster.bootstrap_servers)
    groups = [f"{group_id}-{i}" for i in range(indexes.MAX_CONCURRENT_READS + 4)]
    for i, g in enumerate(groups):
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": g, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
        c.close()
    monkeypatch.setattr(indexes, "MAX_OFFSET_READERS", 5)
    admin = clients.admin(settings)
    try:
        for _ in range(2):  # the second round reuses and evicts readers
            got = indexes.committed_offsets(admin, {g: [(topic, 0)] for g in groups}, timeout_s=30, stable=False)
            assert got == {g: {(topic, 0): i + 1} for i, g in enumerate(groups)}
        assert len(admin.shoal_offset_readers) <= indexes.MAX_CONCURRENT_READS + 5
        assert not admin.shoal_offset_readers_in_use

        # A transaction holds offset 40 of groups[0] (committed: 1) pending.
        txn = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": f"{group_id}-txn"})
        txn.init_transactions(30)
        txn.begin_transaction()
        member = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": groups[0]})
        txn.send_offsets_to_transaction([TopicPartition(topic, 0, 40)], member.consumer_group_metadata(), 30)
        began = time.monotonic()
        pending = indexes.committed_offsets(admin, {groups[0]: [(topic, 0)]}, timeout_s=30, stable=False)
        assert pending == {groups[0]: {(topic, 0): 1}} and time.monotonic() - began < 10
        with pytest.raises(KafkaOperationError):
            indexes.committed_offsets(admin, {groups[0]: [(topic, 0)]}, timeout_s=2, stable=True)
        txn.commit_transaction(30)
        member.close()
        done = indexes.committed_offsets(admin, {groups[0]: [(topic, 0)]}, timeout_s=30, stable=True)
        assert done == {groups[0]: {(topic, 0): 40}}
    finally:
        indexes.close_offset_readers(admin)
