"""Placement ids (EventQL 6.2 / segment replication 3.6): unique for every (server, partition)
assignment, forever, allocated from a counter znode that is bumped by compare-and-swap.

A server removed from a partition and added again gets a new id, so consumer groups and acked
lists derived from placement ids never mistake the new replica for the old one (the ABA case).

Preferred leaders (DESIGN.md section 7, Kafka's preferred replica): the preferred leader of a
partition is the FIRST placement of its ``servers`` list (:func:`preferred_leader`), so it is
derived from the METADATA file and needs no field of its own; every node and the CLI compute the
same answer from the same file version, and it stays put when other partitions change (a leave
moves it to the next server of the list). At create time :func:`spread_leaders` orders each
partition's list so that the first placements go round robin over the servers across partitions
(the coordinator's round-robin placement already is in that order; any other assignment is
rotated). The nodes then hand leadership to a caught-up preferred leader
(:mod:`metadata.election`, "Preferred leaders").
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.retry import KazooRetry

from metadata.errors import MetadataConflictError, MetadataDecodeError
from metadata.metadata_file import PartitionEntry, Placement
from metadata.security import OPEN, ZkSecurity
from metadata.zk_client import cas_retry, ensure_path, retrying, zk_errors
from metadata.zk_layout import ZkLayout
from shoal.errors import InvalidIdError

log = logging.getLogger(__name__)
MAX_BATCH = 10_000


class PlacementAllocator:
    """Allocates placement ids from the counter znode.

    ``floor`` returns the highest placement id any stored METADATA version holds: a counter znode
    that is missing (a new cluster, or one whose ZooKeeper data was lost while the METADATA files
    in Kafka were not) is created at that value, so no id is ever handed out twice. An id used
    again would let a new replica take an old one's consumer groups and channels (the ABA case).
    """

    def __init__(
        self,
        zk: Any,
        layout: ZkLayout | None = None,
        security: ZkSecurity = OPEN,
        retry: KazooRetry | None = None,
        floor: Callable[[], int] | None = None,
    ) -> None:
        self._zk = zk
        self._layout = layout or ZkLayout()
        self._security = security
        self._retry = retry or cas_retry(max_tries=200, deadline=60.0)
        self._floor = floor

    def _ensure_counter(self) -> None:
        path = self._layout.placements
        with zk_errors("placement counter"):
            if self._zk.exists(path):
                return
        start = self._floor() if self._floor is not None else 0
        if start:
            log.warning("placement counter %s was missing: recreated at %d, the highest id stored", path, start)
        with zk_errors("placement counter"):
            ensure_path(self._zk, self._layout.root, self._security)
            with contextlib.suppress(NodeExistsError):
                self._zk.create(path, str(start).encode("ascii"), acl=self._security.acls())

    def allocate(self, count: int = 1) -> list[int]:
        """``count`` fresh placement ids (consecutive), never returned to anyone else."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_BATCH:
            raise InvalidIdError(f"placement id batch size must be in [1, {MAX_BATCH}], got {count!r:.40}")
        self._ensure_counter()
        path = self._layout.placements

        def attempt() -> list[int]:
            with zk_errors("allocate placement ids"):
                try:
                    data, stat = self._zk.get(path)
                except NoNodeError as exc:
                    self._ensure_counter()
                    raise MetadataConflictError(f"placement counter {path} was missing") from exc
                try:
                    current = int(data.decode("ascii") or "0")
                except (UnicodeDecodeError, ValueError) as exc:
                    raise MetadataDecodeError(f"placement counter {path} holds {data[:40]!r}") from exc
                if current < 0 or current + count >= 2**63:
                    raise MetadataDecodeError(f"placement counter {path} is out of range: {current}")
                try:
                    self._zk.set(path, str(current + count).encode("ascii"), version=stat.version)
                except BadVersionError as exc:
                    log.debug("placement counter race on %s", path)
                    raise MetadataConflictError(
                        "could not allocate placement ids: counter contended beyond the retry policy"
                    ) from exc
            return list(range(current + 1, current + count + 1))

        return retrying(self._retry, attempt)

    def allocate_one(self) -> int:
        return self.allocate(1)[0]


# -- preferred leaders ------------------------------------------------------------------------------


def preferred_leader(entry: PartitionEntry) -> Placement:
    """The partition's preferred leader: the first placement of its ``servers`` (Kafka's preferred replica)."""
    return entry.servers[0]


def spread_leaders(assignments: Sequence[Sequence[Placement]]) -> list[tuple[Placement, ...]]:
    """Each partition's server list rotated so that the preferred leaders (first placements) are spread.

    Partitions in order; each one's first placement is, of its servers, the one that is preferred for
    the fewest partitions so far (ties: the earliest in its own list). The rest of the list keeps its
    cyclic order. A list that already starts with such a server is unchanged, so the coordinator's
    round robin (partition ``i`` on servers ``i, i+1, ...``) comes back as it was given.
    """
    counts: Counter[str] = Counter()
    out = []
    for servers in assignments:
        servers = tuple(servers)
        if not servers:
            out.append(servers)
            continue
        first = min(range(len(servers)), key=lambda i: (counts[servers[i].server_id], i))
        counts[servers[first].server_id] += 1
        out.append(servers[first:] + servers[:first])
    return out
