"""`shoal verify` refuses a row nobody wrote: one stamped with a GTID the channels hold for another
key (a leader stamps one GTID per row), also once that key's version there was replaced, also at an
epoch no channel accounts for; and a transient error reading a WAL channel's Tail first does not take
that channel's epochs out of judgement (DESIGN.md section 12)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from test_verify_coverage import _batch, _records, _replica, _segment
from test_verify_gtids import TABLE, TOPICS, FakeChannels, _client, _file, _manifest

from metadata.metadata_file import ChangeType, Placement
from metadata.operations import create_file
from shoal.errors import KafkaOperationError
from shoal.wire.records import Gtid, WalOffsetRange
from shoal_app.cli.verify import Verification, verify


def _described(pid: str, placement: int, rows: int, key_min: int, key_max: int) -> dict[str, Any]:
    return {
        "partition_id": pid,
        "placement_id": placement,
        "row_count": rows,
        "key_min": key_min,
        "key_max": key_max,
        "content_hash": "h",
        "chain": ["s"],
        "root": "s",
    }


def test_a_row_at_a_gtid_the_wal_gave_another_key_before_its_rewrite_is_refused() -> None:
    """k=1 written at 1:0, then again at 1:1; a segment holds k=2 at 1:0: k=1's newest is 1:1, so
    comparing the newest versions alone saw GTID 1:0 on one key."""
    file = _file()
    pid = file.partitions[0].partition_id
    wal = _records(pid, 1, [(Gtid(1, 0), _batch([1], ["a"], [False])), (Gtid(1, 1), _batch([1], ["b"], [False]))])
    seg, data = _segment(
        _manifest(pid, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 1)), is_major=False),
        [(2, "z", 1, 0, False), (1, "b", 1, 1, False)],
    )
    channels = FakeChannels({TOPICS.wal(pid, 1): (0, wal)}, {TOPICS.segments(pid, 1): [seg]}, {seg.segment_id: data})
    replica = _replica([(1, "b", 1, 1), (2, "z", 1, 0)])
    report = verify(
        _client(file),
        "events",
        channels=channels,
        describe=lambda _s: [_described(pid, 1, 2, 1, 2)],
        rows=lambda _s, _p: replica,
        epoch=lambda _p: (1, 1),
    )
    assert not report.ok
    assert "gtid 1:0: k=1 and k=2" in (report.partitions[0].coverage_error or "")


def test_a_scan_holding_one_gtid_on_two_keys_is_refused_at_an_epoch_no_wal_channel_holds() -> None:
    """node-1#1 led epoch 1 and left with its channels; node-2#2 adopted and published its write
    (k=1 at 1:0) and leads epoch 2. The replica also holds k=2 at 1:0."""
    old = create_file(replace(TABLE, replication_factor=2), [(Placement("node-1", 1), Placement("node-2", 2))])
    pid = old.partitions[0].partition_id
    new = old.derive(
        [replace(old.partitions[0], servers=(Placement("node-2", 2),))], ChangeType.FINALIZE_LEAVE, "node-1 left"
    )
    client = SimpleNamespace(
        coordinator=SimpleNamespace(current=lambda _t: new, history=lambda _t: [old, new]),
        config=SimpleNamespace(topic_prefix="shoal", kafka=None),
    )
    adopted = _manifest(pid, 2, 2, (0, 1), (Gtid(1, 0), Gtid(1, 0)), is_major=False)
    adopted = replace(adopted, covered_wal_offsets=(WalOffsetRange(TOPICS.wal(pid, 1), 0, 1),))
    adopted, data = _segment(adopted, [(1, "a", 1, 0, False)])
    wal2 = _records(pid, 2, [(Gtid(2, 0), _batch([3], ["c"], [False]))])
    channels = FakeChannels(
        {TOPICS.wal(pid, 2): (0, wal2)}, {TOPICS.segments(pid, 2): [adopted]}, {adopted.segment_id: data}
    )
    replica = _replica([(1, "a", 1, 0), (2, "z", 1, 0), (3, "c", 2, 0)])
    report = verify(
        client,  # type: ignore[arg-type]
        "events",
        channels=channels,
        describe=lambda _s: [_described(pid, 2, 3, 1, 3)],
        rows=lambda _s, _p: replica,
        epoch=lambda _p: (2, 2),
    )
    assert not report.ok
    assert "holds 1 GTID(s) on another key too (gtid 1:0: k=1 and k=2)" in (report.partitions[0].coverage_error or "")


def test_a_failed_first_tail_read_keeps_the_channels_epochs_judged() -> None:
    """node-1#1's epoch-1 write (k=1 at 1:0) is in its own segment and truncated from its WAL channel;
    both replicas hold k=1 at 1:5, which nobody wrote. Asking for that WAL channel's Tail first fails
    once (a broker restarting): the channel is still judged by the Tail its check reads."""
    file = create_file(replace(TABLE, replication_factor=2), [(Placement("node-1", 1), Placement("node-2", 2))])
    pid = file.partitions[0].partition_id
    wal1 = TOPICS.wal(pid, 1)
    seg, data = _segment(
        _manifest(pid, 1, 1, (0, 1), (Gtid(1, 0), Gtid(1, 0)), is_major=False), [(1, "a", 1, 0, False)]
    )
    wal2 = _records(pid, 2, [(Gtid(2, 0), _batch([3], ["c"], [False]))])

    class Blip(FakeChannels):
        failures = 0

        def bounds(self, topic: str) -> Any:
            if topic == wal1 and self.failures:
                self.failures -= 1
                raise KafkaOperationError(f"{topic}: Broker: Leader not available")
            return super().bounds(topic)

    def run(failures: int) -> Verification:
        channels = Blip(
            {wal1: (1, []), TOPICS.wal(pid, 2): (0, wal2)}, {TOPICS.segments(pid, 1): [seg]}, {seg.segment_id: data}
        )
        channels.failures = failures
        replica = _replica([(1, "x", 1, 5), (3, "c", 2, 0)])
        return verify(
            _client(file),
            "events",
            channels=channels,
            describe=lambda s: [_described(pid, 1 if s == "node-1" else 2, 2, 1, 3)],
            rows=lambda _s, _p: replica,
            epoch=lambda _p: (2, 2),
        )

    for failures in (0, 1):
        report = run(failures)
        assert not report.ok, failures
        assert "k=1: a row at gtid 1:5" in (report.partitions[0].coverage_error or ""), failures
