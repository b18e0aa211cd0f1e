"""``shoal verify`` reads a split parent's channels after SPLIT_FINALIZE (:mod:`shoal_app.cli.verify_retired`).

Pure: the METADATA versions of a real split (create, SPLIT_PARTITION, SPLIT_FINALIZE), the parent's
WAL channel with real Arrow payloads, the children's replicas as their scans return them.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from test_verify_coverage import _batch, _records, _replica
from test_verify_gtids import TABLE, TOPICS, FakeChannels

from metadata.keyspace import Keyspace
from metadata.metadata_file import MetadataFile, Placement, retired_partitions
from metadata.operations import (
    FinalizeJoin,
    FinalizeLeave,
    FinalizeSplit,
    JoinServer,
    LeaveServer,
    SplitPartition,
    apply_change,
    create_file,
)
from shoal.wire.records import Gtid
from shoal_app.cli import verify as verify_module
from shoal_app.cli.verify import verify

POINT = 100


def _empty() -> pa.Table:
    """An empty replica's scan, typed as a node returns it."""
    return _replica([(0, "", 0, 0)]).slice(0, 0)


def _split() -> list[MetadataFile]:
    """The three versions of a table whose one partition (node-1 #1) split at 100: low on node-1 #2,
    high on node-2 #3."""
    created = create_file(TABLE, [(Placement("node-1", 1),)])
    parent = created.partitions[0].partition_id
    splitting = apply_change(
        created,
        SplitPartition(parent, Keyspace.UINT64.encode(POINT), (Placement("node-1", 2),), (Placement("node-2", 3),)),
    )
    final = apply_change(splitting, FinalizeSplit(parent, through=(1, 2), acked={2: (1, 2), 3: (1, 2)}))
    return [created, splitting, final]


def _client(history: list[MetadataFile]) -> Any:
    return SimpleNamespace(
        coordinator=SimpleNamespace(current=lambda _table: history[-1], history=lambda _table: history),
        config=SimpleNamespace(topic_prefix="shoal", kafka=None),
    )


def _described(file: MetadataFile) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for entry, key_range in file.ranges():
        key = file.table.keyspace.decode(key_range.begin) if key_range.begin else 0
        for p in entry.servers:
            out.setdefault(p.server_id, []).append(
                {
                    "partition_id": entry.partition_id,
                    "placement_id": p.placement_id,
                    "row_count": 1,
                    "key_min": key,
                    "key_max": key,
                    "content_hash": "h",
                    "chain": [],
                    "root": None,
                }
            )
    return out


def _run(history: list[MetadataFile], channels: FakeChannels, rows: dict[str, pa.Table]) -> Any:
    described = _described(history[-1])
    return verify(
        _client(history),
        "events",
        channels=channels,
        describe=lambda server: described[server],
        rows=lambda _server, pid: rows[pid],
    )


def test_retired_partitions_are_those_an_earlier_version_listed() -> None:
    history = _split()
    parent = history[0].partitions[0].partition_id
    (found,) = retired_partitions(history)
    assert found.entry.partition_id == parent and found.entry.splitting  # its last entry: the split recorded
    assert found.key_range.begin == b"" and found.key_range.end == b""  # the whole keyspace
    assert retired_partitions(history[:2]) == []  # splitting: still listed


def test_a_write_on_a_split_parents_channel_that_a_child_lacks_is_a_mismatch() -> None:
    history = _split()
    parent = history[0].partitions[0].partition_id
    low, high = (e.partition_id for e in history[-1].partitions)
    wal = _records(parent, 1, [(Gtid(1, 0), _batch([5, POINT], ["a", "b"], [False, False]))])
    channels = FakeChannels({TOPICS.wal(parent, 1): (0, wal)}, {})

    held = {low: _replica([(5, "a", 1, 0)]), high: _replica([(POINT, "b", 1, 1)])}
    report = _run(history, channels, held)
    assert report.ok, report
    (retired,) = report.retired
    assert retired.partition_id == parent and retired.covered is True and retired.channels_ok
    assert [c.records for c in retired.wal_channels] == [1]

    # the high child (node-2 #3) lost the row at the split point: every listed partition agrees
    # with itself, only the parent's channel shows it
    lost = {low: held[low], high: _empty()}
    report = _run(history, channels, lost)
    assert not report.ok and all(p.agree and p.covered for p in report.partitions)
    assert report.retired[0].covered is False
    assert "node-2#3 misses 1 of 1 writes" in (report.retired[0].coverage_error or ""), report.retired[0]
    assert "now in [100, +inf)" in (report.retired[0].coverage_error or ""), report.retired[0]

    # a newer version in the child reaches the parent's floor; an older one does not
    newer = {low: _replica([(5, "z", 2, 0)]), high: held[high]}
    assert _run(history, channels, newer).ok
    wal_newer = _records(parent, 1, [(Gtid(3, 0), _batch([5, POINT], ["a", "b"], [False, False]))])
    stale = _run(history, FakeChannels({TOPICS.wal(parent, 1): (0, wal_newer)}, {}), newer)
    assert not stale.ok and stale.retired[0].covered is False


def test_a_childs_version_at_a_gtid_its_parent_never_wrote_is_a_mismatch() -> None:
    """The parent's WAL channel holds every GTID of epoch 1 from 1:0 (k=5 'a' at 1:0, k=100 at 1:1);
    every replica of the low child holds k=5 at 1:7 (a tombstone or other values) or at 1:1, GTIDs
    at which the parent wrote no k=5: the child's own channels are empty, so only the parent's tell."""
    history = _split()
    parent = history[0].partitions[0].partition_id
    low, high = (e.partition_id for e in history[-1].partitions)
    wal = _records(parent, 1, [(Gtid(1, 0), _batch([5, POINT], ["a", "b"], [False, False]))])
    channels = FakeChannels({TOPICS.wal(parent, 1): (0, wal)}, {})
    tomb = _replica([(5, "", 1, 7)])
    tomb = tomb.set_column(tomb.schema.get_field_index("v"), "v", pa.array([None], pa.string()))
    tomb = tomb.set_column(tomb.schema.get_field_index("_shoal_deleted"), "_shoal_deleted", pa.array([True]))
    for low_rows, gtid in ((tomb, "1:7"), (_replica([(5, "WRONG", 1, 7)]), "1:7"), (_replica([(5, "a", 1, 1)]), "1:1")):
        report = _run(history, channels, {low: low_rows, high: _replica([(POINT, "b", 1, 1)])})
        (retired,) = report.retired
        assert not report.ok and retired.covered is False
        assert "newer than the retired partition's channels at GTIDs its WAL channels hold every write of" in (
            retired.coverage_error or ""
        ), retired.coverage_error
        assert f"k=5 at gtid {gtid}" in (retired.coverage_error or "")
    # a child's own write, with an epoch above the parent's, is not the parent's to judge
    assert _run(history, channels, {low: _replica([(5, "new", 2, 0)]), high: _replica([(POINT, "b", 1, 1)])}).ok


def test_a_retired_partition_whose_channels_are_gone_has_nothing_left_to_check() -> None:
    history = _split()
    low, high = (e.partition_id for e in history[-1].partitions)
    report = _run(history, FakeChannels({}, {}), {low: _empty(), high: _empty()})
    assert report.ok and report.retired[0].covered is True
    assert all(c.tail is None and c.ok for c in (*report.retired[0].wal_channels, *report.retired[0].segments_channels))


def test_a_broken_chain_on_a_retired_channel_is_a_mismatch() -> None:
    history = _split()
    parent = history[0].partitions[0].partition_id
    low, high = (e.partition_id for e in history[-1].partitions)
    first = _records(parent, 1, [(Gtid(1, 0), _batch([5], ["a"], [False]))])
    second = _records(parent, 1, [(Gtid(1, 1), _batch([6], ["b"], [False]))], first_offset=1)  # from genesis again
    report = _run(
        history,
        FakeChannels({TOPICS.wal(parent, 1): (0, first + second)}, {}),
        {low: _replica([(5, "a", 1, 0), (6, "b", 1, 1)]), high: _empty()},
    )
    assert not report.ok and not report.retired[0].channels_ok


def test_a_child_writing_with_an_epoch_not_above_its_parents_is_a_mismatch() -> None:
    """The parent wrote k=5 'old' at 5:0, the low child then acknowledged k=5 'new' at 1:0: 'old' wins
    everywhere, and it reaches both floors (a newer GTID), so verify agreed. Epochs must go up across
    a split (the splitter seeds the children's)."""
    history = _split()
    parent = history[0].partitions[0].partition_id
    low, high = (e.partition_id for e in history[-1].partitions)
    wal = {TOPICS.wal(parent, 1): (0, _records(parent, 1, [(Gtid(5, 0), _batch([5], ["old"], [False]))]))}
    held = {low: _replica([(5, "old", 5, 0)]), high: _empty()}

    def with_child(epoch: int) -> Any:
        child = _records(low, 2, [(Gtid(epoch, 0), _batch([5], ["new"], [False]))])
        return _run(history, FakeChannels({**wal, TOPICS.wal(low, 2): (0, child)}, {}), held)

    below = with_child(1)
    assert not below.ok and not below.retired[0].channels_ok
    assert f"partition {low} (now holding keys of" in (below.retired[0].gtid_error or "")
    assert "wrote with epoch 1, not above this partition's epoch 5" in (below.retired[0].gtid_error or "")
    assert not with_child(5).ok  # the same epoch is not above either
    # a child above its parent: the child's own coverage sees 'old' hiding its newer write
    above = with_child(6)
    assert above.retired[0].channels_ok and above.retired[0].gtid_error is None
    assert not above.ok and above.partitions[0].covered is False


def test_the_text_output_names_a_retired_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    history = _split()
    parent = history[0].partitions[0].partition_id
    low, high = (e.partition_id for e in history[-1].partitions)
    wal = _records(parent, 1, [(Gtid(1, 0), _batch([5, POINT], ["a", "b"], [False, False]))])
    described = _described(history[-1])
    rows = {low: _replica([(5, "a", 1, 0)]), high: _empty()}

    class FakeMetadataClient:
        def __init__(self, _config: object) -> None:
            self.config = SimpleNamespace(topic_prefix="shoal", kafka=None)
            self.coordinator = _client(history).coordinator
            self.zk, self.layout = None, None

        def __enter__(self) -> FakeMetadataClient:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    monkeypatch.setattr(verify_module, "MetadataClient", FakeMetadataClient)
    monkeypatch.setattr(
        verify_module, "KafkaChannels", lambda _kafka: FakeChannels({TOPICS.wal(parent, 1): (0, wal)}, {})
    )
    monkeypatch.setattr("metadata.node_registry.lookup_node", lambda _zk, _layout, server: server)
    monkeypatch.setattr(
        "metadata.election.read_epoch", lambda _zk, _layout, _pid: SimpleNamespace(epoch=1, placement_id=None)
    )
    monkeypatch.setattr("shoal.scan.describe_remote", lambda server, _t: described[server])
    monkeypatch.setattr("shoal.scan.scan_remote", lambda _location, request, **_k: rows[request.partition_id])
    res = CliRunner().invoke(verify_module.verify_command, ["events", "--zk", "z:1", "--bootstrap-servers", "b:1"])
    assert res.exit_code == 1, res.output
    assert f"retired partition {parent}" in res.output and "WRITES MISSING" in res.output, res.output


def _moved() -> list[MetadataFile]:
    """A partition on node-1 #1 moved to node-2 #2: JOIN_SERVER, FINALIZE_JOIN, LEAVE_SERVER of
    node-1, FINALIZE_LEAVE."""
    created = create_file(TABLE, [(Placement("node-1", 1),)])
    pid = created.partitions[0].partition_id
    out = [created]
    for change in (
        JoinServer(pid, Placement("node-2", 2)),
        FinalizeJoin(pid, 2),
        LeaveServer(pid, "node-1"),
        FinalizeLeave(pid, 1),
    ):
        out.append(apply_change(out[-1], change))
    return out


def test_a_write_on_a_removed_placements_channel_that_the_replicas_lack_is_a_mismatch() -> None:
    """A placement that led and left keeps its channels until its UNLOAD_FINAL deletes them, after
    FINALIZE_LEAVE took it off METADATA: verify reads them, so a write only they hold (an adoption
    that missed it) is a mismatch; once they are gone, nothing is left to check."""
    history = _moved()
    pid = history[0].partitions[0].partition_id
    wal = _records(pid, 1, [(Gtid(1, 0), _batch([5, 6], ["a", "b"], [False, False]))])
    lacks = {pid: _replica([(5, "a", 1, 0)])}
    report = _run(history, FakeChannels({TOPICS.wal(pid, 1): (0, wal)}, {}), lacks)
    (part,) = report.partitions
    assert not report.ok and part.covered is False and "k=6 written at gtid 1:1" in (part.coverage_error or "")
    assert [c.topic for c in part.wal_channels] == [TOPICS.wal(pid, 2), TOPICS.wal(pid, 1)]
    holds = {pid: _replica([(5, "a", 1, 0), (6, "b", 1, 1)])}
    assert _run(history, FakeChannels({TOPICS.wal(pid, 1): (0, wal)}, {}), holds).ok
    # its channels deleted at UNLOAD_FINAL: a channel gone is no loss
    assert _run(history, FakeChannels({}, {}), lacks).ok


def test_a_write_on_the_channel_of_a_placement_that_left_a_split_parent_is_checked_after_the_split() -> None:
    """Placement 1 led the parent, then left it (FINALIZE_LEAVE) before the split; its channels stay
    until its UNLOAD_FINAL. Once the parent is retired its removed placements' channels are read
    too, so a write only they hold, which no child has, is a mismatch."""
    moved = _moved()
    parent = moved[0].partitions[0].partition_id
    history = [
        *moved,
        apply_change(
            moved[-1],
            SplitPartition(parent, Keyspace.UINT64.encode(POINT), (Placement("node-1", 3),), (Placement("node-2", 4),)),
        ),
    ]
    history.append(apply_change(history[-1], FinalizeSplit(parent, through=(1, 2), acked={3: (1, 2), 4: (1, 2)})))
    low, high = (e.partition_id for e in history[-1].partitions)
    wal = _records(parent, 1, [(Gtid(1, 0), _batch([5], ["a"], [False]))])
    report = _run(history, FakeChannels({TOPICS.wal(parent, 1): (0, wal)}, {}), {low: _empty(), high: _empty()})
    (retired,) = report.retired
    assert TOPICS.wal(parent, 1) in [c.topic for c in retired.wal_channels]
    assert not report.ok and retired.covered is False, retired


def test_a_childs_phantom_at_a_parent_epoch_whose_wal_records_the_tail_all_truncated_is_a_mismatch() -> None:
    """The parent flushed k=5 'a' at 1:0 and k=100 at 1:1 into its own major, and its Tail emptied its
    WAL channel: no WAL record of epoch 1 is left, but the parent's own flushes hold epoch 1, so a
    child's k=5 at 1:7 (a tombstone or other values) is a GTID the parent never wrote."""
    from test_verify_coverage import _segment
    from test_verify_gtids import _manifest

    history = _split()
    parent = history[0].partitions[0].partition_id
    low, high = (e.partition_id for e in history[-1].partitions)
    wal = _records(parent, 1, [(Gtid(1, 0), _batch([5, POINT], ["a", "b"], [False, False]))])
    major, data = _segment(
        _manifest(parent, 1, 1, (0, 1), (Gtid(1, 0), Gtid(1, 1)), segment_id="aa" * 16),
        [(5, "a", 1, 0, False), (POINT, "b", 1, 1, False)],
    )
    channels = FakeChannels(
        {TOPICS.wal(parent, 1): (1, [])}, {TOPICS.segments(parent, 1): [major]}, {major.segment_id: data}
    )
    assert wal  # the record the Tail truncated
    held_high = _replica([(POINT, "b", 1, 1)])
    assert _run(history, channels, {low: _replica([(5, "a", 1, 0)]), high: held_high}).ok
    assert _run(history, channels, {low: _replica([(5, "new", 2, 0)]), high: held_high}).ok  # the child's epoch
    report = _run(history, channels, {low: _replica([(5, "WRONG", 1, 7)]), high: held_high})
    assert not report.ok and "k=5 at gtid 1:7" in (report.retired[0].coverage_error or ""), report.retired[0]
