"""A node's side of leader balance (DESIGN.md section 7; Kafka's auto leader rebalance).

:class:`LeaderRebalancer` answers two questions for the node, with the pure decisions of
:mod:`metadata.election` ("Preferred leaders"):

- at election time (:meth:`LeaderRebalancer.election_preference`): is the partition's preferred
  placement in line and caught up on the old leader's segments channel? Then it is the one to lead;
  otherwise the node's own preference (TokuMX's most advanced replica) decides;
- at every supervision tick, for each partition this node leads (:meth:`LeaderRebalancer.check`):
  has the preferred placement been a candidate and caught up on this leader's segments channel for
  ``delay_s`` seconds, or did ``shoal table rebalance`` ask for it
  (:class:`metadata.rebalance.RebalanceRequest`)? Then the node hands leadership over: it stops
  its leader role, then resigns its candidacy (``StorageNode`` does both), and campaigns again at the
  back of the line.

"Caught up" reads the Append index of the leader's segments channel and the preferred placement's
Ack on it (:mod:`shoal.kafka.indexes`), through one admin client that lives as long as the node
(:meth:`LeaderRebalancer.admin`; the node's TokuMX preference reads its indexes through it too, so
an election step never creates or destroys a Kafka client).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka.admin import AdminClient

from metadata.election import Candidate, YieldDecision, candidates, decide_yield, prefer_preferred, preferred_caught_up
from metadata.election import read_epoch as read_epoch_record
from metadata.in_sync import read_in_sync
from metadata.rebalance import read_rebalance_request
from metadata.zk_layout import ZkLayout
from shoal.kafka import clients
from shoal.kafka.indexes import IndexQuery, close_offset_readers, read_indexes
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames

log = logging.getLogger(__name__)

Preference = Callable[[Sequence[Candidate]], "int | None"]


class LeaderRebalancer:
    """Preferred-leader checks of one node (thread-safe: the election threads and the supervisor use it)."""

    def __init__(self, zk: Any, layout: ZkLayout, kafka: KafkaSettings, topics: TopicNames, *, delay_s: float) -> None:
        self._zk = zk
        self._layout = layout
        self._kafka = kafka
        self._topics = topics
        self.delay_s = delay_s
        self._lock = threading.Lock()
        self._admin: AdminClient | None = None
        self._ready_since: dict[str, float] = {}
        self._handled: dict[str, str] = {}
        """partition id -> the rebalance request it already yielded for."""

    def admin(self) -> AdminClient:
        """The node's admin client for index reads (created once; the election's ``prefer`` hooks share it)."""
        with self._lock:
            if self._admin is None:
                self._admin = clients.admin(self._kafka)
            return self._admin

    def close(self) -> None:
        """Close the consumers the index reads kept on the admin client (at node stop)."""
        with self._lock:
            admin, self._admin = self._admin, None
        if admin is not None:
            close_offset_readers(admin)

    def caught_up(self, partition_id: str, leader_placement_id: int | None, placement_id: int) -> bool:
        """Whether ``placement_id`` acked everything on the segments channel of ``leader_placement_id``
        (trivially so when there is no such leader or channel yet, or it is that leader)."""
        if leader_placement_id is None or leader_placement_id == placement_id:
            return True
        topic = self._topics.segments(partition_id, leader_placement_id)
        group = self._topics.replica_group(partition_id, placement_id)
        found = read_indexes(self.admin(), [IndexQuery(topic, (group,))], timeout_s=5)
        if topic not in found:
            return True  # the leader never created its channel: it published nothing
        idx = found[topic]
        return preferred_caught_up(idx.ack(group), idx.append)

    def election_preference(
        self, partition_id: str, preferred: Callable[[], int | None], fallback: Preference | None
    ) -> Preference:
        """The ``prefer`` hook of a partition's election: the caught-up preferred placement first."""

        def caught_up(placement_id: int) -> bool:
            old = read_epoch_record(self._zk, self._layout, partition_id).placement_id
            return self.caught_up(partition_id, old, placement_id)

        return prefer_preferred(preferred, caught_up, fallback)

    def check(
        self, table: str, partition_id: str, own: int, preferred: int | None, *, now: float | None = None
    ) -> YieldDecision:
        """One check of a partition this node leads: should it hand leadership to ``preferred`` now?"""
        now = time.monotonic() if now is None else now
        if preferred is None or preferred == own:
            self._ready_since.pop(partition_id, None)
            return decide_yield(own, preferred, candidate=False, caught_up=False, ready_since=None, now=now, delay_s=0)
        candidate = any(c.placement_id == preferred for c in candidates(self._zk, self._layout, partition_id))
        # out of sync it could not lead (the election's ISR rule): handing over would only elect another
        in_sync = candidate and preferred not in read_in_sync(self._zk, self._layout, partition_id).out_of_sync
        caught = in_sync and self.caught_up(partition_id, own, preferred)
        request = read_rebalance_request(self._zk, self._layout, table)
        requested = request is not None and request.active() and self._handled.get(partition_id) != request.request_id
        decision = decide_yield(
            own,
            preferred,
            candidate=candidate,
            caught_up=caught,
            ready_since=self._ready_since.get(partition_id),
            now=now,
            delay_s=self.delay_s,
            requested=requested,
        )
        if decision.yield_now:
            self._ready_since.pop(partition_id, None)
            if requested and request is not None:
                self._handled[partition_id] = request.request_id
            log.info("%s: hands leadership to placement %d: %s", partition_id, preferred, decision.reason)
        elif decision.ready_since is None:
            self._ready_since.pop(partition_id, None)
        else:
            self._ready_since[partition_id] = decision.ready_since
        return decision
