from __future__ import annotations

import itertools

import pytest
from helpers_metadata import Ids, new_file, no_rows_acked

from metadata.keyspace import UINT64_MAX, UNBOUNDED, Keyspace
from metadata.metadata_file import MetadataFile
from metadata.operations import FinalizeSplit, SplitPartition
from metadata.partition_map import CachedPartitionMap, PartitionMap

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
given = hypothesis.given
settings = hypothesis.settings

U = Keyspace.UINT64.encode


def _check_cover(file: MetadataFile) -> None:
    ranges = [r for _, r in file.ranges()]
    assert ranges[0].begin == UNBOUNDED and ranges[-1].end == UNBOUNDED
    for a, b in itertools.pairwise(ranges):
        assert a.end == b.begin and a.begin < a.end  # no gap, no overlap, not empty


def _apply_splits(file: MetadataFile, ids: Ids, choices: list[tuple[int, object]], finalize: list[bool]):
    for (which, key), fin in zip(choices, finalize, strict=False):
        entry_index = which % len(file.partitions)
        entry = file.partitions[entry_index]
        krange = file.range_of(entry_index)
        point = file.table.keyspace.encode(key)
        if entry.splitting or not krange.strictly_inside(point) or point <= file.table.keyspace.lowest():
            continue
        file = SplitPartition(entry.partition_id, point, ids.place("node-1"), ids.place("node-2")).apply(file)
        _check_cover(file)
        if fin:
            file = FinalizeSplit(entry.partition_id, None, no_rows_acked(file, entry.partition_id)).apply(file)
            _check_cover(file)
    return file


@settings(max_examples=150, deadline=None)
@given(
    choices=st.lists(st.tuples(st.integers(0, 50), st.integers(0, UINT64_MAX)), max_size=30),
    finalize=st.lists(st.booleans(), min_size=30, max_size=30),
    probes=st.lists(st.integers(0, UINT64_MAX), max_size=50),
)
def test_any_splits_cover_uint64_keyspace(choices, finalize, probes) -> None:
    ids = Ids()
    file = _apply_splits(new_file(rf=1, ids=ids), ids, choices, finalize)
    file = MetadataFile.decode(file.encode())
    pmap = PartitionMap(file)
    for key in [*probes, 0, UINT64_MAX]:
        owners = [e.partition_id for e, r in file.ranges() if r.contains(U(key))]
        assert len(owners) == 1
        assert pmap.lookup(key).partition_id == owners[0]


@settings(max_examples=100, deadline=None)
@given(
    choices=st.lists(st.tuples(st.integers(0, 50), st.text(max_size=6)), max_size=25),
    finalize=st.lists(st.booleans(), min_size=25, max_size=25),
    probes=st.lists(st.text(max_size=8), max_size=40),
)
def test_any_splits_cover_string_keyspace(choices, finalize, probes) -> None:
    ids = Ids()
    file = _apply_splits(new_file(Keyspace.STRING, rf=1, ids=ids), ids, choices, finalize)
    pmap = PartitionMap(file)
    for key in [*probes, ""]:
        try:
            enc = Keyspace.STRING.encode(key)
        except Exception:
            continue
        owners = [e.partition_id for e, r in file.ranges() if r.contains(enc)]
        assert len(owners) == 1
        assert pmap.lookup(key).partition_id == owners[0]


def test_lookup_boundaries_and_splitting_parent_still_routes() -> None:
    ids = Ids()
    f = new_file(rf=1, split_points=(U(10), U(20)), ids=ids)
    pmap = PartitionMap(f)
    a, b, c = (e.partition_id for e in f.partitions)
    assert [pmap.lookup(k).partition_id for k in (0, 9, 10, 19, 20, UINT64_MAX)] == [a, a, b, b, c, c]
    f2 = SplitPartition(b, U(15), ids.place("node-1"), ids.place("node-2")).apply(f)
    route = PartitionMap(f2).lookup(17)
    assert route.partition_id == b and route.splitting


def test_cached_map_refreshes_and_never_goes_back() -> None:
    ids = Ids()
    f1 = new_file(rf=1, ids=ids)
    loads = []

    def loader() -> MetadataFile:
        loads.append(1)
        return f1

    cache = CachedPartitionMap(loader)
    assert cache.lookup(5).partition_id == f1.partitions[0].partition_id
    pid = f1.partitions[0].partition_id
    f2 = SplitPartition(pid, U(100), ids.place("node-1"), ids.place("node-2")).apply(f1)
    f3 = FinalizeSplit(pid, None, no_rows_acked(f2, pid)).apply(f2)
    cache.update(f3)
    assert cache.lookup(5).partition_id == f3.partitions[0].partition_id
    assert cache.lookup(500).partition_id == f3.partitions[1].partition_id
    cache.update(f2)  # stale notification
    assert cache.get().sequence == 3
    assert len(loads) == 1
