"""Preferred leaders (DESIGN.md section 7): spread at create, the yield decision, the election hook, the balance."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from helpers_metadata import Ids, table

from metadata.election import Candidate, decide_yield, prefer_preferred, preferred_caught_up
from metadata.errors import MetadataDecodeError
from metadata.metadata_file import Placement
from metadata.operations import create_file
from metadata.placements import preferred_leader, spread_leaders
from metadata.rebalance import RebalanceRequest, leader_balance, preferred_leaders


def _u(n: int) -> bytes:
    return n.to_bytes(8, "big")


def test_same_order_assignments_are_rotated_so_preferred_leaders_go_round_robin() -> None:
    ids = Ids()
    assignments = [ids.place("node-1", "node-2", "node-3") for _ in range(6)]
    spread = spread_leaders(assignments)
    assert [s[0].server_id for s in spread] == ["node-1", "node-2", "node-3"] * 2
    for before, after in zip(assignments, spread, strict=True):
        assert sorted(before) == sorted(after)  # same placements, only rotated
        i = before.index(after[0])
        assert after == before[i:] + before[:i]


def test_the_coordinators_round_robin_comes_back_unchanged() -> None:
    ids = Ids()
    names = ["node-1", "node-2", "node-3"]
    assignments = [ids.place(*(names[(i + j) % 3] for j in range(2))) for i in range(4)]
    assert spread_leaders(assignments) == [tuple(a) for a in assignments]


def test_create_file_spreads_preferred_leaders_over_the_servers() -> None:
    ids = Ids()
    same_order = [ids.place("node-1", "node-2", "node-3") for _ in range(4)]
    file = create_file(table(rf=3), same_order, [_u(10), _u(20), _u(30)])
    per_node = Counter(preferred_leader(e).server_id for e in file.partitions)
    assert per_node == {"node-1": 2, "node-2": 1, "node-3": 1}
    assert list(preferred_leaders(file).values()) == ["node-1", "node-2", "node-3", "node-1"]


def test_a_preferred_leader_is_caught_up_once_it_acked_the_leaders_channel_end() -> None:
    assert preferred_caught_up(12, 12)
    assert preferred_caught_up(13, 12)
    assert not preferred_caught_up(11, 12)
    assert not preferred_caught_up(None, 5)  # never acked anything the leader published
    assert preferred_caught_up(None, 0)  # nothing was ever published


def test_yield_waits_for_a_candidate_that_is_caught_up_for_the_delay() -> None:
    def decide(**kw: object) -> object:
        args: dict[str, object] = {"candidate": True, "caught_up": True, "ready_since": None, "now": 100.0}
        args.update(kw)
        return decide_yield(1, 2, delay_s=10.0, **args)  # type: ignore[arg-type]

    # the preferred leader itself, or no preference: never
    assert not decide_yield(2, 2, candidate=True, caught_up=True, ready_since=0.0, now=100.0, delay_s=0).yield_now
    assert not decide_yield(1, None, candidate=True, caught_up=True, ready_since=0.0, now=100.0, delay_s=0).yield_now
    # not in line, or behind: not yet, and the clock restarts
    for kw in ({"candidate": False}, {"caught_up": False}):
        d = decide(ready_since=50.0, **kw)
        assert not d.yield_now and d.ready_since is None
    # ready: the delay starts now, then passes
    first = decide()
    assert not first.yield_now and first.ready_since == 100.0
    assert not decide(ready_since=95.0).yield_now
    later = decide(ready_since=90.0)
    assert later.yield_now and "caught up" in later.reason
    # an operator's request skips the delay, not the catch-up
    assert decide(requested=True).yield_now
    assert not decide(requested=True, caught_up=False).yield_now


def _line(*placements: int) -> list[Candidate]:
    return [Candidate(f"n_{i:010d}", i, f"node-{p}", p) for i, p in enumerate(placements)]


def test_the_election_prefers_a_caught_up_preferred_candidate_else_the_fallback() -> None:
    behind: set[int] = set()
    prefer = prefer_preferred(lambda: 3, lambda p: p not in behind, lambda line: line[-1].placement_id)
    assert prefer(_line(1, 2, 3)) == 3
    assert prefer(_line(1, 2)) == 2  # the preferred one is not in line: the fallback decides
    behind.add(3)
    assert prefer(_line(1, 3, 2)) == 2  # it is behind: the fallback decides
    assert prefer_preferred(lambda: None, lambda p: True)(_line(1, 2)) is None


def test_leader_balance_counts_leaders_per_node_and_partitions_off_their_preferred_leader() -> None:
    ids = Ids()
    file = create_file(table(rf=2), [ids.place("node-1", "node-2") for _ in range(4)], [_u(10), _u(20), _u(30)])
    pids = [e.partition_id for e in file.partitions]
    all_on_one = leader_balance(file, dict.fromkeys(pids, "node-1"))
    assert all_on_one.leaders_per_node == {"node-1": 4, "node-2": 0}
    assert all_on_one.preferred_per_node == {"node-1": 2, "node-2": 2}
    assert all_on_one.on_preferred == 2 and not all_on_one.balanced
    assert set(all_on_one.not_on_preferred) == {pids[1], pids[3]}
    spread = leader_balance(file, preferred_leaders(file))
    assert spread.balanced and spread.leaders_per_node == {"node-1": 2, "node-2": 2}
    leaderless = leader_balance(file, {**preferred_leaders(file), pids[0]: None})
    assert leaderless.not_on_preferred == (pids[0],) and leaderless.leaders_per_node["node-1"] == 1


def test_rebalance_request_round_trips_and_expires() -> None:
    req = RebalanceRequest("events", "ab" * 8, 1_000, 61_000)
    assert RebalanceRequest.decode("events", req.encode()) == req
    assert req.active(1_000) and req.active(60_999) and not req.active(61_000) and not req.active(999)
    for bad in (b"{", json.dumps({"request_id": "x"}).encode(), json.dumps({"request_id": 1}).encode()):
        with pytest.raises(MetadataDecodeError):
            RebalanceRequest.decode("events", bad)
    single = create_file(table(rf=1), [(Placement("node-1", 1),)])
    assert preferred_leader(single.partitions[0]) == Placement("node-1", 1)
