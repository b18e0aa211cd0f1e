"""The streaming sink's commit outlasts leaders that accept late, on real Kafka, ZooKeeper and a node.

Spark retries a failed write task, never a failed commit: a commit that gave up after one
``syncTimeout`` while a partition's leader was down (a node and a broker restarting) stopped the
query. The commit tries again, bounded by ``commitTimeout``, and fails (recording nothing) only once
that has passed. The write tasks are driven directly (``ShoalStreamWriter.write_task``) so the
leader can be absent while they write.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from spark_it_support import spark_cluster, start_node, wait_for_leaders

from spark_jobs.commit_log import BatchCommitLog
from spark_jobs.errors import SinkCommitError
from spark_jobs.settings import SinkSettings
from spark_jobs.sink import ShoalStreamWriter
from storage_node.config import FlushPolicy

pytestmark = pytest.mark.integration


def _rows(value: str, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"k": k, "v": value, "n": k} for k in range(1, n + 1)],
        schema=pa.schema([("k", pa.uint64()), ("v", pa.string()), ("n", pa.int64())]),
    )


def test_a_commit_waits_across_sync_timeouts_for_a_leader_that_starts_late(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    with spark_cluster(cluster.bootstrap_servers, zk_hosts, topic_prefix, tmp_path, start=False) as sc:
        query = str(uuid.uuid4())
        # one try of the wait is 2 s: alone it fails, as the whole commit did before it retried
        once = ShoalStreamWriter(SinkSettings(sc.table.name, sc.meta, sync_timeout_s=2, commit_timeout_s=2), sc.file)
        message = once.write_task(iter([_rows("b0", 5)]), query, 0, 0)
        with pytest.raises(SinkCommitError) as refused:
            once.commit([message], 0)
        assert refused.value.retriable
        with BatchCommitLog(sc.meta) as commits:
            assert commits.committed(query) is None  # nothing recorded

        patient = ShoalStreamWriter(
            SinkSettings(sc.table.name, sc.meta, sync_timeout_s=2, commit_timeout_s=120), sc.file
        )
        outcome: list[BaseException | None] = []

        def commit() -> None:
            try:
                patient.commit([message], 0)
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        started = time.monotonic()
        thread = threading.Thread(target=commit, name="sink-commit")
        thread.start()
        time.sleep(7)  # several 2 s tries fail: no leader runs yet
        assert thread.is_alive() and not outcome
        sc.nodes["node-1"] = start_node(sc.meta, "node-1", tmp_path, FlushPolicy(max_rows=100_000, max_age_s=1.0))
        wait_for_leaders(sc)
        thread.join(120)
        assert not thread.is_alive()
        assert outcome == [None], outcome
        assert time.monotonic() - started > 7
        with BatchCommitLog(sc.meta) as commits:
            assert commits.committed(query) == 0
        rows = sc.rows()
        assert {k: v for k, (v, _) in rows.items()} == {k: "b0" for k in range(1, 6)}, rows
