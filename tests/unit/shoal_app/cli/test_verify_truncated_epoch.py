"""A replica version newer than the channels' at a GTID whose WAL record the Tail truncated, of an
epoch that still has records on the channel: the Tail never passes what segments cover, so a real
write there is in a segment (or replaced by a newer version); every replica holding a phantom
tombstone or other values there passed as agreeing (an audit's proof), as the same phantom one
sequence number higher did not."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from test_verify_coverage import _batch, _records, _replica, _segment
from test_verify_gtids import TOPICS, FakeChannels, _manifest

from metadata.metadata_file import Placement
from metadata.operations import create_file
from metadata.table import Column, ColumnType, TableDefinition
from shoal.wire.records import Gtid
from shoal_app.cli.verify import verify
from shoal_app.cli.verify_retired import phantoms

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 2
)
FILE = create_file(TABLE, [(Placement("node-1", 1), Placement("node-2", 2))])
PID = FILE.partitions[0].partition_id
CLIENT: Any = SimpleNamespace(
    coordinator=SimpleNamespace(current=lambda _t: FILE, history=lambda _t: [FILE]),
    config=SimpleNamespace(topic_prefix="shoal", kafka=None),
)
# placement 1 led epoch 1, then epoch 2 on the same channel
RECORDS = _records(
    PID,
    1,
    [
        (Gtid(1, 0), _batch([1], ["a"], [False])),
        (Gtid(1, 1), _batch([2, 2, 2], ["b", "b2", "b3"], [False] * 3)),
        (Gtid(1, 4), _batch([5], ["e"], [False])),
        (Gtid(2, 0), _batch([6], ["f"], [False])),
    ],
)
MAJOR, DATA = _segment(
    _manifest(PID, 1, 1, (0, 3), (Gtid(1, 0), Gtid(1, 4)), segment_id="aa" * 16, is_major=True),
    [(1, "a", 1, 0, False), (2, "b3", 1, 3, False), (5, "e", 1, 4, False)],
)


def _tomb(k: int, e: int, s: int) -> pa.Table:
    t = _replica([(k, "", e, s)])
    t = t.set_column(t.schema.get_field_index("v"), "v", pa.array([None], pa.string()))
    return t.set_column(t.schema.get_field_index("_shoal_deleted"), "_shoal_deleted", pa.array([True]))


def _verify(first: pa.Table, tail: int = 2) -> Any:
    rest = _replica([(2, "b3", 1, 3), (5, "e", 1, 4), (6, "f", 2, 0)])
    scan = pa.concat_tables([first, rest], promote_options="permissive")
    # the Tail truncated the WAL below offset ``tail``: the major covers [0, 3)
    channels = FakeChannels(
        {TOPICS.wal(PID, 1): (tail, RECORDS[tail:])}, {TOPICS.segments(PID, 1): [MAJOR]}, {MAJOR.segment_id: DATA}
    )

    def described(server: str) -> list[dict[str, Any]]:
        placement = 1 if server == "node-1" else 2
        return [{"partition_id": PID, "placement_id": placement, "row_count": 4, "key_min": 1, "key_max": 6,
                 "content_hash": "same", "chain": ["aa" * 16], "root": "aa" * 16}]  # fmt: skip

    report = verify(CLIENT, "events", channels=channels, describe=described, rows=lambda _s, _p: scan,
                    epoch=lambda _pid: (2, 1))  # fmt: skip
    return report.ok, report.partitions[0].coverage_error


def test_the_acknowledged_version_below_the_first_record_read_agrees() -> None:
    ok, error = _verify(_replica([(1, "a", 1, 0)]))
    assert ok, error


@pytest.mark.parametrize(
    ("phantom", "gtid"),
    [
        (_tomb(1, 1, 2), "1:2"),  # a delete nobody wrote, below the first record read of epoch 1
        (_replica([(1, "WRONG", 1, 2)]), "1:2"),
        (_replica([(1, "a-old", 1, 3)]), "1:3"),  # at another key's GTID
        (_tomb(1, 1, 5), "1:5"),  # above it: judged before as well
    ],
)
def test_a_version_below_the_first_record_of_an_epoch_the_wal_holds_is_judged(phantom: pa.Table, gtid: str) -> None:
    ok, error = _verify(phantom)
    assert not ok and f"k=1: a {'delete' if phantom['_shoal_deleted'][0].as_py() else 'row'} at gtid {gtid}" in str(
        error
    )


def test_a_split_child_holding_a_parent_version_below_its_first_record_is_a_phantom() -> None:
    newest = _replica([(1, "a", 1, 0), (2, "b", 1, 6)])
    first_seq = {1: 4}  # the retired parent's WAL channel holds epoch 1 from 1:4 on
    assert phantoms("node-1#3", _replica([(1, "a", 1, 0), (2, "b", 1, 6)]), newest, first_seq, ["k"]) == []
    assert phantoms("node-1#3", _replica([(1, "c", 5, 0)]), newest, first_seq, ["k"]) == []  # the child's epoch
    (problem,) = phantoms("node-1#3", _replica([(1, "x", 1, 2)]), newest, first_seq, ["k"])
    assert "k=1 at gtid 1:2" in problem


@pytest.mark.parametrize("phantom", [_tomb(1, 1, 2), _replica([(1, "WRONG", 1, 2)])])
def test_a_version_of_an_epoch_whose_wal_records_the_tail_all_truncated_is_judged(phantom: pa.Table) -> None:
    """Tail 3: no WAL record of epoch 1 is left, but placement 1's own major holds epoch 1 and its
    WAL channel exists, so every write of epoch 1 is on its channels: a phantom there passed as agreeing."""
    assert _verify(_replica([(1, "a", 1, 0)]), tail=3)[0]
    ok, error = _verify(phantom, tail=3)
    assert not ok and "k=1: a " in str(error) and "at gtid 1:2" in str(error), error
