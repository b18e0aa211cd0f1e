from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pytest
from producer_unit_support import make_file

from metadata.keyspace import UINT64_MAX, Keyspace
from metadata.metadata_file import Placement
from metadata.operations import FinalizeSplit, SplitPartition
from metadata.partition_map import PartitionMap
from producer.errors import RoutingError
from producer.routing import partition_indexes, route

U = Keyspace.UINT64.encode
S = Keyspace.STRING.encode


def _reference(pmap: PartitionMap, keys: Sequence[object]) -> list[int]:
    ids = pmap.partition_ids()
    return [ids.index(pmap.lookup(k).partition_id) for k in keys]


@pytest.mark.parametrize("nsplits", [0, 1, 3, 40])
def test_uint64_routing_equals_brute_force(nsplits: int) -> None:
    rnd = random.Random(nsplits)
    points = sorted({rnd.randrange(1, UINT64_MAX) for _ in range(nsplits)})
    if nsplits:
        points[0] = 1  # the first (empty begin) partition holds key 0 alone (a split at 0 is refused)
    pmap = PartitionMap(make_file(Keyspace.UINT64, tuple(U(p) for p in points)))
    keys = [rnd.randrange(0, UINT64_MAX + 1) for _ in range(2000)]
    keys += [0, 1, UINT64_MAX, UINT64_MAX - 1, 2**63, 2**63 - 1]
    for p in points:
        keys += [p, max(0, p - 1), min(UINT64_MAX, p + 1)]
    idx = partition_indexes(pmap, pa.array(keys, pa.uint64()))
    assert idx.tolist() == _reference(pmap, keys)
    chunked = pa.chunked_array([pa.array(keys[:10], pa.uint64()), pa.array(keys[10:], pa.uint64())])
    assert partition_indexes(pmap, chunked).tolist() == idx.tolist()


@pytest.mark.parametrize("nsplits", [1, 5, 40])
def test_string_routing_equals_brute_force(nsplits: int) -> None:
    rnd = random.Random(100 + nsplits)
    alphabet = ["a", "b", "z", "\x00", "é", "中", "😀", "A", "~"]

    def word() -> str:
        return "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 5)))

    points = sorted({S(w) for w in (word() for _ in range(nsplits * 3)) if w})[:nsplits]
    pmap = PartitionMap(make_file(Keyspace.STRING, tuple(points)))
    keys = [word() for _ in range(1500)] + ["", "\x00", "\U0010ffff" * 3]
    for p in points:
        text = p.decode()
        keys += [text, text + "\x00", text[:-1]]
    idx = partition_indexes(pmap, pa.array(keys, pa.string()))
    assert idx.tolist() == _reference(pmap, keys)


def test_route_splits_rows_and_keeps_them_all() -> None:
    pmap = PartitionMap(make_file(Keyspace.UINT64, (U(100), U(200))))
    keys = np.random.default_rng(1).integers(0, 300, size=1000).astype(np.uint64)
    rows = pa.table({"k": pa.array(keys), "i": pa.array(np.arange(1000))})
    slices = route(pmap, rows, "k")
    assert [s.partition_id for s in slices] == pmap.partition_ids()
    seen = []
    for piece in slices:
        r = pmap.file.range_of(pmap.partition_ids().index(piece.partition_id))
        assert all(r.contains(U(k)) for k in piece.rows.column("k").to_pylist())
        seen += piece.rows.column("i").to_pylist()
        assert piece.rows.column("i").to_pylist() == sorted(piece.rows.column("i").to_pylist())  # input order kept
    assert sorted(seen) == list(range(1000))
    assert route(pmap, rows.slice(0, 0), "k") == []
    with pytest.raises(RoutingError, match="null"):
        route(pmap, pa.table({"k": pa.array([1, None], pa.uint64())}), "k")


def test_route_rows_already_in_partition_order() -> None:
    """Rows sorted by key (or all of one partition) are sliced, not copied: same slices as a shuffle."""
    pmap = PartitionMap(make_file(Keyspace.UINT64, (U(100), U(200))))
    keys = np.sort(np.random.default_rng(2).integers(0, 300, size=1000).astype(np.uint64))
    rows = pa.Table.from_batches(
        pa.table({"k": pa.array(keys), "i": pa.array(np.arange(1000))}).to_batches(max_chunksize=128)
    )
    slices = route(pmap, rows, "k")
    assert [s.partition_id for s in slices] == pmap.partition_ids()
    expected = _reference(pmap, keys.tolist())
    for n, piece in enumerate(slices):
        assert piece.rows.column("i").to_pylist() == [i for i, p in enumerate(expected) if p == n]
    middle = rows.filter(pa.array((keys >= 100) & (keys < 200)))
    only = route(pmap, middle, "k")
    assert [s.partition_id for s in only] == [pmap.partition_ids()[1]]
    assert only[0].rows.equals(middle)
    shuffled = rows.take(pa.array(np.random.default_rng(3).permutation(1000)))
    for a, b in zip(route(pmap, shuffled, "k"), slices, strict=True):
        assert a.partition_id == b.partition_id
        assert sorted(a.rows.column("i").to_pylist()) == b.rows.column("i").to_pylist()


def test_splitting_partition_keeps_writes_until_finalized() -> None:
    file = make_file(Keyspace.UINT64, (U(100),))
    parent = file.partitions[1].partition_id
    splitting = SplitPartition(parent, U(150), (Placement("node-1", 90),), (Placement("node-1", 91),)).apply(file)
    rows = pa.table({"k": pa.array([120, 170], pa.uint64())})
    assert [s.partition_id for s in route(PartitionMap(splitting), rows, "k")] == [parent]
    final = FinalizeSplit(parent, None, {90: None, 91: None}).apply(splitting)
    routed = route(PartitionMap(final), rows, "k")
    entry = splitting.partitions[1]
    assert [s.partition_id for s in routed] == [entry.split_partition_id_low, entry.split_partition_id_high]
