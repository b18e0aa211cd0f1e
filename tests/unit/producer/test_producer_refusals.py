"""The deadletter headers a leader writes, read back by the producer's refusal check."""

from __future__ import annotations

from typing import Any

import pytest

from producer.refusals import DeadletterWatch, new_producer_id, refusal_of
from shoal.kafka.settings import ConnectionSettings
from shoal.topics import TopicNames
from shoal.wire.ingest import PRODUCER_HEADER, PRODUCER_ID_PATTERN
from storage_node.replica import Rejected
from storage_node.roles.leader.deadletter import deadletter_headers


class _Msg:
    def __init__(self, headers: Any, offset: int = 7) -> None:
        self._headers, self._offset = headers, offset

    def headers(self) -> Any:
        return self._headers

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


def _dead(headers: Any) -> list[tuple[str, Any]]:
    why = Rejected("oversized", "message of 9 bytes exceeds 8")
    return deadletter_headers(_Msg(headers), why, source_topic="p.ingest.x", partition_id="pid", table="events")


def test_a_leader_copies_the_producer_id_and_the_producer_finds_its_refusal() -> None:
    mine, other = new_producer_id(), new_producer_id()
    assert PRODUCER_ID_PATTERN.fullmatch(mine) and mine != other
    dead = _dead([("shoal.table", b"events"), (PRODUCER_HEADER, mine.encode())])
    refusal = refusal_of(dead, mine)
    assert refusal is not None
    assert (refusal.table, refusal.partition_id, refusal.topic, refusal.offset) == ("events", "pid", "p.ingest.x", 7)
    assert (refusal.reason, refusal.detail) == ("oversized", "message of 9 bytes exceeds 8")
    assert refusal_of(dead, other) is None


def test_a_leader_drops_a_malformed_or_repeated_producer_header() -> None:
    mine = new_producer_id()
    for headers in (
        None,
        [],
        [(PRODUCER_HEADER, b"not-an-id")],
        [(PRODUCER_HEADER, mine.encode() + b"\n")],
        [(PRODUCER_HEADER, mine.upper().encode())],
        [(PRODUCER_HEADER, None)],
        [(PRODUCER_HEADER, mine.encode()), (PRODUCER_HEADER, new_producer_id().encode())],
        [(PRODUCER_HEADER, b"\xff" * 32)],
    ):
        dead = _dead(headers)
        assert PRODUCER_HEADER not in [name for name, _ in dead], headers
        assert refusal_of(dead, mine) is None
    # a str header value (as a dict of headers may carry) is accepted like bytes
    assert refusal_of(_dead({PRODUCER_HEADER: mine}), mine) is not None


def test_a_set_of_producer_ids_finds_the_refusals_of_each() -> None:
    """The Spark sink's driver reads the refusals of all its write tasks' producers at once."""
    first, second, other = new_producer_id(), new_producer_id(), new_producer_id()
    ids = frozenset({first, second})
    for mine in (first, second):
        found = refusal_of(_dead([("shoal.table", b"events"), (PRODUCER_HEADER, mine.encode())]), ids)
        assert found is not None and found.reason == "oversized"
    assert refusal_of(_dead([(PRODUCER_HEADER, other.encode())]), ids) is None
    assert refusal_of(_dead([(PRODUCER_HEADER, other.encode())]), frozenset()) is None


def test_a_watch_starts_where_the_producers_it_checks_started() -> None:
    settings = ConnectionSettings.plain("kafka:9092", "zk:2181", topic_prefix="p").kafka
    ids = {new_producer_id(), new_producer_id()}
    watch = DeadletterWatch(settings, TopicNames("p"), ids)
    assert watch.producer_ids == ids and watch.position is None
    with pytest.raises(ValueError, match="not a deadletter offset"):
        watch.start(1.0, at=-1)
    watch.start(1.0, at=7)  # no request: the offset is given
    assert watch.position == 7
    watch.close()
    with pytest.raises(ValueError, match="not a producer id"):
        DeadletterWatch(settings, TopicNames("p"), {new_producer_id(), "../x"})


def test_an_offset_header_of_non_ascii_digits_reads_as_no_offset() -> None:
    """``"²".isdigit()`` is true and ``int("²")`` raises: one such deadletter record (any client
    knowing a producer id can write one) made every later sync() of that producer raise."""
    mine = new_producer_id()
    for text in ("²", "①", "٣", "9" * 5000):
        found = refusal_of([(PRODUCER_HEADER, mine.encode()), ("shoal.source.offset", text.encode())], mine)
        assert found is not None and found.offset is None


class _Admin:
    def __init__(self) -> None:
        self.topics = {"p.deadletter": None}

    def list_topics(self, timeout: float) -> Any:
        return self


def test_a_failed_read_of_the_deadletter_end_asks_with_a_new_client_next_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import producer.refusals as refusals
    from shoal.errors import KafkaOperationError
    from shoal.kafka.indexes import ChannelIndexes

    made: list[_Admin] = []
    asked: list[_Admin] = []

    def admin(settings: Any) -> _Admin:
        made.append(_Admin())
        return made[-1]

    def read_indexes(client: _Admin, queries: Any, timeout_s: float) -> dict[str, Any]:
        asked.append(client)
        if len(asked) == 1:
            raise KafkaOperationError("cannot list offsets of p.deadletter[0] in 1s: no offset in the answer (-1001)")
        return {"p.deadletter": ChannelIndexes("p.deadletter", tail=0, append=5)}

    monkeypatch.setattr(refusals.clients, "admin", admin)
    monkeypatch.setattr(refusals, "read_indexes", read_indexes)
    monkeypatch.setattr(refusals, "close_offset_readers", lambda client: None)
    settings = ConnectionSettings.plain("kafka:9092", "zk:2181", topic_prefix="p").kafka
    watch = DeadletterWatch(settings, TopicNames("p"), new_producer_id())
    with pytest.raises(KafkaOperationError):
        watch.start(1.0)
    watch.start(1.0)
    assert watch.position == 5
    assert asked == made and len(made) == 2  # the second read went through a new client


@pytest.mark.parametrize(
    ("age_s", "retention_bytes", "lost"),
    [(None, -1, False), (10.0, -1, False), (8 * 86400.0, -1, True), (10.0, 1 << 30, True), (0.0, -1, True)],
)
def test_refusals_deleted_before_they_were_read_fail_the_sync_once_when_they_may_be_this_producers(
    monkeypatch: pytest.MonkeyPatch, age_s: float | None, retention_bytes: int, lost: bool
) -> None:
    """The deadletter topic keeps Kafka's retention: records deleted before this producer read them
    were logged and skipped, and sync() returned success for messages that may have been refused.
    They may be its own only if a message it has not checked yet is older than what the topic keeps
    (deleting by time alone; by size, anything may be gone). ``age_s``: how long ago that message
    was sent (None: there is none; 0.0: the epoch, unknown)."""
    import time

    import producer.refusals as refusals
    from producer.errors import RefusalsLostError
    from shoal.kafka.indexes import ChannelIndexes

    monkeypatch.setattr(refusals.clients, "admin", lambda _settings: _Admin())
    monkeypatch.setattr(
        refusals, "read_indexes", lambda *_a, **_k: {"p.deadletter": ChannelIndexes("p.deadletter", tail=5, append=5)}
    )
    week = {"retention.ms": 7 * 86400 * 1000, "retention.bytes": retention_bytes}
    monkeypatch.setattr(refusals, "deletion_settings", lambda *_a, **_k: week)
    settings = ConnectionSettings.plain("kafka:9092", "zk:2181", topic_prefix="p").kafka
    watch = DeadletterWatch(settings, TopicNames("p"), new_producer_id())
    watch.start(1.0, at=2)
    since = None if age_s is None else (0.0 if age_s == 0.0 else time.time() - age_s)
    if lost:
        with pytest.raises(RefusalsLostError) as info:
            watch.read(1.0, unchecked_since=since)
        assert (info.value.first_offset, info.value.last_offset) == (2, 4)
    else:
        assert watch.read(1.0, unchecked_since=since) == []
    assert watch.read(1.0, unchecked_since=since) == [] and watch.position == 5  # reported once
