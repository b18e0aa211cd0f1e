"""Topic and group names are derived only from validated parts."""

from __future__ import annotations

import pytest

from shoal.errors import ConfigError, InvalidIdError
from shoal.topics import TopicNames

PID = "0123456789abcdef0123456789abcdef"


def test_every_name_carries_the_prefix_and_ids() -> None:
    t = TopicNames("acme")
    assert t.ingest(PID) == f"acme.ingest.{PID}"
    assert t.wal(PID, 7) == f"acme.wal.{PID}.7"
    assert t.segments(PID, 7) == f"acme.segments.{PID}.7"
    assert t.replica_group(PID, 7) == f"acme.replica.{PID}.7"
    assert t.consume_group(PID, 7) == f"acme.consume.{PID}.7"
    assert t.compaction(PID) == f"acme.compaction.{PID}"
    assert t.spark_group("ingest_1") == "acme.spark.ingest_1"


@pytest.mark.parametrize("prefix", ["", "a..b", "a/b", "x" * 101, "a b"])
def test_bad_prefix_is_refused(prefix: str) -> None:
    with pytest.raises(ConfigError):
        TopicNames(prefix)


@pytest.mark.parametrize("name", ["", "a.b", "../x", "q" * 101, "a b"])
def test_bad_query_name_is_refused(name: str) -> None:
    with pytest.raises(ConfigError):
        TopicNames().spark_group(name)


@pytest.mark.parametrize("pid", ["", "../etc", "ABC", "0" * 31])
def test_hostile_partition_id_is_refused(pid: str) -> None:
    with pytest.raises((InvalidIdError, ConfigError)):
        TopicNames().wal(pid, 1)
