"""``shoal verify``: what it could not scan is never reported as covered, and versions of the current
leader's epoch whose WAL channel is gone are a mismatch (DESIGN.md section 6).

Pure: WAL records with real Arrow payloads, replicas' scans, through ``verify`` with fake channels.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from test_verify_channels import _described
from test_verify_coverage import _batch, _records, _replica
from test_verify_gtids import TABLE, TOPICS, FakeChannels, _client

from metadata.metadata_file import Placement
from metadata.operations import create_file
from metadata.zk_client import ZooKeeperUnavailableError
from shoal.errors import ShoalError
from shoal.wire.records import Gtid
from shoal_app.cli.verify import verify

FILE = create_file(replace(TABLE, replication_factor=2), [(Placement("node-1", 1), Placement("node-2", 2))])
PID = FILE.partitions[0].partition_id
WAL = TOPICS.wal(PID, 1)
GOOD = _replica([(1, "a", 1, 0)])


def _channels() -> FakeChannels:
    return FakeChannels({WAL: (0, _records(PID, 1, [(Gtid(1, 0), _batch([1], ["a"], [False]))]))}, {})


def _describe(server: str) -> list[dict[str, Any]]:
    return [_described(PID, placement=1 if server == "node-1" else 2)]


def _verify(**kw: Any) -> Any:
    args: dict[str, Any] = {
        "channels": _channels(),
        "describe": _describe,
        "rows": lambda _s, _p: GOOD,
        "epoch": lambda _p: (1, 1),
    }
    args.update(kw)
    result = verify(_client(FILE), "events", **args)
    return result, result.partitions[0]


def test_both_replicas_scanned_and_holding_the_write_are_covered() -> None:
    result, part = _verify()
    assert result.ok and part.covered is True and part.coverage_error is None


def test_a_replica_not_described_is_not_covered_but_not_checked() -> None:
    def down(server: str) -> list[dict[str, Any]]:
        if server == "node-2":
            raise ShoalError("describe failed: unavailable")
        return _describe(server)

    result, part = _verify(describe=down)
    assert not result.ok and not part.agree
    assert part.covered is None  # not True: node-2 was never scanned
    assert part.coverage_error == "not checked on node-2#2: not described, so not scanned"
    # a scanned replica that misses a write still says so
    result, part = _verify(describe=down, rows=lambda _s, _p: GOOD.slice(0, 0))
    assert part.covered is False and "node-1#1 misses 1 of 1 writes" in str(part.coverage_error)


def test_versions_of_the_current_epoch_whose_leader_wal_channel_is_gone_are_a_mismatch() -> None:
    """ZooKeeper names placement 1 the leader of epoch 1; no channel holds anything, yet both replicas
    hold a row at 1:0. A leader creates its WAL channel before it stamps a row: the row's record is
    gone with it (deleted by hand), or nobody wrote it."""
    result, part = _verify(channels=FakeChannels({}, {}))
    assert not result.ok and part.covered is False
    assert "node-1#1 holds 1 version(s) of epoch 1, ZooKeeper's current one, that no segment holds" in str(
        part.coverage_error
    )
    # an older epoch's rows with no channel left: not judged (README, "not checked")
    result, part = _verify(channels=FakeChannels({}, {}), epoch=lambda _p: (2, 2))
    assert result.ok, part.coverage_error
    # a leader placement the partition does not list (its channels not read): not judged either
    result, part = _verify(channels=FakeChannels({}, {}), epoch=lambda _p: (1, 7))
    assert result.ok, part.coverage_error


def test_a_zookeeper_blip_at_the_epoch_read_neither_hides_nor_passes_the_gone_channel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same state as above with ZooKeeper failing once at verify's epoch read: it is asked again
    (it passed as agreeing: an audit's proof); never answering, the versions are not judged and verify
    says so, failing."""
    import shoal_app.cli.verify as verify_module

    monkeypatch.setattr(verify_module.time, "sleep", lambda _s: None)
    calls: list[int] = []

    def blip_once(_pid: str) -> tuple[int, int]:
        calls.append(1)
        if len(calls) == 1:
            raise ZooKeeperUnavailableError("read epoch: connection lost")
        return 1, 1

    result, part = _verify(channels=FakeChannels({}, {}), epoch=blip_once)
    assert not result.ok and "that leader's WAL channel is gone" in str(part.coverage_error)

    def down(_pid: str) -> tuple[int, int]:
        raise ZooKeeperUnavailableError("read epoch: connection lost")

    result, part = _verify(channels=FakeChannels({}, {}), epoch=down)
    assert not result.ok and "versions newer than the channels were not judged" in str(part.coverage_error)


def test_a_metadata_change_meanwhile_is_not_judged_as_a_gone_channel() -> None:
    result, part = _verify(channels=FakeChannels({}, {}), metadata_moved=lambda: True)
    assert not result.ok and "METADATA changed" in str(part.coverage_error)
    assert "channel is gone" not in str(part.coverage_error)


def test_a_leader_elected_after_the_first_read_is_judged_on_its_new_channel() -> None:
    """ZooKeeper's leader had no WAL channel when verify read the channels (it never led before);
    elected meanwhile, it created its channel and wrote the row the replicas then hold: read again,
    the channel holds it, so that is no gone channel."""
    channels = FakeChannels({}, {})

    def scan(_server: str, _pid: str) -> Any:
        channels.wal[WAL] = _channels().wal[WAL]  # the new leader's channel and its first record
        return GOOD

    result, part = _verify(channels=channels, rows=scan)
    assert result.ok, part.coverage_error
    # its channel there but without the row: a version nobody wrote
    channels = FakeChannels({}, {})

    def scan_empty_channel(_server: str, _pid: str) -> Any:
        channels.wal[WAL] = (0, [])
        return GOOD

    result, part = _verify(channels=channels, rows=scan_empty_channel)
    assert not result.ok and "read again after its scan, do not" in str(part.coverage_error), part.coverage_error
