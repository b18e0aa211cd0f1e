"""The stream writer PySpark builds for every commit reads the table's METADATA again (DESIGN.md
section 9): a broker outage during that read is waited out, not turned into a failed query."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import types as T

from metadata.errors import MetadataStoreError, UnknownTableError
from metadata.metadata_file import MetadataFile
from shoal.errors import KafkaOperationError
from spark_jobs import datasource
from spark_jobs.datasource import ShoalDataSource
from spark_jobs.sink import ShoalStreamWriter

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "producer"))
from producer_unit_support import make_file

SCHEMA = T.StructType(
    [
        T.StructField("k", T.LongType(), False),
        T.StructField("ts", T.TimestampType(), False),
        T.StructField("v", T.StringType()),
    ]
)
OPTIONS = {"table": "events", "zk": "127.0.0.1:1", "bootstrapServers": "127.0.0.1:1", "commitTimeout": "600"}


class _Fatal:
    def fatal(self) -> bool:
        return True


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Answers of the METADATA reads, in order: an exception is raised, a file returned."""
    answers: list[Any] = []
    sleeps: list[float] = []

    def current(connection: Any, table: str) -> MetadataFile:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    monkeypatch.setattr(datasource, "_current", current)
    monkeypatch.setattr(time, "sleep", sleeps.append)
    return answers


def test_a_commit_writer_waits_out_a_metadata_topic_outage(reads: list[Any]) -> None:
    file = make_file()
    reads.extend([MetadataStoreError("cannot describe metadata topic shoal.metadata: "), KafkaOperationError("x")])
    reads.append(file)
    writer = ShoalDataSource(OPTIONS).streamWriter(SCHEMA, False)
    assert isinstance(writer, ShoalStreamWriter)
    assert writer.file is file
    assert reads == []


@pytest.mark.parametrize(
    "error",
    [UnknownTableError("no table events"), KafkaOperationError("fatal", _Fatal())],  # type: ignore[arg-type]
    ids=["unknown-table", "fatal"],
)
def test_an_error_that_cannot_pass_is_not_retried(reads: list[Any], error: Exception) -> None:
    reads.extend([error, make_file()])
    with pytest.raises(type(error)):
        ShoalDataSource(OPTIONS).streamWriter(SCHEMA, False)
    assert len(reads) == 1


def test_the_retries_end_at_the_commit_timeout(reads: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    monkeypatch.setattr(time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    reads.extend([MetadataStoreError("down")] * 200)
    with pytest.raises(MetadataStoreError):
        ShoalDataSource({**OPTIONS, "commitTimeout": "120", "syncTimeout": "60"}).streamWriter(SCHEMA, False)
    assert 100 <= now[0] <= 120  # the last pause would pass the timeout
