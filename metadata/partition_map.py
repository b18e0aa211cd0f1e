"""The partition map for routing: which partition owns a key (EventQL table partitioning, section 2).

:class:`PartitionMap` is an immutable snapshot of one METADATA file, with a binary search over the
partition begins. A splitting partition keeps receiving writes until the split is finalized, so
routing always goes to the entries of the file, never to split children.

:class:`CachedPartitionMap` keeps the map of one table current: it loads the file once and swaps in
a new map on every committed change (fed by :class:`metadata.notify.TableWatcher`).
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from metadata.keyspace import KeyRange, Keyspace
from metadata.metadata_file import MetadataFile, Placement

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionRoute:
    partition_id: str
    key_range: KeyRange
    servers: tuple[Placement, ...]
    splitting: bool


class PartitionMap:
    """Key -> partition for one METADATA version."""

    def __init__(self, file: MetadataFile) -> None:
        self.file = file
        self.table = file.table.name
        self.keyspace: Keyspace = file.table.keyspace
        self.txnid = file.txnid
        self.sequence = file.sequence
        self._begins = [e.begin for e in file.partitions]
        self._routes = [PartitionRoute(e.partition_id, r, e.servers, e.splitting) for e, r in file.ranges()]

    def __len__(self) -> int:
        return len(self._routes)

    def __iter__(self) -> Iterator[PartitionRoute]:
        return iter(self._routes)

    def lookup_encoded(self, key: bytes) -> PartitionRoute:
        """The route of an already-encoded key (order-preserving bytes)."""
        return self._routes[bisect.bisect_right(self._begins, key) - 1]

    def lookup(self, key: object) -> PartitionRoute:
        """The partition owning ``key`` (an int for UINT64 tables, a str for STRING tables)."""
        return self.lookup_encoded(self.keyspace.encode(key))

    def partition_ids(self) -> list[str]:
        return [r.partition_id for r in self._routes]


class CachedPartitionMap:
    """The current partition map of one table, refreshed on every committed change.

    ``loader`` returns the current METADATA file (e.g. ``coordinator.current``); ``update`` is the
    callback to register with a table watcher. Older versions than the one held are ignored, so
    out-of-order notifications never move the map backwards.
    """

    def __init__(self, loader: Callable[[], MetadataFile]) -> None:
        self._loader = loader
        self._lock = threading.Lock()
        self._map: PartitionMap | None = None

    def get(self) -> PartitionMap:
        with self._lock:
            if self._map is None:
                self._map = PartitionMap(self._loader())
            return self._map

    def update(self, file: MetadataFile) -> None:
        with self._lock:
            if self._map is None or file.sequence > self._map.sequence:
                log.debug("partition map of %s -> sequence %d", file.table.name, file.sequence)
                self._map = PartitionMap(file)

    def invalidate(self) -> None:
        with self._lock:
            self._map = None

    def lookup(self, key: object) -> PartitionRoute:
        return self.get().lookup(key)
