"""A nemesis schedule from a seed (pure): the same seed and kinds always give the same faults.

The first faults go through every requested kind once, in a seeded order, so even a short schedule
covers each kind; the rest are drawn at random. Each fault heals within its ``duration_s``; the
bounds below keep a ZooKeeper blip and a short pause under the nodes' ZooKeeper session timeout
(10 s, ``MetadataConfig.zk_timeout_s``) and a long pause past it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from chaos.models import Fault, FaultKind

ZK_SESSION_TIMEOUT_S = 10.0

DURATIONS: dict[FaultKind, tuple[tuple[float, float], ...]] = {
    FaultKind.KILL_LEADER: ((1.0, 6.0),),
    FaultKind.KILL_FOLLOWER: ((1.0, 8.0),),
    # short (the session survives: SUSPENDED then CONNECTED) or long (the session expires: LOST)
    FaultKind.PAUSE_LEADER: ((2.0, 6.0), (ZK_SESSION_TIMEOUT_S + 2.0, ZK_SESSION_TIMEOUT_S + 10.0)),
    FaultKind.PAUSE_FOLLOWER: ((2.0, 6.0), (ZK_SESSION_TIMEOUT_S + 2.0, ZK_SESSION_TIMEOUT_S + 10.0)),
    # longer than the clients' read timeout (2/3 of the session: they see SUSPENDED), shorter than the session
    FaultKind.ZK_BLIP: ((ZK_SESSION_TIMEOUT_S * 0.7, ZK_SESSION_TIMEOUT_S * 0.85),),
    FaultKind.ZK_RESTART: ((1.0, 4.0),),
    FaultKind.BROKER_RESTART: ((2.0, 10.0),),
    FaultKind.WIPE_FOLLOWER: ((1.0, 4.0),),
    # idle long enough for the memtable to flush (10 s, FlushPolicy.max_age_s) and Tail to truncate
    FaultKind.QUIET_ZK_BLIP: ((14.0, 24.0),),
    FaultKind.QUIET_PAUSE_LEADER: ((14.0, 24.0),),
    FaultKind.WIPE_THEN_FAILOVER: ((2.0, 6.0),),
    FaultKind.SPLIT: ((1.0, 1.0),),  # not held: the split takes what it takes (SPLIT_TIMEOUT_S at most)
}
ZK_BLIP_S = ZK_SESSION_TIMEOUT_S * 0.78
"""How long the blip of a quiet_zk_blip fault holds ZooKeeper, and quiet_pause_leader its leader."""
GAP_S = (2.0, 6.0)

ALL_KINDS: tuple[FaultKind, ...] = tuple(FaultKind)


def make_schedule(seed: int, count: int, kinds: Sequence[FaultKind] = ALL_KINDS) -> list[Fault]:
    """``count`` faults drawn from ``kinds`` with ``random.Random(seed)``."""
    if not kinds:
        raise ValueError("a schedule needs at least one fault kind")
    rng = random.Random(seed)
    ordered = list(dict.fromkeys(kinds))
    rng.shuffle(ordered)
    faults = []
    for index in range(count):
        kind = ordered[index] if index < len(ordered) else rng.choice(ordered)
        low, high = rng.choice(DURATIONS[kind])
        faults.append(
            Fault(
                index=index,
                kind=kind,
                gap_s=round(rng.uniform(*GAP_S), 2),
                duration_s=round(rng.uniform(low, high), 2),
                pick=rng.randrange(1_000),
            )
        )
    return faults


def describe(schedule: Sequence[Fault]) -> str:
    """One line per fault, for logs and reports."""
    return "\n".join(
        f"  #{f.index}: +{f.gap_s:.1f}s {f.kind.value} for {f.duration_s:.1f}s (pick {f.pick})" for f in schedule
    )
