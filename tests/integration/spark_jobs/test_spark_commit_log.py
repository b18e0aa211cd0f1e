"""The sink's committed-batch record in ZooKeeper: raised by CAS only, never lowered."""

from __future__ import annotations

import threading
import uuid

import pytest

from metadata.client import MetadataConfig
from spark_jobs.commit_log import BatchCommitLog
from spark_jobs.errors import SinkCommitError

pytestmark = pytest.mark.integration


def test_commits_only_move_forward_even_when_racing(zk_hosts: str, cluster: object) -> None:
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers="127.0.0.1:1")
    query = str(uuid.uuid4())
    with BatchCommitLog(meta) as log:
        assert log.committed(query) is None
        assert log.record(query, 3, table="t") and log.committed(query) == 3
        assert not log.record(query, 2, table="t") and not log.record(query, 3, table="t")
        assert log.committed(query) == 3

        def commit(n: int) -> None:
            with BatchCommitLog(meta) as other:
                other.record(query, n, table="t")

        threads = [threading.Thread(target=commit, args=(n,)) for n in range(4, 20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert log.committed(query) == 19
        with pytest.raises(SinkCommitError, match="UUID"):
            log.committed("../escape")
        log.zk.set(log.path(query), b"garbage")
        with pytest.raises(SinkCommitError, match="malformed"):
            log.committed(query)
        with pytest.raises(SinkCommitError, match="malformed"):
            log.partitions(query)


def test_the_partition_count_only_grows(zk_hosts: str, cluster: object) -> None:
    """Each commit fences the transactional ids of every partition a recorded batch of the query
    had: the count stays the largest any batch recorded (a run with fewer partitions keeps it, so a
    later, wider run's orphan is fenced after the next restart)."""
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers="127.0.0.1:1")
    query = str(uuid.uuid4())
    with BatchCommitLog(meta) as log:
        assert log.partitions(query) == 0
        log.record(query, 0, table="t", partitions=4)
        log.record(query, 1, table="t", partitions=2)
        assert (log.committed(query), log.partitions(query)) == (1, 4)
        assert not log.record(query, 1, table="t", partitions=9)  # not recorded: the count stays
        log.record(query, 2, table="t")  # a record without a count keeps it
        assert log.partitions(query) == 4
        log.zk.set(log.path(query), b'{"batch_id": 2, "table": "t"}')  # written before counts were kept
        assert log.partitions(query) == 0
        log.zk.set(log.path(query), b'{"batch_id": 2, "table": "t", "partitions": -1}')
        with pytest.raises(SinkCommitError, match="bad partition count"):
            log.partitions(query)
        with pytest.raises(SinkCommitError, match="partition count must be"):
            log.record(query, 3, table="t", partitions=True)


def test_a_write_task_skips_only_the_replay_of_the_last_batch(zk_hosts: str, cluster: object) -> None:
    """Below the committed batch, the checkpoint went back: skipping dropped the rows of a batch
    planned again over other offsets (and writing would put older values over newer ones), so it is
    an error; so is a record of another table (a checkpoint copied from another query)."""
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers="127.0.0.1:1")
    query = str(uuid.uuid4())
    with BatchCommitLog(meta) as log:
        assert log.check(query, 0, "t") is False  # never committed: write
        log.record(query, 5, table="t")
        assert log.check(query, 6, "t") is False  # the next batch: write
        assert log.check(query, 5, "t") is True  # the replay of the last one: skip
        with pytest.raises(SinkCommitError, match="batch 3 is below batch 5"):
            log.check(query, 3, "t")
        with pytest.raises(SinkCommitError, match="committed batches to table t, not u"):
            log.check(query, 6, "u")
