"""Epoch evidence verify must not lose (DESIGN.md section 7, TokuMX's GTIDs): a leader term that
survives only as its own flushed segment once the Tail truncated its WAL records, and a retired
split parent compared with a retired child (a child that split in turn), not only with the
partitions listed now. Each case passed as agreeing while the user's newest write was lost."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
from test_verify_channels import _described
from test_verify_coverage import _batch, _records, _replica, _segment
from test_verify_gtids import TABLE, TOPICS, FakeChannels, _client, _manifest

from metadata.keyspace import Keyspace
from metadata.metadata_file import Placement
from metadata.operations import FinalizeSplit, SplitPartition, apply_change, create_file
from shoal.wire.records import Gtid
from shoal_app.cli.verify import verify


def _split_once() -> list[Any]:
    """METADATA of a one-partition table (node-1 #1) split at 100 into node-1 #2 and node-2 #3,
    finalized through 5:0: [created, splitting, finalized]."""
    created = create_file(TABLE, [(Placement("node-1", 1),)])
    p = created.partitions[0].partition_id
    s1 = apply_change(
        created, SplitPartition(p, Keyspace.UINT64.encode(100), (Placement("node-1", 2),), (Placement("node-2", 3),))
    )
    return [created, s1, apply_change(s1, FinalizeSplit(p, through=(5, 0), acked={2: (5, 0), 3: (5, 0)}))]


def _verify_history(
    history: list[Any], channels: FakeChannels, rows: dict[str, pa.Table], epochs: dict[str, tuple[int, int]]
) -> Any:
    """verify over a METADATA ``history`` (oldest first): every listed replica holds ``rows`` of its
    partition, ZooKeeper's epochs are ``epochs``."""
    described: dict[str, list[dict[str, Any]]] = {}
    for entry, _range in history[-1].ranges():
        keys = rows[entry.partition_id].column("k").to_pylist()
        for placement in entry.servers:
            described.setdefault(placement.server_id, []).append(
                {
                    **_described(entry.partition_id, placement.placement_id),
                    "row_count": len(keys),
                    "key_min": min(keys) if keys else None,
                    "key_max": max(keys) if keys else None,
                }
            )
    client = SimpleNamespace(
        coordinator=SimpleNamespace(current=lambda _t: history[-1], history=lambda _t: history),
        config=SimpleNamespace(topic_prefix="shoal", kafka=None),
    )
    return verify(
        client,  # type: ignore[arg-type]
        "events",
        channels=channels,
        describe=lambda s: described[s],
        rows=lambda _s, pid: rows[pid],
        epoch=lambda pid: epochs[pid],
    )


def test_an_epoch_reused_after_the_first_leaders_wal_was_truncated_is_a_mismatch() -> None:
    """Placement 1 led at epoch 3 (k=1 'a' 3:0, 'a2' 3:1), flushed both into its own segment and its
    Tail emptied its WAL channel; placement 2 then led with the same epoch 3 and stamped the later
    write k=1 'b' 3:0, which loses to 3:1 on every replica. The segment still names writer epoch 3."""
    file = create_file(replace(TABLE, replication_factor=2), [(Placement("node-1", 1), Placement("node-2", 2))])
    pid = file.partitions[0].partition_id
    w1, w2, s1 = TOPICS.wal(pid, 1), TOPICS.wal(pid, 2), TOPICS.segments(pid, 1)
    first = _records(pid, 1, [(Gtid(3, 0), _batch([1], ["a"], [False])), (Gtid(3, 1), _batch([1], ["a2"], [False]))])
    manifest = _manifest(pid, 1, 3, (0, 2), (Gtid(3, 0), Gtid(3, 1)), segment_id="cd" * 16, is_major=False)
    manifest, data = _segment(manifest, [(1, "a2", 3, 1, False)])
    second = _records(pid, 2, [(Gtid(3, 0), _batch([1], ["b"], [False]))])

    def run(first_wal: tuple[int, list[Any]]) -> Any:
        channels = FakeChannels({w1: first_wal, w2: (0, second)}, {s1: [manifest]}, {manifest.segment_id: data})
        return verify(
            _client(file),
            "events",
            channels=channels,
            describe=lambda s: [{**_described(pid, 1 if s == "node-1" else 2), "key_min": 1, "key_max": 1}],
            rows=lambda _s, _p: _replica([(1, "a2", 3, 1)]),
            epoch=lambda _pid: (3, 2),
        )

    assert not run((0, first)).ok  # the first leader's records still there: two leaders at epoch 3
    report = run((2, []))  # truncated into its segment (Tail 2)
    assert not report.ok
    (part,) = report.partitions
    assert part.gtid_error is not None and "epoch 3" in part.gtid_error, part


def test_a_child_stamping_below_its_parent_is_a_mismatch_after_the_child_split_too() -> None:
    """P (epoch 5: k=5 'old') splits into C_low and C_high; C_low wrote the later k=5 'NEW' at epoch 3,
    below its parent's, then split into G_low and G_high. G_low's replicas serve 'old'."""
    history = _split_once()
    created, _, f1 = history
    p = created.partitions[0].partition_id
    c_low, c_high = (e.partition_id for e in f1.partitions)
    s2 = apply_change(
        f1, SplitPartition(c_low, Keyspace.UINT64.encode(50), (Placement("node-1", 4),), (Placement("node-2", 5),))
    )
    f2 = apply_change(s2, FinalizeSplit(c_low, through=(3, 0), acked={4: (3, 0), 5: (3, 0)}))
    history = [*history, s2, f2]
    g_low, g_high, _ = (e.partition_id for e in f2.partitions)
    channels = FakeChannels(
        {
            TOPICS.wal(p, 1): (0, _records(p, 1, [(Gtid(5, 0), _batch([5], ["old"], [False]))])),
            TOPICS.wal(c_low, 2): (0, _records(c_low, 2, [(Gtid(3, 0), _batch([5], ["NEW"], [False]))])),
            TOPICS.wal(g_low, 4): (0, _records(g_low, 4, [(Gtid(6, 0), _batch([7], ["g"], [False]))])),
        },
        {},
    )
    empty = _replica([(0, "", 0, 0)]).slice(0, 0)
    rows: dict[str, pa.Table] = {
        g_low: _replica([(5, "old", 5, 0), (7, "g", 6, 0)]),
        g_high: empty,
        c_high: empty,
    }
    report = _verify_history(history, channels, rows, {g_low: (6, 4), g_high: (6, 5), c_high: (6, 3)})
    assert not report.ok
    parent = next(r for r in report.retired if r.partition_id == p)
    assert parent.gtid_error is not None and "epoch 3, not above this partition's epoch 5" in parent.gtid_error


def test_a_major_written_in_a_later_term_adds_no_epoch_the_parent_stamped_rows_in() -> None:
    """A split parent's leader resumed after SUSPENDED (epoch 5 -> 6) and committed a Spark major
    (writer epoch 6, rows at 5:0): its child's first leader took epoch 6. The child is healthy: no
    parent row has epoch 6, so the parent's terms are those of the GTIDs its own segments hold."""
    history = _split_once()
    created, _, f1 = history
    p = created.partitions[0].partition_id
    c_low, c_high = (e.partition_id for e in f1.partitions)

    # the parent: k=5 'old' stamped 5:0, flushed (minor, epoch 5); then (epoch 6 after a resume) a major of it
    minor, minor_data = _segment(
        _manifest(p, 1, 5, (0, 1), (Gtid(5, 0), Gtid(5, 0)), segment_id="cd" * 16, is_major=False),
        [(5, "old", 5, 0, False)],
    )
    major, major_data = _segment(
        _manifest(p, 1, 6, (0, 1), (Gtid(5, 0), Gtid(5, 0)), segment_id="ef" * 16, is_major=True),
        [(5, "old", 5, 0, False)],
    )

    def run(with_major: bool) -> Any:
        manifests = [minor, major] if with_major else [minor]
        channels = FakeChannels(
            {
                TOPICS.wal(p, 1): (0, _records(p, 1, [(Gtid(5, 0), _batch([5], ["old"], [False]))])),
                TOPICS.wal(c_low, 2): (0, _records(c_low, 2, [(Gtid(6, 0), _batch([7], ["new"], [False]))])),
            },
            {TOPICS.segments(p, 1): manifests},
            {minor.segment_id: minor_data, major.segment_id: major_data},
        )
        empty = _replica([(0, "", 0, 0)]).slice(0, 0)
        rows: dict[str, pa.Table] = {c_low: _replica([(5, "old", 5, 0), (7, "new", 6, 0)]), c_high: empty}
        return _verify_history(history, channels, rows, {c_low: (6, 2), c_high: (6, 3)})

    assert run(with_major=False).ok
    after = run(with_major=True)
    assert after.ok, [r.gtid_error for r in after.retired]
