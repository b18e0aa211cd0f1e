"""A streaming batch replayed with a newer partition map than its failed first attempt (DESIGN.md
sections 8 and 9): the first attempt's rows may still wait on the split parent's ingest topic for
its forwarder. The replay is recorded only once they are forwarded; recorded earlier, the next
batch's newer values were accepted first and the forwarded older copy won (an audit's proof).

Real code: ``ShoalStreamWriter.write_task``/``commit``, ``BatchCommitLog``, the producer's routing
and ``await_accepted``. Faked: Kafka (a transactional producer and topics), ZooKeeper (a dict), the
fences, and the cluster: a leader accepts its ingest topic in order, stamping increasing GTIDs; a
parent's forwarder moves its records to the child when it runs."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

import producer.producer as producer_module
import spark_jobs.commit_log as commit_log_module
from metadata.metadata_file import ChangeType, MetadataFile
from shoal.ids import new_partition_id
from shoal.topics import TopicNames
from spark_jobs import sink
from spark_jobs.errors import SinkCommitError
from spark_jobs.settings import SinkSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "producer"))
from producer_unit_support import make_file

QUERY = "0f0e0d0c-0b0a-0908-0706-050403020100"


class Cluster:
    def __init__(self) -> None:
        self.topics: dict[str, list[pa.Table]] = {}
        self.committed: dict[str, int] = {}  # leader group offset per ingest topic
        self.gtid = 0
        self.rows: dict[int, tuple[int, str]] = {}
        self.forwarding: dict[str, str] = {}  # parent topic -> child topic
        self.forwarder_up = False
        self.down: set[str] = set()  # parent topics whose forwarder is down while forwarder_up
        self.backlog_reads = 0

    def append(self, topic: str, table: pa.Table) -> int:
        self.topics.setdefault(topic, []).append(table)
        return len(self.topics[topic]) - 1

    def step(self) -> None:
        for topic in list(self.topics):
            records = self.topics[topic]
            start = self.committed.get(topic, 0)
            if topic in self.forwarding:
                if self.forwarder_up and topic not in self.down:
                    for t in records[start:]:
                        self.append(self.forwarding[topic], t)
                    self.committed[topic] = len(records)
                continue
            for t in records[start:]:
                for k, v in zip(t.column("k").to_pylist(), t.column("v").to_pylist(), strict=True):
                    self.gtid += 1
                    self.rows[k] = (self.gtid, v)
            self.committed[topic] = len(records)

    def backlog(self, _settings: Any, _timeout_s: float, *, since: int | None = None) -> dict[str, tuple[str, int]]:
        """retired_backlog on this cluster: the parents' records not forwarded yet."""
        self.backlog_reads += 1
        out = {}
        for topic in self.forwarding:
            n = len(self.topics.get(topic, []))
            if self.committed.get(topic, 0) < n:
                out[topic] = (topic.rsplit(".", 1)[1], n - 1)
        return out


class _Delivered:
    def __init__(self, topic: str, offset: int) -> None:
        self._topic, self._offset = topic, offset

    def topic(self) -> str:
        return self._topic

    def offset(self) -> int:
        return self._offset


class _Channel:
    """A task's transaction: its records become readable at commit."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.producer = self
        self.buffer: list[tuple[str, pa.Table, Any]] = []
        self.pending: list[tuple[str, pa.Table]] = []

    def open(self) -> _Channel:
        return self

    def close(self) -> None:
        pass

    def produce(self, topic: str, value: bytes, headers: Any = None, on_delivery: Any = None) -> None:
        self.buffer.append((topic, pa.ipc.open_stream(io.BytesIO(value)).read_all(), on_delivery))

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def flush(self, _timeout: float = -1) -> int:
        for topic, table, callback in self.buffer:
            offset = len(self.cluster.topics.get(topic, [])) + sum(1 for t, _ in self.pending if t == topic)
            self.pending.append((topic, table))
            callback(None, _Delivered(topic, offset))
        self.buffer = []
        return 0

    @contextlib.contextmanager
    def transaction(self) -> Any:
        yield self
        self.flush()
        for topic, table in self.pending:
            self.cluster.append(topic, table)
        self.pending = []


class _Zk:
    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}

    def get(self, path: str) -> tuple[bytes, Any]:
        if path not in self.nodes:
            raise NoNodeError(path)
        data, version = self.nodes[path]
        return data, type("Stat", (), {"version": version})()

    def create(self, path: str, data: bytes, acl: Any = None) -> None:
        if path in self.nodes:
            raise NodeExistsError(path)
        self.nodes[path] = (data, 0)

    def set(self, path: str, data: bytes, version: int) -> None:
        if self.nodes[path][1] != version:
            raise BadVersionError(path)
        self.nodes[path] = (data, version + 1)

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def fake_cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    c = Cluster()
    zk = _Zk()
    monkeypatch.setattr(sink, "_channel", lambda _settings, _txn_id: _Channel(c))
    monkeypatch.setattr(sink, "fence_all", lambda *_a, **_k: None)
    monkeypatch.setattr(sink, "BatchCommitLog", lambda config: commit_log_module.BatchCommitLog(config, zk=zk))
    monkeypatch.setattr(sink, "retired_backlog", c.backlog, raising=False)
    monkeypatch.setattr(commit_log_module, "ensure_path", lambda *_a, **_k: None)
    monkeypatch.setattr(sink.time, "sleep", lambda _s: None)
    monkeypatch.setattr(producer_module.Producer, "_ensure_topic", lambda _self, _topic: None)
    monkeypatch.setattr(producer_module.Producer, "_start_refusals", lambda _self: None)

    def committed(_self: Any, _group: str, topic: str) -> int | None:
        c.step()
        return c.committed.get(topic)

    monkeypatch.setattr(producer_module.Producer, "_committed", committed)
    return c


SETTINGS = SinkSettings.from_options(
    {
        "table": "events",
        "zk": "127.0.0.1:1",
        "bootstrapServers": "127.0.0.1:1",
        "syncTimeout": "0.3",
        "commitTimeout": "0.3",
    }
)


def _rows(k: int, v: str) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "k": pa.array([k], pa.int64()),
            "ts": pa.array([1_700_000_000_000_000], pa.timestamp("us", tz="UTC")),
            "v": [v],
            "n": pa.array([1], pa.int32()),
            "b": pa.array([b"x"]),
            "score": [1.0],
        }
    )


def _batch(writer: sink.ShoalStreamWriter, batch_id: int, k: int, v: str) -> None:
    writer.commit([writer.write_task(iter([_rows(k, v)]), QUERY, batch_id, 0)], batch_id)


def _split(before: MetadataFile) -> MetadataFile:
    """The METADATA after the parent's SPLIT_FINALIZE (one child stands for both here)."""
    child = dataclasses.replace(before.partitions[0], partition_id=new_partition_id())
    return before.derive([child], ChangeType.FINALIZE_SPLIT, "split")


def test_a_replay_routed_by_a_newer_map_waits_for_the_parents_queued_rows(fake_cluster: Cluster) -> None:
    before = make_file()
    after = _split(before)
    topics = TopicNames(SETTINGS.connection.topic_prefix)
    parent, child = topics.ingest(before.partitions[0].partition_id), topics.ingest(after.partitions[0].partition_id)
    run1 = sink.ShoalStreamWriter(SETTINGS, before)
    _batch(run1, 4, 2, "x")  # recorded with the old map: the parent's leader took it
    assert fake_cluster.rows[2][1] == "x"
    fake_cluster.forwarding = {parent: child}  # the parent split; its forwarder is down
    with pytest.raises(SinkCommitError):  # batch 5's rows wait on the parent's topic: the query stops
        _batch(run1, 5, 1, "old")
    run2 = sink.ShoalStreamWriter(SETTINGS, after)  # restarted, planned with the new map
    with pytest.raises(SinkCommitError):  # the replay goes to the child, but the parent's copy waits
        _batch(run2, 5, 1, "old")
    fake_cluster.forwarder_up = True
    _batch(run2, 5, 1, "old")  # recorded once the parent's copy was forwarded, ahead of batch 6
    _batch(run2, 6, 1, "new")
    fake_cluster.step()
    assert fake_cluster.rows[1][1] == "new"


def test_batches_routed_by_the_recorded_map_do_not_read_the_parents(fake_cluster: Cluster) -> None:
    writer = sink.ShoalStreamWriter(SETTINGS, make_file())
    _batch(writer, 0, 1, "a")  # the query's first record: read once
    _batch(writer, 1, 1, "b")
    _batch(writer, 2, 1, "c")
    assert fake_cluster.backlog_reads == 1 and fake_cluster.rows[1][1] == "c"


def test_a_replay_waits_until_the_parents_rows_passed_a_child_that_split_too(fake_cluster: Cluster) -> None:
    """The parent's forwarder moved the first attempt's rows to a child that split too: they wait on
    that child's topic for its own forwarder, and the next batch goes to the grandchild directly."""
    before = make_file()
    middle = _split(before)
    after = _split(middle)
    topics = TopicNames(SETTINGS.connection.topic_prefix)
    parent, child, grandchild = (topics.ingest(f.partitions[0].partition_id) for f in (before, middle, after))
    run1 = sink.ShoalStreamWriter(SETTINGS, before)
    _batch(run1, 4, 2, "x")
    fake_cluster.forwarding = {parent: child, child: grandchild}
    fake_cluster.forwarder_up, fake_cluster.down = True, {parent, child}
    with pytest.raises(SinkCommitError):
        _batch(run1, 5, 1, "old")
    run2 = sink.ShoalStreamWriter(SETTINGS, after)
    fake_cluster.down = {child}  # the parent's copy moves to the child's topic, and waits there
    with pytest.raises(SinkCommitError):
        _batch(run2, 5, 1, "old")
    fake_cluster.down = set()
    _batch(run2, 5, 1, "old")
    _batch(run2, 6, 1, "new")
    fake_cluster.step()
    assert fake_cluster.rows[1][1] == "new"
