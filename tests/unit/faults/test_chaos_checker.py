"""The chaos runner's pure parts: schedule from a seed, write history, checker rules (with fakes)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "faults"))

from chaos.checker import WalObservation, check, check_channels, check_replica
from chaos.history import History, KeyWrites, decode_value, encode_value
from chaos.models import ChaosCounts, FaultKind
from chaos.schedule import ALL_KINDS, ZK_SESSION_TIMEOUT_S, make_schedule


def test_a_seed_reproduces_its_schedule_and_every_kind_comes_first() -> None:
    a, b = make_schedule(7, 12), make_schedule(7, 12)
    assert a == b
    assert {f.kind for f in a[: len(ALL_KINDS)]} == set(ALL_KINDS)
    assert make_schedule(8, 12) != a
    for f in make_schedule(1, 200):
        if f.kind is FaultKind.ZK_BLIP:
            assert f.duration_s < ZK_SESSION_TIMEOUT_S
        assert f.duration_s > 0 and f.gap_s > 0


def test_values_encode_key_and_version() -> None:
    assert decode_value(5, encode_value(5, 3)) == 3
    assert decode_value(5, encode_value(6, 3)) is None
    assert decode_value(5, "garbage") is None
    assert decode_value(5, None) is None
    for never_written in ("5:03", "5:\uff13", "5:+3", "5: 3"):  # int() reads each as 3
        assert decode_value(5, never_written) is None, never_written


def test_a_value_no_writer_wrote_on_every_replica_is_a_violation() -> None:
    """The checker compared decoded versions: every replica holding "7:01" passed as holding "7:1"."""
    h = History()
    h.acknowledge([(7, h.sent(7))])
    h.acknowledge([(7, h.sent(7))])
    result = check(h.snapshot(), {n: [(7, "7:01")] for n in ("node-1", "node-2", "node-3")}, [], verify_ok=True)
    assert not result.ok and result.key_violations


def test_history_acknowledges_versions() -> None:
    h = History()
    assert h.sent(1) == 0 and h.sent(1) == 1 and h.sent(2) == 0
    h.acknowledge([(1, 0), (2, 0)])
    snap = h.snapshot()
    assert snap[1] == KeyWrites(acked={0}, uncertain={1}, sent=2)
    assert snap[2].allowed() == {0}
    assert snap[1].allowed() == {0, 1}  # the uncertain overwrite may have landed


def _history() -> dict[int, KeyWrites]:
    return {
        1: KeyWrites(acked={0, 1}, uncertain=set(), sent=2),  # must hold 1:1
        2: KeyWrites(acked={0}, uncertain={1}, sent=2),  # 2:0 or 2:1
        3: KeyWrites(acked=set(), uncertain={0}, sent=1),  # absent or 3:0
    }


def test_a_converged_replica_passes() -> None:
    assert check_replica("n1", [(1, "1:1"), (2, "2:1")], _history()) == []
    assert check_replica("n1", [(1, "1:1"), (2, "2:0"), (3, "3:0")], _history()) == []


def test_lost_duplicated_stale_and_unexpected_keys() -> None:
    found = check_replica("n1", [(1, "1:0"), (3, "3:0"), (3, "3:0"), (9, "9:0")], _history())
    problems = {(v.key, v.problem) for v in found}
    assert problems == {(1, "stale"), (3, "duplicated"), (9, "unexpected"), (2, "lost")}
    assert check_replica("n1", [(1, "1:7"), (2, "2:0")], _history())[0].problem == "unexpected"


def test_check_counts_per_replica_and_requires_identical_replicas() -> None:
    history = _history()
    good = [(1, "1:1"), (2, "2:1")]
    result = check(history, {"n1": good, "n2": list(good), "n3": [(1, "1:1")]}, verify_ok=True)
    assert not result.ok and result.counts.lost == 1 and not result.replicas_identical
    assert result.counts.writes == 5 and result.counts.acked == 3 and result.counts.uncertain == 2
    assert result.counts.failed_runs == 1
    ok = check(history, {"n1": good, "n2": list(reversed(good))}, verify_ok=True)
    assert ok.ok and ok.replicas_identical and ok.counts.failed_runs == 0
    assert not check(history, {"n1": good}, verify_ok=False).ok
    unreachable = check(history, {"n1": good, "n2": None})
    assert not unreachable.ok and unreachable.counts.lost == 2


def test_a_key_held_by_the_wrong_partition_fails_although_every_replica_holds_it() -> None:
    """Rows of every partition are judged together (a split moves keys), so a key that only the
    wrong partition holds looked present; the runner passes such rows as misplaced."""
    history = _history()
    good = [(1, "1:1"), (2, "2:1")]
    replicas = {"n1": good, "n2": list(good)}
    assert check(history, replicas, verify_ok=True).ok
    wrong = check(history, replicas, misplaced={"n2": [("p-low", 2)]}, verify_ok=True)
    assert not wrong.ok and wrong.counts.misplaced == 1
    assert [(v.server_id, v.key, v.problem) for v in wrong.key_violations] == [("n2", 2, "misplaced")]


def _obs(channel: str, offset: int, epoch: int, seq: int, *rows: tuple[int, int]) -> WalObservation:
    return WalObservation(channel, offset, epoch, seq, tuple((k, encode_value(k, v)) for k, v in rows))


def test_channels_with_increasing_gtids_pass() -> None:
    observations = [
        _obs("wal.1", 0, 1, 0, (1, 0), (2, 0)),
        _obs("wal.1", 2, 1, 2, (1, 1)),
        _obs("wal.2", 0, 2, 0, (1, 2)),
        _obs("wal.1", 5, 3, 0, (1, 3)),  # the first placement leads again with a fresh epoch
    ]
    assert check_channels(observations) == []
    summary = check({}, {}, observations).channels
    assert [(c.channel, c.records, c.epochs) for c in summary] == [("wal.1", 3, [1, 3]), ("wal.2", 1, [2])]


def test_a_gtid_reused_after_suspended_is_caught() -> None:
    # a new leader role with the same epoch restarting its sequence at 0 (the SUSPENDED bug)
    observations = [_obs("wal.1", 0, 4, 0, (1, 0), (2, 0)), _obs("wal.1", 3, 4, 0, (1, 1))]
    problems = {v.problem for v in check_channels(observations)}
    assert problems == {"gtid_reused", "version_inverted"}


def test_out_of_order_shared_epochs_and_restamped_versions() -> None:
    assert [v.problem for v in check_channels([_obs("a", 0, 5, 0, (1, 0)), _obs("a", 1, 4, 9, (2, 0))])] == [
        "out_of_order"
    ]
    shared = check_channels([_obs("a", 0, 5, 0, (1, 0)), _obs("b", 0, 5, 10, (2, 0))])
    assert [v.problem for v in shared] == ["epoch_shared"]
    twice = check_channels([_obs("a", 0, 5, 0, (1, 0)), _obs("b", 0, 6, 0, (1, 0))])
    assert [v.problem for v in twice] == ["restamped"]


def test_gtids_must_follow_the_order_the_leaders_accepted_the_ingest_topic_in() -> None:
    """Each channel in order alone, no epoch shared, distinct keys (so no version is inverted), but the
    second leader accepted later ingest offsets with an older epoch: its writes lose to older ones."""

    def accepted(channel: str, offset: int, epoch: int, seq: int, ingest: int, key: int) -> WalObservation:
        return replace(_obs(channel, offset, epoch, seq, (key, 0)), ingest_offset=ingest)

    first = [accepted("a", 0, 5, 0, 0, 1), accepted("a", 2, 5, 1, 1, 2)]
    assert check_channels([*first, accepted("b", 0, 6, 0, 2, 3)]) == []
    inverted = check_channels([*first, accepted("b", 0, 4, 0, 2, 3)])
    assert [v.problem for v in inverted] == ["accept_inverted"], inverted
    assert "ingest offset 2 (b@0, gtid (4, 0)) not above ingest offset 1 (a@2, gtid (5, 1))" in inverted[0].detail
    twice = check_channels([*first, accepted("b", 0, 6, 0, 1, 3)])
    assert [v.problem for v in twice] == ["accepted_twice"], twice
    # records that name no ingest offset are not ordered by it
    assert check_channels([*first, _obs("b", 0, 4, 0, (3, 0))]) == []


def test_counts_add_up_over_runs() -> None:
    a = ChaosCounts(runs=1, faults={"kill_leader": 2}, writes=10, lost=1)
    b = ChaosCounts(runs=1, faults={"kill_leader": 1, "zk_blip": 1}, writes=5)
    total = a.add(b)
    assert total.runs == 2 and total.writes == 15 and total.lost == 1
    assert total.faults == {"kill_leader": 3, "zk_blip": 1}


def test_election_stacks_keeps_the_election_lines_and_threads_of_a_faulthandler_dump() -> None:
    from chaos.nemesis import election_stacks

    before = (
        "2026-11-24 18:40:09,001 INFO metadata.election: node-1#1 on p: IDLE -> CANDIDATE\n"
        "2026-11-24 18:40:10,001 INFO storage_node.node: unrelated\n"
    )
    dump = (
        "Thread 0x00007f01 (most recent call first):\n"
        '  File "/x/metadata/election.py", line 427 in _check\n'
        '  File "/x/threading.py", line 975 in run\n'
        "\n"
        "Thread 0x00007f02 (most recent call first):\n"
        '  File "/x/storage_node/roles/follower.py", line 10 in run\n'
        "\n"
        "Current thread 0x00007f03 (most recent call first):\n"
        '  File "/x/storage_node/node.py", line 330 in run\n'
    )
    out = election_stacks(before, dump)
    assert "IDLE -> CANDIDATE" in out and "unrelated" not in out
    assert "_check" in out and "follower.py" not in out and "node.py" not in out
    assert election_stacks("", "") == ""


def test_a_chaos_write_is_acknowledged_once_delivered_even_when_every_sync_fails() -> None:
    """README: a write is acknowledged when its delivery succeeded. A delivered write whose sync()
    failed (a leader down) must count as acknowledged, so that losing it fails the run; one whose
    delivery failed or never finished stays uncertain."""
    import threading
    from concurrent.futures import Future

    from chaos.workload import ChaosWriter

    from producer.producer import WriteResult

    outcomes = iter(["delivered", "failed", "pending", "delivered", "delivered", "delivered"])
    written: list[list[int]] = []

    class Producer:
        def write(self, table: str, rows: list[dict[str, Any]]) -> WriteResult:
            future: Future[Any] = Future()
            outcome = next(outcomes)
            if outcome == "delivered":
                future.set_result(None)
            elif outcome == "failed":
                future.set_exception(RuntimeError("not delivered"))
            written.append([r["k"] for r in rows])
            return WriteResult(table, len(rows), (future,))

        def sync(self, timeout: float) -> None:
            raise RuntimeError("no leader")

        def flush(self, timeout: float) -> None:
            pass

    class NoWait(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            return self.is_set()

    history = History()
    writer = ChaosWriter(None, history, index=0, count=1, seed=1, new_keys=2, overwrites=0, deletes=0)  # type: ignore[arg-type]
    writer.halt = NoWait()
    writer._write_with(Producer(), [])  # type: ignore[arg-type]
    assert len(written) == 6 and writer.failures == 6
    snap = history.snapshot()
    acked = {k for k, w in snap.items() if w.acked}
    assert acked == set(written[0] + written[3] + written[4] + written[5])
    assert all(snap[k].uncertain and not snap[k].acked for k in written[1] + written[2])


def test_a_delivery_reported_after_the_writers_flush_gave_up_is_acknowledged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's flush(10) gives up while a message is in flight; closing the producer delivers it.
    That write was delivered (acks=all): it must count as acknowledged, or the checker would let every
    replica lose it."""
    from concurrent.futures import Future

    from chaos import workload
    from chaos.history import History

    from producer import DeliveryError, WriteResult

    history = History()
    writer = workload.ChaosWriter(
        None, history, index=0, count=1, seed=1, new_keys=3, overwrites=0, deletes=0, pause_s=0
    )  # type: ignore[arg-type]

    class LateProducer:
        def __init__(self, _config: object) -> None:
            self.futures: list[Future[str]] = []

        def __enter__(self) -> LateProducer:
            return self

        def __exit__(self, *exc: object) -> None:  # close(): flush() waits, the message is delivered
            for f in self.futures:
                f.set_result("delivered")

        def write(self, table: str, rows: list[dict[str, object]]) -> WriteResult:
            if self.futures:
                writer.halt.set()
                raise RuntimeError("one batch is enough")
            f: Future[str] = Future()
            f.set_running_or_notify_cancel()
            self.futures.append(f)
            return WriteResult(table, len(rows), (f,))  # type: ignore[arg-type]

        def sync(self, timeout: float) -> None:
            raise TimeoutError("an outage")

        def flush(self, timeout: float | None = None) -> None:
            raise DeliveryError(f"1 messages still in flight after {timeout}s")

    monkeypatch.setattr(workload, "Producer", LateProducer)
    monkeypatch.setattr(writer, "_config", lambda: None)
    writer.halt.wait = lambda _t=None: False  # type: ignore[method-assign,assignment]
    writer.run()
    assert writer.error is None
    acked = {k: sorted(w.acked) for k, w in history.snapshot().items() if w.acked}
    twice = [k for k, v in acked.items() if v == [0, 1]]  # the batch holds one key twice
    assert len(twice) == 1 and acked == {k: [0, 1] if k in twice else [0] for k in (0, 1, 2)}


def test_a_deleted_key_must_be_absent_unless_a_newer_version_may_have_landed() -> None:
    history = {
        1: KeyWrites(acked={0, 1}, uncertain=set(), sent=2, deletes={1}),  # created, deleted: absent
        2: KeyWrites(acked={0}, uncertain={1}, sent=2, deletes={1}),  # the delete may have landed
        3: KeyWrites(acked={0, 1, 2}, uncertain=set(), sent=3, deletes={1}),  # deleted, then written again
        4: KeyWrites(acked={0, 1}, uncertain={2}, sent=3, deletes={1}),  # deleted; a rewrite may have landed
    }
    assert check_replica("n1", [(2, "2:0"), (3, "3:2")], history) == []
    assert check_replica("n1", [(3, "3:2"), (4, "4:2")], history) == []
    came_back = check_replica("n1", [(1, "1:0"), (3, "3:0")], history)
    assert {(v.key, v.problem) for v in came_back} == {(1, "stale"), (3, "stale")}, came_back
    assert came_back[0].expected == ["1:1 (deleted)"]
    lost = check_replica("n1", [], history)
    assert [(v.key, v.problem) for v in lost] == [(3, "lost")]


def test_history_records_deletes_and_counts_them() -> None:
    h = History()
    h.sent(1)
    assert h.sent(1, delete=True) == 1
    h.acknowledge([(1, 0), (1, 1)])
    snap = h.snapshot()
    assert snap[1].deletes == {1} and snap[1].may_be_absent() and snap[1].may_hold() == set()
    result = check(snap, {"n1": []}, verify_ok=True)
    assert result.ok and result.counts.writes == 2 and result.counts.deletes == 1


def test_gtid_rules_apply_per_partition_and_versions_across_partitions() -> None:
    """Epochs and ingest offsets belong to one partition: a child's channel may reuse an epoch number
    or an ingest offset of its parent's. A key's versions must still increase in GTID across them
    (the child's epochs start above the parent's)."""

    def at(pid: str, channel: str, epoch: int, ingest: int, *rows: tuple[int, int]) -> WalObservation:
        return replace(_obs(channel, 0, epoch, 0, *rows), ingest_offset=ingest, partition_id=pid)

    parent = at("p", "wal.p.1", 3, 0, (1, 0))
    assert check_channels([parent, at("c", "wal.c.1", 3, 0, (2, 0))]) == []
    assert check_channels([parent, at("c", "wal.c.1", 4, 0, (1, 1))]) == []
    inverted = check_channels([parent, at("c", "wal.c.1", 2, 0, (1, 1))])
    assert [v.problem for v in inverted] == ["version_inverted"], inverted


def test_the_observer_reads_a_delete_as_a_row_without_value() -> None:
    import pyarrow as pa
    from chaos.workload import WalObserver

    from shoal.kafka.settings import KafkaSettings
    from shoal.wire.arrow_ipc import encode_batch
    from shoal.wire.records import Gtid, IngestOffset, WalRecord

    pid = "ab" * 16
    rows = pa.table({"k": pa.array([7, 8], pa.uint64()), "v": ["7:0", None], "_shoal_deleted": [False, True]})
    record = WalRecord.create(
        partition_id=pid,
        placement_id=1,
        gtid=Gtid(2, 5),
        row_count=2,
        payload=encode_batch(rows),
        ingest_offsets=[IngestOffset(f"pre.ingest.{pid}", 0, 41)],
    )
    observer = WalObserver(KafkaSettings("127.0.0.1:1"), "pre")
    observer._observe(f"pre.wal.{pid}.1", 3, record)
    assert observer.errors == []
    (obs,) = observer.observations
    assert obs.rows == ((7, "7:0"), (8, None)) and obs.partition_id == pid and obs.first == (2, 5)
    assert obs.ingest_offset == 41


def test_a_version_a_committed_wal_record_holds_counts_as_acknowledged() -> None:
    """A writer that never got its delivery report does not know its write landed; the leader that
    committed its WAL record accepted it, and an accepted write is never lost (audit40 M1)."""
    history = {
        1: KeyWrites(acked={0}, uncertain={1}, sent=2),  # 1:1 accepted, its report lost
        2: KeyWrites(acked=set(), uncertain={0}, sent=1),  # 2:0 accepted, never acknowledged
        3: KeyWrites(acked={0}, uncertain={1, 2}, sent=3),  # 3:2 accepted, 3:1 not seen
    }
    observations = [_obs("wal.1", 0, 1, 0, (1, 0), (3, 0)), _obs("wal.1", 2, 1, 2, (1, 1), (2, 0), (3, 2))]
    lost = [(1, "1:0"), (3, "3:1")]  # every replica lost the accepted versions, identically
    result = check(history, {"n1": lost, "n2": list(lost)}, observations, verify_ok=True)
    assert not result.ok
    assert {(v.key, v.problem) for v in result.key_violations} == {(1, "stale"), (2, "lost"), (3, "stale")}
    assert result.counts.uncertain_accepted == 3 and result.counts.acked == 2 and result.counts.uncertain == 4
    held = [(1, "1:1"), (2, "2:0"), (3, "3:2")]
    assert check(history, {"n1": held, "n2": list(held)}, observations, verify_ok=True).ok
    # a newer uncertain version may still have landed over an accepted one
    history[1] = KeyWrites(acked={0}, uncertain={1, 2}, sent=3)
    newer = [(1, "1:2"), (2, "2:0"), (3, "3:2")]
    assert check(history, {"n1": newer, "n2": list(newer)}, observations, verify_ok=True).ok
    # deletes carry no version on the WAL: an uncertain delete stays uncertain
    history[4] = KeyWrites(acked={0}, uncertain={1}, sent=2, deletes={1})
    gone = [*newer]  # key 4 absent: its delete may have landed
    assert check(history, {"n1": gone, "n2": list(gone)}, [*observations, _obs("wal.1", 5, 1, 5)], verify_ok=True).ok


def test_the_chaos_command_refuses_zero_runs_and_zero_faults(capsys: pytest.CaptureFixture[str]) -> None:
    from chaos.__main__ import main

    for argv in (["--runs", "0"], ["--runs", "-3"], ["--faults", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert "must be at least 1" in capsys.readouterr().err


def test_the_observer_counts_what_a_channel_deleted_between_two_rounds_still_had(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A split parent's channel deleted at UNLOAD_FINAL between two rounds drops out of the topic
    list: the offsets past the last round are unobserved, not silently gone (audit40 L1)."""
    from types import SimpleNamespace

    from chaos import workload
    from chaos.workload import WalObserver

    from shoal.kafka.settings import KafkaSettings

    topic = "pre.wal." + "ab" * 16 + ".1"
    state: dict[str, Any] = {"topics": {topic: None}, "end": 0}
    monkeypatch.setattr(
        workload.clients,
        "admin",
        lambda _kafka: SimpleNamespace(list_topics=lambda timeout: SimpleNamespace(topics=state["topics"])),
    )
    monkeypatch.setattr(workload, "log_start_and_end", lambda _kafka, _topic: (0, state["end"]))
    monkeypatch.setattr(workload, "read_wal_channel", lambda *_a, **_kw: iter(()))
    observer = WalObserver(KafkaSettings("127.0.0.1:1"), "pre")
    observer.read_round()
    state["end"] = 7  # written after the round, then the channel is deleted
    observer.read_round()
    assert observer.unobserved == 0  # nothing truncated (this fake reads no record)
    state["topics"] = {}
    observer.read_round()
    assert observer.unobserved == 7 and observer.failed_rounds == 0


def test_an_uncertain_delete_a_leader_accepted_must_not_come_back() -> None:
    """A delete whose delivery report never came, held by a committed WAL record: accepted, so a
    replica still holding the value it removed (a deleted row that came back) is a violation."""
    history = {1: KeyWrites(acked={0}, uncertain={1}, sent=2, deletes={1})}
    observations = [
        WalObservation("p.wal.P.1", 0, 1, 1, ((1, encode_value(1, 0)),), ingest_offset=0, partition_id="P"),
        WalObservation("p.wal.P.1", 1, 1, 2, ((1, None),), ingest_offset=1, partition_id="P"),
    ]
    replicas = {n: [(1, "1:0")] for n in ("n1", "n2", "n3")}
    result = check(history, replicas, observations, verify_ok=True)
    assert not result.ok and result.counts.uncertain_accepted == 1, result


def test_rows_of_a_delivered_message_are_acknowledged_when_another_message_of_the_call_failed() -> None:
    """acks=all is per message: one write call split over two partitions (after a split), one message
    delivered, the other failed. The delivered rows are acknowledged, the failed ones uncertain."""
    from concurrent.futures import Future

    from chaos.workload import ChaosWriter

    from producer.errors import DeliveryError
    from producer.producer import DeliveryReport, WriteResult

    history = History()
    writer = ChaosWriter(None, history, index=0, count=1, seed=1)  # type: ignore[arg-type]
    history.acknowledge([(1, history.sent(1)), (9, history.sent(9))])
    pairs = [(1, history.sent(1)), (9, history.sent(9))]
    ok: Future[DeliveryReport] = Future()
    bad: Future[DeliveryReport] = Future()
    ok.set_result(DeliveryReport("events", "a" * 32, "p.ingest.low", 1, False, 17))
    failed = DeliveryReport("events", "b" * 32, "p.ingest.high", 1, False, None, "message timed out")
    bad.set_exception(DeliveryError("message timed out", [failed]))
    writer._acknowledge_delivered([(WriteResult("events", 2, (ok, bad)), pairs, {1: "a" * 32, 9: "b" * 32})])
    final = history.snapshot()
    assert 1 in final[1].acked and 1 not in final[9].acked and 1 in final[9].uncertain
    replicas = {n: [(1, "1:0"), (9, "9:0")] for n in ("n1", "n2", "n3")}
    assert not check(final, replicas, [], verify_ok=True).ok  # the acknowledged 1:1 lost everywhere


def test_the_wal_observer_notices_a_channel_deleted_and_created_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A channel that now ends below where the observer already read (deleted and created again, or
    records lost): an error, and the new incarnation is read from its start."""
    from types import SimpleNamespace

    import chaos.workload as workload
    import pyarrow as pa

    from shoal.kafka.readers import ChannelRecord

    topic = "p.wal." + "a" * 32 + ".1"

    class Rec:
        def __init__(self, epoch: int, seq: int, key: int) -> None:
            self.partition_id, self.ingest_offsets = "a" * 32, ()
            self.gtid = SimpleNamespace(epoch=epoch, seq=seq)
            self._t = pa.table({"k": [key], "v": [f"{key}:0"]})

        def rows(self) -> pa.Table:
            return self._t

    log: dict[str, list[Rec]] = {"records": [Rec(3, i, i) for i in range(10)]}
    admin = SimpleNamespace(list_topics=lambda timeout: SimpleNamespace(topics={topic: 1}))
    monkeypatch.setattr(workload, "clients", SimpleNamespace(admin=lambda _k: admin))
    monkeypatch.setattr(workload, "log_start_and_end", lambda _k, _t: (0, len(log["records"])))

    def read(_k: Any, _t: str, start: int, *, timeout_s: float, exact_start: bool) -> Any:
        for offset in range(start, len(log["records"])):
            yield ChannelRecord(offset, log["records"][offset])

    monkeypatch.setattr(workload, "read_wal_channel", read)
    observer = workload.WalObserver(SimpleNamespace(), "p")  # type: ignore[arg-type]
    observer.read_round()
    assert len(observer.observations) == 10
    log["records"] = [Rec(3, i, 100 + i) for i in range(4)]  # a leader reusing epoch 3, seqs 0..3
    observer.read_round()
    assert observer.errors and "created again" in observer.errors[0]
    assert len(observer.observations) == 14 and check_channels(observer.observations)
