"""The deadletter headers a leader writes, read back by the producer's refusal check."""

from __future__ import annotations

from typing import Any

from producer.refusals import new_producer_id, refusal_of
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
