"""Split pieces (seed 000 section 3.8): the parent's chain rewritten by key range keeping segment ids."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from metadata.keyspace import UNBOUNDED, KeyRange, Keyspace
from metadata.table import Column, ColumnType, TableDefinition
from shoal.ids import new_partition_id
from shoal.wire.arrow_ipc import decode_batch, encode_batch
from shoal.wire.ingest import TABLE_HEADER, ingest_schema
from shoal.wire.records import Gtid
from storage_node.replica import PartitionReplica, versioned_rows
from storage_node.replica.validate import IngestValidator, Rejected
from storage_node.replication.split import (
    FORWARD_PIECE_BYTES,
    chain_max_gtid,
    key_range_mask,
    route_ingest_message,
    route_valid_message,
    stage_pieces,
    staging_replica,
)

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)
U = Keyspace.UINT64.encode


def ingest(keys: list[int], value: str = "x") -> pa.Table:
    return pa.table(
        {"k": pa.array(keys, pa.uint64()), "v": [value] * len(keys), "_shoal_deleted": [False] * len(keys)},
        schema=ingest_schema(TABLE.arrow_schema()),
    )


def test_key_range_mask_uint64_and_string() -> None:
    col = pa.array([0, 99, 100, 150, 2**64 - 1], pa.uint64())
    assert key_range_mask(col, KeyRange(UNBOUNDED, U(100)), Keyspace.UINT64).to_pylist() == [1, 1, 0, 0, 0]
    assert key_range_mask(col, KeyRange(U(100), UNBOUNDED), Keyspace.UINT64).to_pylist() == [0, 0, 1, 1, 1]
    s = pa.array(["", "a", "m", "mz", "zz", "é"])
    ks = Keyspace.STRING
    assert key_range_mask(s, KeyRange(ks.encode("m"), ks.encode("z")), ks).to_pylist() == [0, 0, 1, 1, 0, 0]
    assert key_range_mask(s, KeyRange(ks.encode("z"), UNBOUNDED), ks).to_pylist() == [0, 0, 0, 0, 1, 1]


def test_pieces_keep_ids_bases_and_gtids(tmp_path: Path) -> None:
    parent = PartitionReplica(TABLE, new_partition_id(), 7, tmp_path)
    parent.append(versioned_rows(ingest([1, 50, 100, 200]), Gtid(2, 0)), 0)
    parent.flush(2)
    parent.append(versioned_rows(ingest([60, 300], "y"), Gtid(2, 4)), 1)
    parent.flush(2)
    low_id, high_id = new_partition_id(), new_partition_id()
    low = staging_replica(TABLE, low_id, parent.placement_id, tmp_path)
    high = staging_replica(TABLE, high_id, parent.placement_id, tmp_path)
    staged = stage_pieces(parent, [(low, KeyRange(UNBOUNDED, U(100))), (high, KeyRange(U(100), UNBOUNDED))])
    pieces = [p for st, p in staged if st is low]
    assert [p.rows for st, p in staged if st is high] == [2, 1]
    parent_chain = [(e.segment_id, e.base_segment_id, e.is_major, e.epoch) for e in parent.chain.walk()]
    for staged in (low, high):
        assert [(e.segment_id, e.base_segment_id, e.is_major, e.epoch) for e in staged.chain.walk()] == parent_chain
        assert staged.chain.root == parent.chain.root
    assert [p.max_gtid for p in pieces] == [(2, 3), (2, 5)]
    assert sorted(low.scan().column("k").to_pylist()) == [1, 50, 60]
    assert sorted(high.scan().column("k").to_pylist()) == [100, 200, 300]
    both = low.scan(include_system=True).to_pylist() + high.scan(include_system=True).to_pylist()
    assert sorted(both, key=lambda r: r["k"]) == parent.scan(include_system=True).to_pylist()
    assert stage_pieces(parent, [(low, KeyRange(UNBOUNDED, U(100)))]) == []  # already staged: nothing again
    assert chain_max_gtid(parent) == (2, 5)


def test_route_ingest_message_splits_by_the_point() -> None:
    low, high = new_partition_id(), new_partition_id()
    parent = IngestValidator(TABLE, KeyRange(UNBOUNDED, UNBOUNDED))
    routed = route_ingest_message(encode_batch(ingest([5, 150, 99, 100])), parent, U(100), low, high)
    assert [(pid, decode_batch(b).column("k").to_pylist()) for pid, b in routed] == [(low, [5, 99]), (high, [150, 100])]
    only_high = route_ingest_message(encode_batch(ingest([100])), parent, U(100), low, high)
    assert [pid for pid, _ in only_high] == [high]
    assert route_ingest_message(b"not arrow", parent, U(100), low, high) == [(low, b"not arrow")]


@pytest.mark.parametrize(
    "keys",
    [
        pa.array([-1, 5], pa.int64()),  # another key type: once made the forwarder raise and stop for good
        pa.array(["abc"], pa.string()),
        pa.array([1, None, 200], pa.uint64()),  # a null key: the parent refuses the whole message
    ],
)
def test_a_message_the_parent_would_refuse_goes_whole_to_the_low_child(keys: pa.Array) -> None:
    low, high = new_partition_id(), new_partition_id()
    parent = IngestValidator(TABLE, KeyRange(UNBOUNDED, UNBOUNDED))
    bad = encode_batch(pa.table({"k": keys, "v": ["x"] * len(keys), "_shoal_deleted": [False] * len(keys)}))
    assert isinstance(parent.validate(bad), Rejected)
    assert route_ingest_message(bad, parent, U(100), low, high) == [(low, bad)]
    # so is a message naming another table, and keys outside the parent's own range
    other = [(TABLE_HEADER, b"other")]
    good = encode_batch(ingest([5]))
    assert route_ingest_message(good, parent, U(100), low, high, other) == [(low, good)]
    upper = IngestValidator(TABLE, KeyRange(U(50), UNBOUNDED))
    assert route_ingest_message(good, upper, U(100), low, high) == [(low, good)]


def _hard_compressed(keys: list[int], block: str) -> bytes:
    """A message another writer compressed at zstd level 19: its long match window sees repeats of
    ``block`` that Arrow's default level (a 512 KiB window) cannot, so encoded again it grows."""
    sink = pa.BufferOutputStream()
    rows = ingest(keys).set_column(1, "v", pa.array([block] * len(keys)))
    options = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", 19))
    with pa.ipc.new_stream(sink, rows.schema, options=options) as w:
        w.write_table(rows)
    return sink.getvalue().to_pybytes()


def test_a_straggler_another_writer_compressed_harder_is_forwarded_within_the_ingest_limit() -> None:
    import os

    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    block = bytes(alphabet[b & 63] for b in os.urandom(1024 * 1024)).decode()  # random: ~6 bits a byte
    low, high = new_partition_id(), new_partition_id()
    keys = list(range(0, 200, 25))  # 8 rows of the same 1 MiB value: 4 below the split point, 4 above
    message = _hard_compressed(keys, block)
    limit = 2 * len(message)
    parent = IngestValidator(TABLE, KeyRange(UNBOUNDED, UNBOUNDED), max_bytes=limit)
    assert not isinstance(parent.validate(message), Rejected)
    assert len(encode_batch(ingest(keys[:4]).set_column(1, "v", pa.array([block] * 4)))) > limit  # as it was sent
    # all rows to one child: the message itself, not a larger copy
    assert route_ingest_message(message, parent, U(1000), low, high) == [(low, message)]
    assert route_ingest_message(message, parent, U(0), low, high) == [(high, message)]
    # split: each child's rows cut into pieces the child's leader accepts, in order, none lost
    routed = route_ingest_message(message, parent, U(100), low, high)
    assert all(len(piece) <= limit for _, piece in routed), [len(p) for _, p in routed]
    assert [pid for pid, _ in routed] == sorted([pid for pid, _ in routed], key=[low, high].index)
    assert len(routed) > 2
    child = IngestValidator(TABLE, KeyRange(UNBOUNDED, UNBOUNDED), max_bytes=limit)
    decoded = [(pid, child.validate(piece)) for pid, piece in routed]
    assert [(pid, k) for pid, t in decoded for k in t.column("k").to_pylist()] == [  # type: ignore[union-attr]
        (low, 0),
        (low, 25),
        (low, 50),
        (low, 75),
        (high, 100),
        (high, 125),
        (high, 150),
        (high, 175),
    ]
    assert all(v == block for _, t in decoded for v in t.column("v").to_pylist())  # type: ignore[union-attr]
    assert route_ingest_message(encode_batch(ingest([])), parent, U(100), low, high) == []
    assert all(len(piece) <= FORWARD_PIECE_BYTES for _, piece in routed)  # what a child's topic takes


def test_a_straggler_with_a_row_no_piece_can_hold_goes_whole_to_the_low_child(monkeypatch: pytest.MonkeyPatch) -> None:
    import storage_node.replication.split as split

    low, high = new_partition_id(), new_partition_id()
    parent = IngestValidator(TABLE, KeyRange(UNBOUNDED, UNBOUNDED))
    import os

    message = encode_batch(ingest([5, 150], value=os.urandom(3000).hex()))  # ~3 KB a row compressed
    monkeypatch.setattr(split, "FORWARD_PIECE_BYTES", 2000)  # a piece may be as large as the message
    assert [pid for pid, _ in route_ingest_message(message, parent, U(100), low, high)] == [low, high]
    monkeypatch.setattr(split, "_pieces", lambda _rows, _limit: None)  # a row that does not fit alone
    assert route_ingest_message(message, parent, U(100), low, high) == [(low, message)]
    rows = parent.validate(message, None)
    assert not isinstance(rows, Rejected)
    assert route_valid_message(message, rows, parent, U(100), low, high) is None  # the forwarder refuses it
