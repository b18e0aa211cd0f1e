from __future__ import annotations

from typing import Any

import pytest
from producer_unit_support import FakeKafka, FakeRefusals, make_file

from metadata.keyspace import Keyspace
from producer import (
    DeliveryError,
    MessagesRefusedError,
    Producer,
    ProducerConfig,
    Refusal,
    RowValidationError,
    SyncPolicy,
    SyncTimeoutError,
)
from shoal.kafka.settings import ConnectionSettings
from shoal.topics import TopicNames
from shoal.wire.arrow_ipc import decode_batch
from shoal.wire.ingest import DELETED_COLUMN, PRODUCER_HEADER, TABLE_HEADER
from shoal.worker import Worker, WorkerState

U = Keyspace.UINT64.encode


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _producer(kafka: FakeKafka, clock: FakeClock | None = None, **kwargs: Any) -> tuple[Producer, Any]:
    file = make_file(Keyspace.UINT64, (U(100), U(200)))
    policy = SyncPolicy() if clock is None else SyncPolicy(0.1, 1.0, 2.0, clock=clock.clock, sleep=clock.sleep)
    config = ProducerConfig(
        ConnectionSettings.plain("kafka:9092", "zk:2181", topic_prefix="p"), create_topics=False, sync_policy=policy
    )
    kwargs.setdefault("refusals", FakeRefusals())
    return Producer(config, map_loader=lambda _t: file, kafka_producer=kafka, **kwargs), file


def test_write_routes_batches_and_reports() -> None:
    kafka = FakeKafka()
    reports: list[Any] = []
    producer, file = _producer(kafka, on_delivery=reports.append)
    with producer:
        result = producer.write("events", [{"k": k, "ts": 1} for k in (5, 150, 250, 99, 100)])
        assert result.rows == 5 and result.batches == 3
    assert sorted(r.rows for r in reports) == [1, 2, 2] and all(r.ok for r in reports)
    topics = TopicNames("p")
    by_topic = {m["topic"]: decode_batch(m["value"]) for m in kafka.messages}
    ids = [e.partition_id for e in file.partitions]
    assert by_topic[topics.ingest(ids[0])].column("k").to_pylist() == [5, 99]
    assert by_topic[topics.ingest(ids[1])].column("k").to_pylist() == [150, 100]
    assert by_topic[topics.ingest(ids[2])].column("k").to_pylist() == [250]
    assert all(
        m["headers"] == [(TABLE_HEADER, b"events"), (PRODUCER_HEADER, producer.producer_id.encode())]
        for m in kafka.messages
    )
    assert [f.result().offset for f in result.futures] == [0, 0, 0]


def test_invalid_rows_send_nothing() -> None:
    kafka = FakeKafka()
    producer, _ = _producer(kafka)
    with producer, pytest.raises(RowValidationError) as info:
        producer.write("events", [{"k": 1, "ts": 1}, {"k": 300, "ts": 1}, {"k": 2, "ts": 1, "nope": 1}])
    assert (info.value.row, info.value.column) == (2, "nope")
    assert kafka.messages == []


def test_delete_sends_tombstones() -> None:
    kafka = FakeKafka()
    producer, _ = _producer(kafka)
    with producer:
        producer.delete("events", [{"k": 1, "ts": 1}])
        producer.delete("events", [(250, 2)])
    tables = [decode_batch(m["value"]) for m in kafka.messages]
    assert sorted(k for t in tables for k in t.column("k").to_pylist()) == [1, 250]
    assert all(t.column(DELETED_COLUMN).to_pylist() == [True] for t in tables)


def test_flush_raises_on_failed_delivery_and_invalidates_map() -> None:
    kafka = FakeKafka()
    producer, file = _producer(kafka)
    kafka.fail[TopicNames("p").ingest(file.partitions[2].partition_id)] = "UNKNOWN_TOPIC_OR_PART"
    result = producer.write("events", [{"k": 1, "ts": 1}, {"k": 300, "ts": 1}])
    with pytest.raises(DeliveryError, match="1 batch") as info:
        producer.flush(5)
    assert len(info.value.reports) == 1 and getattr(info.value.reports[0], "rows", None) == 1
    with pytest.raises(DeliveryError):
        result.wait(1)
    producer.flush(5)  # failures are reported once
    producer.close()


def test_sync_polls_until_leaders_commit_and_times_out() -> None:
    kafka = FakeKafka()
    clock = FakeClock()
    committed: dict[tuple[str, str], int] = {}
    calls: list[tuple[str, str]] = []

    def reader(group: str, topic: str) -> int | None:
        calls.append((group, topic))
        return committed.get((group, topic))

    producer, file = _producer(kafka, clock, offsets_reader=reader)
    producer.write("events", [{"k": 1, "ts": 1}, {"k": 2, "ts": 1}])
    producer.write("events", [{"k": 3, "ts": 1}])  # second message on the same topic: offset 1
    topics = TopicNames("p")
    pid = file.partitions[0].partition_id
    with pytest.raises(SyncTimeoutError, match="not accepted by their leader") as info:
        producer.sync(timeout=3)
    assert info.value.lagging == {topics.ingest(pid): (None, 1)}
    assert clock.sleeps[:4] == [0.1, 0.2, 0.4, 0.8] and max(clock.sleeps) <= 1.0
    assert calls[0] == (topics.leader_group(pid), topics.ingest(pid))
    committed[(topics.leader_group(pid), topics.ingest(pid))] = 1  # only the first message accepted
    with pytest.raises(SyncTimeoutError):
        producer.sync(timeout=1)
    committed[(topics.leader_group(pid), topics.ingest(pid))] = 2
    producer.sync(timeout=1)
    producer.close()


def test_sync_raises_for_refused_messages_once_after_acceptance() -> None:
    """A refused message moves the leader group's committed offset too: sync() reads the refusals after
    the acceptance and raises naming them; the next sync() does not report them again."""
    kafka = FakeKafka()
    refusals = FakeRefusals()
    producer, file = _producer(kafka, offsets_reader=lambda _g, _t: 5, refusals=refusals)
    assert refusals.starts == 0  # nothing noted before the first message
    producer.write("events", [{"k": 1, "ts": 1}])
    producer.write("events", [{"k": 2, "ts": 1}])
    assert refusals.starts == 1  # noted once, before the first message
    topic = TopicNames("p").ingest(file.partitions[0].partition_id)
    refusals.pending = [Refusal("events", file.partitions[0].partition_id, topic, 1, "oversized", "too big")]
    with pytest.raises(MessagesRefusedError) as info:
        producer.sync(timeout=1)
    assert [(r.topic, r.offset, r.reason) for r in info.value.refusals] == [(topic, 1, "oversized")]
    assert "oversized" in str(info.value) and f"{topic}@1" in str(info.value)
    producer.sync(timeout=1)
    assert refusals.reads == 2
    producer.close()
    assert refusals.closed


def test_refusal_checks_can_be_turned_off() -> None:
    kafka = FakeKafka()
    refusals = FakeRefusals()
    file = make_file(Keyspace.UINT64)
    config = ProducerConfig(
        ConnectionSettings.plain("kafka:9092", "zk:2181", topic_prefix="p"), create_topics=False, check_refusals=False
    )
    producer = Producer(
        config, map_loader=lambda _t: file, kafka_producer=kafka, offsets_reader=lambda _g, _t: 5, refusals=refusals
    )
    with producer:
        producer.write("events", [{"k": 1, "ts": 1}])
        refusals.pending = [Refusal("events", "x", "t", 0, "oversized", "")]
        producer.sync(timeout=1)
    assert (refusals.starts, refusals.reads) == (0, 0)


def test_closed_producer_refuses() -> None:
    producer, _ = _producer(FakeKafka())
    producer.close()
    with pytest.raises(Exception, match="closed"):
        producer.write("events", [{"k": 1, "ts": 1}])


def test_config_refuses_weaker_delivery() -> None:
    with pytest.raises(Exception, match="idempotent"):
        ProducerConfig(ConnectionSettings.plain("k:1", "z:1"), kafka_config={"acks": "1"})
    cfg = ProducerConfig(ConnectionSettings.plain("k:1", "z:1"), kafka_config={"linger.ms": 50})
    assert cfg.kafka_producer_config()["enable.idempotence"] is True
    assert cfg.kafka_producer_config()["acks"] == "all" and cfg.kafka_producer_config()["linger.ms"] == 50
    env = {"SHOAL_ZK_CONNECT": "zz:1", "SHOAL_BOOTSTRAP_SERVERS": "bb:2", "SHOAL_TOPIC_PREFIX": "x"}
    cfg = ProducerConfig.from_env(env, topic_prefix="y")
    assert (cfg.zk_hosts, cfg.bootstrap_servers, cfg.topic_prefix) == ("zz:1", "bb:2", "y")


def test_poll_thread_is_a_worker_stopped_by_close() -> None:
    producer, _ = _producer(FakeKafka())
    assert producer.kafka is not None
    poller = producer._poller
    assert isinstance(poller, Worker) and poller.alive and poller.name == "shoal-producer-poll"
    producer.close()
    assert not poller.alive and poller.state is WorkerState.STOPPED


def test_sync_keeps_polling_through_a_failed_offset_read() -> None:
    """A broker restart makes an offset read time out: sync asks again until its deadline instead of failing."""
    from confluent_kafka import KafkaError

    from shoal.errors import KafkaOperationError

    kafka = FakeKafka()
    clock = FakeClock()
    answers: list[int | Exception | None] = [
        KafkaOperationError("timed out", KafkaError(KafkaError._TIMED_OUT, retriable=True)),
        None,
        1,
    ]

    def reader(group: str, topic: str) -> int | None:
        answer = answers.pop(0) if answers else 1
        if isinstance(answer, Exception):
            raise answer
        return answer

    producer, _ = _producer(kafka, clock, offsets_reader=reader)
    producer.write("events", [{"k": 1, "ts": 1}])
    producer.sync(timeout=5)
    assert answers == []

    answers[:] = [KafkaOperationError("timed out", KafkaError(KafkaError._TIMED_OUT, retriable=True))] * 50
    producer.write("events", [{"k": 2, "ts": 1}])
    with pytest.raises(SyncTimeoutError, match="last offset read failed: timed out"):
        producer.sync(timeout=2)
    fatal = KafkaOperationError("fatal", KafkaError(KafkaError._FATAL, fatal=True))
    answers[:] = [fatal]
    with pytest.raises(KafkaOperationError) as raised:
        producer.sync(timeout=2)
    assert raised.value is fatal
    producer.close()


def test_concurrent_syncs_share_an_offset_read() -> None:
    """A read sent after a round began answers that round too: concurrent sync() calls do not each ask Kafka."""
    import time

    calls: list[str] = []

    def reader(group: str, topic: str) -> int | None:
        calls.append(topic)
        return len(calls)

    producer, _ = _producer(FakeKafka(), FakeClock(), offsets_reader=reader)
    before = time.monotonic()
    assert producer._committed_since("g", "t", before) == 1
    assert producer._committed_since("g", "t", before) == 1  # sent after ``before``: shared
    assert producer._committed_since("g", "t", time.monotonic()) == 2  # a later round asks again
    assert producer._committed_since("g", "u", before) == 3 and calls == ["t", "t", "u"]
    producer.close()


def test_sync_needs_no_request_for_a_partition_already_seen_past_its_offset() -> None:
    kafka = FakeKafka()
    calls: list[str] = []

    def reader(group: str, topic: str) -> int | None:
        calls.append(topic)
        return 5

    producer, _ = _producer(kafka, FakeClock(), offsets_reader=reader)
    producer.write("events", [{"k": 1, "ts": 1}])
    producer.sync(timeout=1)
    producer.sync(timeout=1)  # offset 0 was seen accepted (committed 5): no second read
    assert len(calls) == 1
    producer.close()


def _splitting_producer(kafka: FakeKafka, clock: FakeClock, current: list[Any], committed: dict[str, int]) -> Producer:
    """A producer routing by ``current[0]``, whose leader groups committed ``committed``."""
    config = ProducerConfig(
        ConnectionSettings.plain("kafka:9092", "zk:2181", topic_prefix="p"),
        create_topics=False,
        sync_policy=SyncPolicy(0.1, 1.0, 2.0, clock=clock.clock, sleep=clock.sleep),
        split_drain_timeout_s=5,
    )
    return Producer(
        config,
        map_loader=lambda _t: current[0],
        kafka_producer=kafka,
        offsets_reader=lambda _group, topic: committed.get(topic),
        refusals=FakeRefusals(),
    )


def test_a_write_after_a_split_waits_until_the_earlier_writes_to_the_parent_are_accepted() -> None:
    """Per-producer order across a split: the child must receive the forwarded old write before the
    new one, or the older write is accepted after it with a higher GTID and wins."""
    from metadata.metadata_file import Placement
    from metadata.operations import FinalizeSplit, SplitPartition, apply_change

    kafka, clock = FakeKafka(), FakeClock()
    topics = TopicNames("p")
    committed: dict[str, int] = {}
    before = make_file(Keyspace.UINT64, (U(100), U(200)))
    parent = before.partitions[0].partition_id
    splitting = apply_change(
        before, SplitPartition(parent, U(50), (Placement("node-1", 7),), (Placement("node-1", 8),))
    )
    after = apply_change(splitting, FinalizeSplit(parent, through=(1, 0), acked={7: (1, 0), 8: (1, 0)}))
    current = [before]
    producer = _splitting_producer(kafka, clock, current, committed)
    with producer:
        producer.write("events", [{"k": 7, "ts": 1, "v": "old"}, {"k": 250, "ts": 1, "v": "x"}])
        current[0] = after
        producer.refresh("events")
        sent = len(kafka.messages)
        # the parent's write is not accepted (nor is the other partition's, which does not matter):
        # nothing of the new write is sent
        with pytest.raises(SyncTimeoutError) as info:
            producer.write("events", [{"k": 7, "ts": 1, "v": "new"}])
        assert set(info.value.lagging) == {topics.ingest(parent)}
        assert len(kafka.messages) == sent
        committed[topics.ingest(parent)] = 1  # the forwarder committed the parent's leader group
        producer.write("events", [{"k": 7, "ts": 1, "v": "new"}])
        low = after.partitions[0].partition_id
        assert kafka.messages[-1]["topic"] == topics.ingest(low)
        waited = len(clock.sleeps)
        producer.write("events", [{"k": 8, "ts": 1}])  # once accepted, later writes do not wait
        assert len(clock.sleeps) == waited


def test_a_delivery_failure_before_a_split_is_reported_by_the_next_sync_not_by_the_next_write() -> None:
    """A write's split drain (waiting for the earlier writes to the parent) raised an earlier
    write's DeliveryError out of the NEXT write() and cleared it: a caller sending that write again
    ("not written") then got success from sync() for the lost earlier write (an audit's proof)."""
    kafka = FakeKafka()
    before = make_file(Keyspace.UINT64)
    after = make_file(Keyspace.UINT64, (U(100),))  # the only partition split: not listed any more
    parent_topic = TopicNames("p").ingest(before.partitions[0].partition_id)
    kafka.fail[parent_topic] = "_MSG_TIMED_OUT"
    current, committed = [before], {}
    config = ProducerConfig(
        ConnectionSettings.plain("kafka:9092", "zk:2181", topic_prefix="p"), create_topics=False, watch_metadata=False
    )
    producer = Producer(
        config,
        map_loader=lambda _t: current[0],
        kafka_producer=kafka,
        offsets_reader=lambda _g, topic: committed.get(topic),
        refusals=FakeRefusals(),
    )
    with producer:
        lost = producer.write("events", [{"k": 5, "ts": 1, "v": "lost"}])
        kafka.poll(0)  # the delivery failure is reported (the poller thread does this)
        assert lost.futures[0].exception() is not None
        current[0] = after
        producer.refresh("events")
        producer.write("events", [{"k": 7, "ts": 1, "v": "next"}])  # its own rows were sent
        committed.update({m["topic"]: 10**6 for m in kafka.messages if m["topic"] != parent_topic})
        with pytest.raises(DeliveryError) as info:
            producer.sync(timeout=5)
        assert [r.topic for r in info.value.reports] == [parent_topic]  # type: ignore[attr-defined]
        producer.sync(timeout=5)  # reported once


def test_a_message_kafka_refuses_mid_write_is_not_waited_for_and_the_error_names_what_was_sent() -> None:
    """produce() raising on the second message of a write: the first is on its way (sync waits for
    it and the error carries its future), the refused one is forgotten, so the producer still syncs."""
    from confluent_kafka import KafkaError, KafkaException

    from producer import SendError

    class Refusing(FakeKafka):
        def __init__(self) -> None:
            super().__init__()
            self.refuse_at = 2

        def produce(self, topic: str, value: bytes, headers: Any = None, on_delivery: Any = None) -> None:
            self.refuse_at -= 1
            if self.refuse_at == 0:
                raise KafkaException(KafkaError(KafkaError._FATAL, "fenced by a fatal error", fatal=True))
            super().produce(topic, value, headers, on_delivery)

    kafka = Refusing()
    producer, _ = _producer(kafka, clock=FakeClock(), offsets_reader=lambda group, topic: 1)
    with producer:
        with pytest.raises(SendError) as info:
            producer.write("events", [{"k": k, "ts": 1} for k in (5, 150, 250)])
        err = info.value
        assert (err.rows_sent, err.rows_unsent, len(err.futures)) == (1, 2, 1)
        assert err.fatal and err.kafka_error is not None and err.table == "events"
        assert "1 rows were sent" in str(err)
        producer.sync(5)  # waits for the sent message only; before, it waited for the refused one forever
        assert err.futures[0].result().ok  # type: ignore[attr-defined]
        assert len(kafka.messages) == 1


def test_await_accepted_waits_for_offsets_other_producers_wrote() -> None:
    """The Spark sink's driver waits once for what its write tasks produced (``written()`` of each)."""
    kafka = FakeKafka()
    clock = FakeClock()
    committed: dict[str, int] = {}
    writer, file = _producer(kafka, clock, offsets_reader=lambda _g, topic: committed.get(topic))
    writer.write("events", [{"k": 1, "ts": 1}, {"k": 150, "ts": 1}])
    writer.flush(5)
    written = writer.written()
    assert len(written) == 2
    waiter, _ = _producer(FakeKafka(), clock, offsets_reader=lambda _g, topic: committed.get(topic))
    with pytest.raises(SyncTimeoutError) as info:
        waiter.await_accepted(written, timeout=2)
    assert set(info.value.lagging) == set(written)
    first = sorted(written)[0]
    committed[first] = written[first][1] + 1
    with pytest.raises(SyncTimeoutError) as info:
        waiter.await_accepted(written, timeout=2)
    assert set(info.value.lagging) == set(written) - {first}
    for topic, (_pid, last) in written.items():
        committed[topic] = last + 1
    waiter.await_accepted(written, timeout=2)
    topics = TopicNames("p")
    pid = file.partitions[0].partition_id
    with pytest.raises(ValueError, match="not the ingest topic"):
        waiter.await_accepted({topics.ingest(pid): (file.partitions[1].partition_id, 0)})
    with pytest.raises(ValueError, match="not an offset"):
        waiter.await_accepted({topics.ingest(pid): (pid, -1)})
    assert not kafka.messages[0:0] and not waiter.written()  # it sent nothing itself
    writer.close()
    waiter.close()


def test_closing_over_a_fenced_transactional_producer_does_not_hide_the_error() -> None:
    """A fenced transactional producer raises its fatal error from every later call: the Spark
    sink's task closed its producer in a ``finally``, and that raw KafkaException replaced the
    classified fencing error the task was raising (seen in CI)."""
    from confluent_kafka import KafkaError, KafkaException

    class _Fenced(FakeKafka):
        def flush(self, timeout: float = -1) -> int:
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))

    producer, _ = _producer(_Fenced())
    producer.close()  # no raise: nothing can be delivered, and the caller's own error stands


def test_a_write_after_two_splits_waits_until_the_child_that_split_too_forwarded_the_earlier_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parent's forwarder moved the earlier write to a child that split too: accepted by the
    parent's group, it still waits on that child's topic for the child's forwarder, which would put
    it behind the new write sent to the grandchild directly (the older value winning)."""
    import producer.producer as producer_module
    from metadata.metadata_file import Placement
    from metadata.operations import FinalizeSplit, SplitPartition, apply_change

    kafka, clock = FakeKafka(), FakeClock()
    topics = TopicNames("p")
    committed: dict[str, int] = {}
    before = make_file(Keyspace.UINT64, (U(100), U(200)))
    parent = before.partitions[0].partition_id
    split1 = apply_change(before, SplitPartition(parent, U(50), (Placement("node-1", 7),), (Placement("node-1", 8),)))
    after1 = apply_change(split1, FinalizeSplit(parent, through=(1, 0), acked={7: (1, 0), 8: (1, 0)}))
    child = after1.partitions[1].partition_id  # [50, 100)
    split2 = apply_change(after1, SplitPartition(child, U(75), (Placement("node-1", 9),), (Placement("node-1", 10),)))
    after2 = apply_change(split2, FinalizeSplit(child, through=(1, 0), acked={9: (1, 0), 10: (1, 0)}))
    grandchild = after2.partitions[2].partition_id  # [75, 100)
    current = [before]
    producer = _splitting_producer(kafka, clock, current, committed)
    asked: list[set[str]] = []

    def unaccepted(_kafka: Any, _admin: Any, names: TopicNames, pids: Any, _timeout: float) -> dict[str, Any]:
        asked.append(set(pids))  # the child's topic holds the forwarded write at offset 0
        return {names.ingest(p): (p, 0) for p in pids if p == child and committed.get(names.ingest(p)) is None}

    monkeypatch.setattr(producer_module, "unaccepted_ends", unaccepted)
    monkeypatch.setattr(producer_module.Producer, "admin", property(lambda _self: None))
    monkeypatch.setattr(producer, "_history", lambda _t: [before, split1, after1, split2, after2])
    with producer:
        producer.write("events", [{"k": 80, "ts": 1, "v": "old"}])
        current[0] = after2
        producer.refresh("events")
        committed[topics.ingest(parent)] = 1  # the parent's forwarder moved it to the child's topic
        sent = len(kafka.messages)
        with pytest.raises(SyncTimeoutError) as info:
            producer.write("events", [{"k": 80, "ts": 1, "v": "new"}])
        assert set(info.value.lagging) == {topics.ingest(child)} and len(kafka.messages) == sent
        assert asked == [{child}]  # the grandchildren are listed: not asked
        committed[topics.ingest(child)] = 1  # the child's forwarder moved it to the grandchild's topic
        producer.write("events", [{"k": 80, "ts": 1, "v": "new"}])
        assert kafka.messages[-1]["topic"] == topics.ingest(grandchild)


def test_a_sync_tells_the_refusal_check_since_when_writes_are_unchecked() -> None:
    """Deadletter records deleted by retention can hold this producer's refusals only if a write
    no check covered is older than what the topic keeps: the check is told that write's time, or
    None when every write was checked (an idle producer's next sync)."""
    import time

    refusals = FakeRefusals()
    producer, _ = _producer(FakeKafka(), FakeClock(), offsets_reader=lambda _g, _t: 10**6, refusals=refusals)
    with producer:
        before = time.time()
        producer.write("events", [{"k": 1, "ts": 1}])
        producer.sync(timeout=1)
        producer.sync(timeout=1)  # nothing written since the first check
        [first, second] = refusals.unchecked
        assert first is not None and before <= first <= time.time() and second is None


def test_a_check_completing_during_a_write_leaves_that_write_unchecked() -> None:
    """A sync() on another thread, begun and ended while a write() was between its first and its
    last message, marked every write checked: a refusal of the later message, deleted by the
    deadletter topic's retention before the next sync(), then passed as success."""
    import time

    class Checking(FakeKafka):
        def produce(self, topic: str, value: bytes, headers: Any = None, on_delivery: Any = None) -> None:
            super().produce(topic, value, headers, on_delivery)
            if len(self.messages) == 1:
                producer._checked(time.time())  # another thread's sync, done before the next message

    producer, _ = _producer(Checking(), FakeClock(), offsets_reader=lambda _g, _t: 10**6)
    with producer:
        producer.write("events", [{"k": k, "ts": 1} for k in (5, 150, 250)])  # three partitions
        assert producer._unchecked_since is not None
