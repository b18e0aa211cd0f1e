"""The streaming sink fences its write-task attempts, on real Kafka, ZooKeeper and a storage node.

A task attempt that produced part of a batch and stalled (an executor Spark declared lost but still
running, a speculative copy) must never land its rows once the batch was re-run and later batches
committed: without the fence, its older value replaced the newer one and every replica agreed on
it. The sink's task code is driven directly (``ShoalStreamWriter.write_task``, what ``write`` runs
with Spark's task context), so the interleaving is exact; ``test_spark_sink.py`` runs it in Spark.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from spark_it_support import spark_cluster

from shoal.errors import ShoalError
from shoal_app.testing.wait import wait_until
from spark_jobs.commit_log import BatchCommitLog
from spark_jobs.settings import SinkSettings
from spark_jobs.sink import ShoalStreamWriter

pytestmark = pytest.mark.integration


def _rows(value: str, n: int, first: int = 1) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"k": k, "v": value, "n": i} for i, k in enumerate(range(first, first + n))],
        schema=pa.schema([("k", pa.uint64()), ("v", pa.string()), ("n", pa.int64())]),
    )


class StalledAttempt:
    """A write task attempt on its own thread: it produces its first rows (its transaction open),
    then stalls until :meth:`resume`; :attr:`outcome` is its commit message or what it raised."""

    def __init__(self, writer: ShoalStreamWriter, query: str, batch_id: int, partition_id: int, rows: pa.RecordBatch):
        self.produced, self._resume = threading.Event(), threading.Event()
        self.outcome: list[Any] = []

        def stalled() -> Iterator[pa.RecordBatch]:
            yield rows
            yield rows  # gathered() hands the first one to the producer before this
            self.produced.set()
            assert self._resume.wait(180)

        def attempt() -> None:
            try:
                self.outcome.append(writer.write_task(stalled(), query, batch_id, partition_id))
            except BaseException as exc:  # what the stalled attempt sees once it wakes
                self.outcome.append(exc)

        self.thread = threading.Thread(target=attempt, name=f"stalled-attempt-{batch_id}-{partition_id}")

    def start(self) -> StalledAttempt:
        self.thread.start()
        assert self.produced.wait(60)
        return self

    def resume(self) -> Any:
        """Let it go on; what it returned or raised."""
        self._resume.set()
        self.thread.join(120)
        assert not self.thread.is_alive()
        (result,) = self.outcome
        return result


def test_a_stalled_attempt_of_a_committed_batch_cannot_land_its_rows(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    with spark_cluster(cluster.bootstrap_servers, zk_hosts, topic_prefix, tmp_path) as sc:
        settings = SinkSettings(table=sc.table.name, connection=sc.meta, write_rows=1, sync_timeout_s=60)
        writer = ShoalStreamWriter(settings, sc.file)
        query = str(uuid.uuid4())

        def batch(batch_id: int, value: str) -> None:
            message = writer.write_task(iter([_rows(value, 5)]), query, batch_id, 0)
            assert (message.rows, message.partition_id) == (5, 0)
            writer.commit([message], batch_id)

        batch(0, "b0")
        # batch 1, attempt 0: fences, reads the log (batch 0 committed), produces its first rows in
        # its transaction, then stalls with more to write
        zombie = StalledAttempt(writer, query, 1, 0, _rows("zombie", 5)).start()
        # Spark re-runs the task (attempt 1 fences attempt 0), commits batch 1, then batch 2
        batch(1, "b1")
        batch(2, "b2")
        assert wait_until(lambda: {v for v, _n in sc.rows().values()} == {"b2"}, 60)
        result = zombie.resume()
        assert isinstance(result, ShoalError), result  # fenced: its transaction cannot commit
        with BatchCommitLog(sc.meta) as commits:
            assert commits.committed(query) == 2
        # the newest batch's values stay: nothing of the stalled attempt became readable
        writer.commit([writer.write_task(iter([_rows("b3", 1)]), query, 3, 0)], 3)
        rows = sc.rows()
        assert rows[1] == ("b3", 0) and {rows[k][0] for k in range(2, 6)} == {"b2"}, rows


def test_the_driver_fences_an_attempt_that_read_the_log_before_the_batch_was_recorded(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    """A speculative attempt of partition 1 starts after the attempt Spark keeps finished: it fences
    nobody, finds batch 0 not recorded yet and writes. Batch 1 has no partition 1 to fence it. The
    driver's fence before it records batch 0 stops it."""
    with spark_cluster(cluster.bootstrap_servers, zk_hosts, topic_prefix, tmp_path) as sc:
        settings = SinkSettings(table=sc.table.name, connection=sc.meta, write_rows=1, sync_timeout_s=60)
        writer = ShoalStreamWriter(settings, sc.file)
        query = str(uuid.uuid4())
        kept = writer.write_task(iter([_rows("b0", 5)]), query, 0, 1)
        speculative = StalledAttempt(writer, query, 0, 1, _rows("late", 5)).start()
        writer.commit([kept], 0)  # fences partition 1's id, then records batch 0
        writer.commit([writer.write_task(iter([_rows("b1", 5)]), query, 1, 0)], 1)
        assert wait_until(lambda: {v for v, _n in sc.rows().values()} == {"b1"}, 60), sc.rows()
        result = speculative.resume()
        assert isinstance(result, ShoalError), result
        writer.commit([writer.write_task(iter([_rows("b2", 1)]), query, 2, 0)], 2)
        rows = sc.rows()
        assert rows[1] == ("b2", 0) and {rows[k][0] for k in range(2, 6)} == {"b1"}, rows


def test_a_transaction_left_open_by_a_partition_the_restarted_query_lacks_is_aborted_at_commit(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    """A run with two partitions commits batch 0; its partition 1 then opens batch 1's transaction,
    produces, and the run dies. The restarted query has one partition: its batch 1 rows sit behind
    that open transaction on the same ingest topic (leaders read ``read_committed``) until Kafka
    aborts it (``transactionTimeout``, 600 s here). The driver's commit fences partition 1 too (the
    commit record kept the count), so the leaders accept batch 1 well within ``syncTimeout``."""
    with spark_cluster(cluster.bootstrap_servers, zk_hosts, topic_prefix, tmp_path) as sc:
        settings = SinkSettings(
            table=sc.table.name, connection=sc.meta, write_rows=1, sync_timeout_s=45, transaction_timeout_s=600
        )
        writer = ShoalStreamWriter(settings, sc.file)
        query = str(uuid.uuid4())
        writer.commit(
            [
                writer.write_task(iter([_rows("b0", 5)]), query, 0, 0),
                writer.write_task(iter([_rows("b0", 5, first=6)]), query, 0, 1),
            ],
            0,
        )
        orphan = StalledAttempt(writer, query, 1, 1, _rows("orphan", 5, first=6)).start()
        try:
            time.sleep(1)  # its first rows are in the ingest topic, inside the open transaction
            started = time.monotonic()
            # the restarted query: one partition, batch 1 again; its task returns without waiting
            message = writer.write_task(iter([_rows("b1", 5)]), query, 1, 0)
            assert message.written and message.producer_id
            writer.commit([message], 1)  # fences partitions 0 and 1, then waits for the leaders
            waited = time.monotonic() - started
            rows = sc.rows()
            assert {rows[k][0] for k in range(1, 6)} == {"b1"}, rows
            assert {rows[k][0] for k in range(6, 11)} == {"b0"}, rows
            assert waited < 45, waited
            with BatchCommitLog(sc.meta) as commits:
                assert (commits.committed(query), commits.partitions(query)) == (1, 2)
        finally:
            result = orphan.resume()
        assert isinstance(result, ShoalError), result  # fenced: nothing of it becomes readable
        writer.commit([writer.write_task(iter([_rows("b2", 1)]), query, 2, 0)], 2)
        rows = sc.rows()
        assert rows[1] == ("b2", 0) and {rows[k][0] for k in range(6, 11)} == {"b0"}, rows


def test_an_attempt_started_while_the_driver_waits_for_the_leaders_cannot_commit(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A speculative copy of batch 1's partition 0 starts while the driver waits for the leaders
    (after its first fence): it finds batch 1 not recorded and writes. Batch 2 writes the same keys
    from partition 1 and its task commits; the late copy then commits. Without the driver's second
    fence, after the wait, its older values land over batch 2's (an audit's proof)."""
    import spark_jobs.sink as sink_module

    with spark_cluster(cluster.bootstrap_servers, zk_hosts, topic_prefix, tmp_path) as sc:
        settings = SinkSettings(table=sc.table.name, connection=sc.meta, write_rows=1, sync_timeout_s=60)
        writer = ShoalStreamWriter(settings, sc.file)
        query = str(uuid.uuid4())
        writer.commit([writer.write_task(iter([_rows("b0", 5)]), query, 0, 0)], 0)
        kept = writer.write_task(iter([_rows("b1", 5)]), query, 1, 0)
        late = StalledAttempt(writer, query, 1, 0, _rows("late", 5))
        real = sink_module.await_tasks

        def waiting(*args: Any, **kwargs: Any) -> None:
            real(*args, **kwargs)
            late.start()  # the copy starts during the wait, after the driver's first fence

        monkeypatch.setattr(sink_module, "await_tasks", waiting)
        writer.commit([kept], 1)
        monkeypatch.setattr(sink_module, "await_tasks", real)
        newer = writer.write_task(iter([_rows("b2", 5)]), query, 2, 1)  # committed: the leaders take it
        result = late.resume()
        assert isinstance(result, ShoalError), result  # fenced by the second fence
        writer.commit([newer], 2)
        rows = sc.rows()
        assert {rows[k][0] for k in range(1, 6)} == {"b2"}, rows
