"""Leader balance: who should lead each partition, how far a table is from it, and operator requests.

- :func:`preferred_leaders`: each partition's preferred leader, the first placement of its
  ``servers`` (:func:`metadata.placements.preferred_leader`, spread at create time);
- :func:`leader_balance`: the leaders per node and which partitions are not led by their preferred
  leader (``shoal table describe``, the monitor, the demo);
- :func:`current_leaders` / :func:`await_preferred_leaders`: each partition's live leader now, and
  waiting until every partition is on its preferred leader (``shoal table rebalance --wait``, the demo);
- :class:`RebalanceRequest`: ``shoal table rebalance`` writes ``<root>/rebalance/<table>``
  (``{"request_id", "requested_at_ms", "expires_at_ms"}``); until it expires, a node leading a
  partition of that table hands leadership to a caught-up preferred leader at once, without the
  usual delay, once per request and partition (Kafka's ``kafka-leader-election --election-type
  preferred``). The nodes read it at every supervision tick; nothing else depends on it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from metadata.errors import MetadataDecodeError
from metadata.metadata_file import MetadataFile
from metadata.placements import preferred_leader
from metadata.security import OPEN, ZkSecurity
from metadata.zk_client import ensure_path, zk_errors
from metadata.zk_layout import ZkLayout
from shoal import jsonio
from shoal.errors import ConfigError
from shoal.ids import validate_table_name
from shoal.worker import Deadline


def preferred_leaders(file: MetadataFile) -> dict[str, str]:
    """{partition_id: preferred leader's server id}, in partition order."""
    return {e.partition_id: preferred_leader(e).server_id for e in file.partitions}


@dataclass(frozen=True)
class LeaderBalance:
    """How a table's leadership is spread over its servers."""

    leaders_per_node: dict[str, int]
    """Partitions each server leads now (every server of the table listed, 0 included)."""
    preferred_per_node: dict[str, int]
    """Partitions each server is the preferred leader of."""
    on_preferred: int
    """Partitions led by their preferred leader."""
    not_on_preferred: tuple[str, ...]
    """Partition ids led by another server (or by nobody)."""

    @property
    def balanced(self) -> bool:
        """Every partition is led by its preferred leader."""
        return not self.not_on_preferred


def leader_balance(file: MetadataFile, leaders: Mapping[str, str | None]) -> LeaderBalance:
    """The balance of ``file``'s table when partition ``pid`` is led by ``leaders[pid]`` (None: no leader)."""
    servers = sorted({p.server_id for e in file.partitions for p in e.servers})
    preferred = preferred_leaders(file)
    per_node = dict.fromkeys(servers, 0)
    per_preferred = dict.fromkeys(servers, 0)
    off = []
    for pid, want in preferred.items():
        per_preferred[want] += 1
        have = leaders.get(pid)
        if have is not None:
            per_node[have] = per_node.get(have, 0) + 1
        if have != want:
            off.append(pid)
    return LeaderBalance(per_node, per_preferred, len(preferred) - len(off), tuple(off))


def current_leaders(coordinator: Any, file: MetadataFile) -> dict[str, tuple[str | None, int]]:
    """{partition_id: (server id of its live leader or None, epoch)} (``coordinator``: a
    :class:`metadata.coordinator.MetadataCoordinator`)."""
    out: dict[str, tuple[str | None, int]] = {}
    for entry in file.partitions:
        st = coordinator.partition_status(entry.partition_id)
        out[entry.partition_id] = (st.leader_server_id if st.leader_alive else None, st.epoch)
    return out


def await_preferred_leaders(
    coordinator: Any,
    file: MetadataFile,
    timeout_s: float,
    *,
    progress: Callable[[str], None] = lambda _m: None,
    interval_s: float = 1.0,
) -> dict[str, tuple[str | None, int]]:
    """:func:`current_leaders` once every partition is led by its preferred leader or ``timeout_s`` passed."""
    want = preferred_leaders(file)
    deadline = Deadline(timeout_s)
    while True:
        now = current_leaders(coordinator, file)
        done = sum(1 for pid, (lead, _) in now.items() if lead == want[pid])
        progress(f"{done}/{len(want)} partitions on their preferred leader")
        if done == len(want) or not deadline.sleep(interval_s):
            return now if done == len(want) else current_leaders(coordinator, file)


# -- operator requests ---------------------------------------------------------------------------


def request_path(layout: ZkLayout, table: str) -> str:
    return f"{layout.root}/rebalance/{validate_table_name(table)}"


@dataclass(frozen=True)
class RebalanceRequest:
    """One ``shoal table rebalance``: effective until ``expires_at_ms``."""

    table: str
    request_id: str
    requested_at_ms: int
    expires_at_ms: int

    def active(self, now_ms: int | None = None) -> bool:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return self.requested_at_ms <= now < self.expires_at_ms

    def encode(self) -> bytes:
        return json.dumps(
            {
                "request_id": self.request_id,
                "requested_at_ms": self.requested_at_ms,
                "expires_at_ms": self.expires_at_ms,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, table: str, data: bytes) -> RebalanceRequest:
        try:
            obj: Any = jsonio.loads_checked(data)
            rid, at, until = obj["request_id"], obj["requested_at_ms"], obj["expires_at_ms"]
            if not isinstance(rid, str) or not rid or len(rid) > 64:
                raise ValueError(f"request_id {rid!r:.40}")
            for v in (at, until):
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ValueError(f"timestamp {v!r:.40}")
            return cls(table, rid, at, until)
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise MetadataDecodeError(f"rebalance request of {table} is malformed: {exc}") from exc


def request_rebalance(
    zk: Any, layout: ZkLayout, table: str, *, ttl_s: float = 120.0, security: ZkSecurity = OPEN
) -> RebalanceRequest:
    """Ask the leaders of ``table`` to hand leadership to their caught-up preferred leaders now."""
    if not 0 < ttl_s < math.inf:
        raise ConfigError(f"a rebalance request's ttl must be a finite number of seconds > 0, got {ttl_s!r}")
    now = int(time.time() * 1000)
    req = RebalanceRequest(validate_table_name(table), os.urandom(8).hex(), now, now + int(ttl_s * 1000))
    path = request_path(layout, table)
    ensure_path(zk, f"{layout.root}/rebalance", security)
    with zk_errors(f"request a rebalance of {table}"):
        try:
            zk.create(path, req.encode(), acl=security.acls())
        except NodeExistsError:
            zk.set(path, req.encode())
    return req


def read_rebalance_request(zk: Any, layout: ZkLayout, table: str) -> RebalanceRequest | None:
    """The table's last request (None if there never was one or it is malformed)."""
    with zk_errors(f"read the rebalance request of {table}"):
        try:
            data, _ = zk.get(request_path(layout, table))
        except NoNodeError:
            return None
    with contextlib.suppress(MetadataDecodeError):
        return RebalanceRequest.decode(table, data)
    return None
