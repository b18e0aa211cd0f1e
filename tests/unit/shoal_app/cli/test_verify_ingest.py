"""``shoal verify`` lists ingest topics holding acknowledged writes their leader did not accept: such
writes are on no channel and in no replica, so without this check a stuck partition (no leader, a
forwarder retrying one message for ever) passed as agreeing (an audit's proof)."""

from __future__ import annotations

import pytest
from test_verify_gtids import TOPICS, FakeChannels, _file, fake_metadata_client
from test_verify_unscanned import _verify

from shoal.errors import KafkaOperationError
from shoal_app.cli import verify as verify_module
from shoal_app.cli.verify_ingest import WINDOW, IngestReader, IngestTopic, unaccepted


class Ingest:
    """An ingest topic's records (offsets; the others are markers), its end and its group's offset,
    which moves to ``later`` after ``moves_after`` reads."""

    def __init__(
        self, records: list[int], end: int, committed: int | None, later: int | None = None, moves_after: int = 0
    ):
        self.records, self.end, self.now, self.later, self.moves_after = records, end, committed, later, moves_after
        self.reads = 0
        self.t = 0.0
        self.fail_end = False
        self.high: int | None = None
        """The high watermark (None: the reader has none); ``end`` reaches it after ``opens_for`` reads."""
        self.opens_for: int | None = None
        self.end_reads = 0

    def reader(self) -> IngestReader:
        def stable_end(_topic: str) -> int:
            if self.fail_end:
                raise KafkaOperationError("ingest: no leader for the partition")
            self.end_reads += 1
            if self.high is not None and self.opens_for is not None and self.end_reads > self.opens_for:
                self.end = self.high  # the open transaction ended
            return self.end

        def committed(_group: str, _topic: str) -> int | None:
            self.reads += 1
            if self.later is not None and self.reads > self.moves_after:
                return self.later
            return self.now

        def last_record(_topic: str, start: int, end: int) -> int | None:
            inside = [o for o in self.records if start <= o < end]
            return max(inside) if inside else None

        def sleep(s: float) -> None:
            self.t += s

        def high_water(_topic: str) -> int:
            assert self.high is not None
            return self.high

        return IngestReader(
            stable_end,
            committed,
            last_record,
            clock=lambda: self.t,
            sleep=sleep,
            high_water=None if self.high is None else high_water,
        )


T = IngestTopic("p1", "shoal.ingest.p1", "shoal.leader.p1")


def test_a_topic_whose_leader_accepted_everything_passes() -> None:
    assert unaccepted([T], Ingest([0, 1, 2], end=4, committed=4).reader()) == []
    assert unaccepted([T], Ingest([0, 1, 2], end=4, committed=3).reader()) == []  # offset 3: a commit marker
    assert unaccepted([T], Ingest([], end=0, committed=None).reader()) == []  # nothing written


def test_writes_in_flight_are_waited_for_and_a_stuck_topic_is_listed() -> None:
    assert unaccepted([T], Ingest([0, 1, 2], end=3, committed=1, later=3, moves_after=4).reader()) == []
    ingest = Ingest([0, 1, 2], end=4, committed=1)
    (stuck,) = unaccepted([T], ingest.reader(), settle_s=15)
    assert (stuck.topic, stuck.accepted_to, stuck.last_unaccepted, stuck.error) == (T.topic, 1, 2, None)
    assert ingest.t >= 15  # it waited, then judged
    (never,) = unaccepted([T], Ingest([0], end=2, committed=None).reader())
    assert (never.accepted_to, never.last_unaccepted) == (None, 0)
    # a backlog longer than the window read back from the end: listed all the same
    (long,) = unaccepted([T], Ingest(list(range(0, 10 * WINDOW, 2)), end=10 * WINDOW, committed=0).reader())
    assert long.last_unaccepted == 10 * WINDOW - 2
    # a window of aborted records and markers only: read further back, for the record below them
    (below,) = unaccepted([T], Ingest([5], end=10 * WINDOW, committed=0).reader())
    assert below.last_unaccepted == 5
    # a healthy topic ending in more aborted records than a window (a fenced Spark task's): passes
    assert unaccepted([T], Ingest([5], end=10 * WINDOW, committed=6).reader()) == []


def _held_back(
    records: list[int], end: int, high: int, committed: int, opens_for: int | None, later: int | None = None
) -> Ingest:
    ingest = Ingest(records, end=end, committed=committed, later=later, moves_after=2)
    ingest.high, ingest.opens_for = high, opens_for
    return ingest


def test_writes_behind_a_transaction_still_open_are_not_passed_as_accepted() -> None:
    """A transaction open at offset 5 (a Spark sink's, or an orphan's until its timeout) holds back the
    non-transactional writes acknowledged after it: the leader (read_committed) cannot read them,
    and the group's offset 5 is at the last stable offset. They are no accepted writes."""
    records = [0, 1, 2, 3, 4, 6, 7, 8, 9]  # 5: the open transaction's record (aborted later)
    ingest = _held_back(records, end=5, high=10, committed=5, opens_for=None)
    (held,) = unaccepted([T], ingest.reader(), settle_s=15)
    assert (held.held_back_from, held.high_water, held.accepted_to, held.last_unaccepted) == (5, 10, 5, None)
    assert ingest.t >= 15  # it waited for the transaction to end, then judged
    # the transaction ends (aborted) after a few reads and the leader takes the rest: passes
    assert unaccepted([T], _held_back(records, 5, 10, 5, opens_for=3, later=10).reader()) == []
    # it ends, and the leader does not take them: the last record behind it is listed
    (stuck,) = unaccepted([T], _held_back(records, 5, 10, 5, opens_for=3).reader())
    assert (stuck.held_back_from, stuck.accepted_to, stuck.last_unaccepted) == (None, 5, 9)
    # the group's offset cannot be read at the moment the transaction ends: judged at the next look
    reader = _held_back(records, 5, 10, 5, opens_for=3).reader()
    committed, failed = reader.committed, []

    def committed_failing_once(group: str, topic: str) -> int | None:
        if not failed:
            failed.append(True)
            raise KafkaOperationError("GroupCoordinator: not coordinator")
        return committed(group, topic)

    reader.committed = committed_failing_once
    (stuck,) = unaccepted([T], reader)
    assert failed and (stuck.accepted_to, stuck.last_unaccepted) == (5, 9)
    # nothing open: the last stable offset is the high watermark, judged at once
    assert unaccepted([T], _held_back(records, 10, 10, 10, opens_for=None).reader()) == []


def test_a_topic_that_cannot_be_read_is_listed_with_the_error() -> None:
    ingest = Ingest([0], end=1, committed=1)
    ingest.fail_end = True
    (failed,) = unaccepted([T], ingest.reader())
    assert failed.error is not None and "no leader for the partition" in failed.error


def test_verify_fails_while_an_ingest_topic_holds_writes_not_accepted() -> None:
    result, _part = _verify()
    assert result.ok and result.unaccepted == []
    result, _part = _verify(ingest=Ingest([0, 1], end=2, committed=2).reader())
    assert result.ok and result.unaccepted == []
    result, part = _verify(ingest=Ingest([0, 1], end=2, committed=1).reader())
    assert not result.ok and part.agree and part.covered  # the replicas agree on what the leader accepted
    (stuck,) = result.unaccepted
    assert (stuck.partition_id, stuck.accepted_to, stuck.last_unaccepted) == (part.partition_id, 1, 1)


def test_the_text_output_names_the_ingest_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    file = _file()
    pid = file.partitions[0].partition_id
    channels = FakeChannels({}, {})
    monkeypatch.setattr(verify_module, "MetadataClient", fake_metadata_client(file))
    monkeypatch.setattr(verify_module, "KafkaChannels", lambda _kafka: channels)
    monkeypatch.setattr("metadata.node_registry.lookup_node", lambda _zk, _layout, server: server)
    monkeypatch.setattr("shoal.scan.describe_remote", lambda server, _t: [])
    expected = [
        (
            Ingest([0, 1], end=2, committed=1),
            "WRITES NOT ACCEPTED: acknowledged records up to offset 1, its leader accepted up to 1",
        ),
        (
            _held_back([0, 1, 3], end=2, high=4, committed=2, opens_for=None),
            "WRITES NOT READABLE YET: a transaction open at offset 2 holds back the acknowledged records up to "
            "offset 4",
        ),
    ]
    for ingest, text in expected:
        channels.ingest = ingest.reader()
        res = CliRunner().invoke(verify_module.verify_command, ["events", "--zk", "z:1", "--bootstrap-servers", "b:1"])
        assert res.exit_code == 1, res.output
        assert f"ingest topic {TOPICS.ingest(pid)}: {text}" in res.output, res.output


def test_a_transaction_ending_late_leaves_its_leader_the_whole_wait() -> None:
    """The held-back records become readable at 14.8 s of the 15 s wait; a healthy leader accepts them
    0.3 s later. The accept wait starts when they became readable, not at the start."""
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    reader = IngestReader(
        stable_end=lambda _t: 100 if now[0] >= 14.8 else 40,
        committed=lambda _g, _t: 100 if now[0] >= 15.1 else 40,
        last_record=lambda _t, s, e: e - 1 if e > s else None,
        high_water=lambda _t: 100,
        clock=lambda: now[0],
        sleep=sleep,
    )
    assert unaccepted([T], reader, settle_s=15.0, poll_s=0.5) == []
