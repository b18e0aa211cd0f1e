"""Columnar routing: which partition owns each row (EventQL table partitioning, section 2).

A partition covers ``[begin, next begin)``; the first begins at the lowest key (empty begin). For
each row, its partition index is the number of non-first begins that are <= its key, computed for
the whole batch at once:

- UINT64 keys: ``numpy.searchsorted`` of the key column (uint64) over the begins as uint64;
- STRING keys: with few partitions, the sum over begins of ``pc.greater_equal(key, begin)`` on the
  key column (byte order of UTF-8 = the keyspace order); with many, ``numpy.searchsorted`` over
  the encoded keys as Python bytes objects.

No per-row Python loop. The result is validated against the map by the unit tests (a brute-force
``PartitionMap.lookup`` per key).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata.keyspace import Keyspace
from metadata.partition_map import PartitionMap
from producer.errors import RoutingError

STRING_COMPARE_LIMIT = 32
"""Up to this many boundaries, STRING keys are routed with one vectorised comparison per boundary."""


@dataclass(frozen=True)
class RoutedSlice:
    partition_id: str
    rows: pa.Table


def partition_indexes(pmap: PartitionMap, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The index (into ``list(pmap)``) of the partition owning each key, as an int64 numpy array."""
    if keys.null_count:
        raise RoutingError(f"table {pmap.table}: cannot route null partition keys")
    begins = [route.key_range.begin for route in pmap][1:]  # the first begin is the lowest key
    n = len(keys)
    if not begins or n == 0:
        return np.zeros(n, dtype=np.int64)
    if pmap.keyspace is Keyspace.UINT64:
        if not pa.types.is_uint64(keys.type):
            keys = pc.cast(keys, pa.uint64())
        bounds = np.array([struct.unpack(">Q", b)[0] for b in begins], dtype=np.uint64)
        values = np.asarray(
            keys.to_numpy(zero_copy_only=False)
            if isinstance(keys, pa.Array)
            else keys.combine_chunks().to_numpy(zero_copy_only=False),
            dtype=np.uint64,
        )
        return np.searchsorted(bounds, values, side="right").astype(np.int64)
    binary = pc.cast(keys, pa.binary())  # UTF-8 bytes; byte order is the keyspace order
    if len(begins) <= STRING_COMPARE_LIMIT:
        total = np.zeros(n, dtype=np.int64)
        for begin in begins:
            ge = pc.greater_equal(binary, pa.scalar(begin, pa.binary()))
            total += np.asarray(ge.to_numpy(zero_copy_only=False), dtype=np.int64)
        return total
    values_obj = np.array(binary.to_pylist(), dtype=object)
    bounds_obj = np.array(begins, dtype=object)
    return np.searchsorted(bounds_obj, values_obj, side="right").astype(np.int64)


def route(pmap: PartitionMap, rows: pa.Table, partition_key: str) -> list[RoutedSlice]:
    """Split ``rows`` by owning partition (partitions in key order; rows keep their input order within one)."""
    routes = list(pmap)
    if not routes:
        raise RoutingError(f"table {pmap.table}: the partition map has no partitions")
    if rows.num_rows == 0:
        return []
    idx = partition_indexes(pmap, rows.column(partition_key))
    if len(routes) == 1:
        return [RoutedSlice(routes[0].partition_id, rows)]
    counts = np.bincount(idx, minlength=len(routes))
    if bool(np.all(idx[1:] >= idx[:-1])):
        ordered = rows  # already in partition order (one partition, or rows sorted by key): slices, no copy
    else:
        ordered = rows.take(pa.array(np.argsort(idx, kind="stable")))
    out = []
    start = 0
    for i, count in enumerate(counts.tolist()):
        if count:
            out.append(RoutedSlice(routes[i].partition_id, ordered.slice(start, count)))
            start += count
    return out
