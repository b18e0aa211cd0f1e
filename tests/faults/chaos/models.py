"""The chaos runner's JSON shapes: the schedule, what the nemesis did, the checker's counts."""

from __future__ import annotations

from enum import StrEnum

from shoal.shapes import Shape


class FaultKind(StrEnum):
    """One kind of fault the nemesis injects; each heals within a bound (its ``duration_s``)."""

    KILL_LEADER = "kill_leader"
    """kill -9 the partition's leader node, restart it after ``duration_s``."""
    KILL_FOLLOWER = "kill_follower"
    PAUSE_LEADER = "pause_leader"
    """SIGSTOP the leader node for ``duration_s`` (shorter or longer than its ZooKeeper session), SIGCONT."""
    PAUSE_FOLLOWER = "pause_follower"
    ZK_BLIP = "zk_blip"
    """SIGSTOP ZooKeeper for less than the session timeout: every node sees SUSPENDED, no session expires."""
    ZK_RESTART = "zk_restart"
    """kill -9 ZooKeeper and restart it in place (same data dir and port)."""
    BROKER_RESTART = "broker_restart"
    """kill -9 one of the three Kafka brokers, restart it in place after ``duration_s``."""
    WIPE_FOLLOWER = "wipe_follower"
    """kill -9 a follower, delete its data dir (disk loss), restart it empty."""
    QUIET_ZK_BLIP = "quiet_zk_blip"
    """Writers idle for ``duration_s`` (segments flush, Tail truncates the WAL), then a ZooKeeper blip
    with the writers starting again near its end: the leader's next batch meets SUSPENDED, and the
    role that starts on reconnect (same session, same epoch) has nothing left to replay."""
    QUIET_PAUSE_LEADER = "quiet_pause_leader"
    """Writers idle for ``duration_s`` (flush, Tail), then writing again while the leader is SIGSTOPped
    for less than its session: it resumes with a batch waiting and its ZooKeeper connection SUSPENDED."""
    WIPE_THEN_FAILOVER = "wipe_then_failover"
    """A follower's data dir wiped (kill -9, delete, restart), then at once the leader killed for
    ``duration_s``: may the empty replica lead?"""
    SPLIT = "split"
    """Split the partition under writes at the middle of the keys written to it so far (its leader
    copies, freezes, SPLIT_FINALIZE; producers re-route; stragglers are forwarded), waiting up to
    ``SPLIT_TIMEOUT_S`` for the finalize; later faults target the child holding the lowest keys."""


class Fault(Shape):
    """One planned fault: quiet for ``gap_s``, then ``kind`` held for ``duration_s``, then healed."""

    index: int
    kind: FaultKind
    gap_s: float
    duration_s: float
    pick: int
    """Which target among the candidates (followers sorted by id, brokers 1..N) modulo their count."""


class FaultEvent(Shape):
    """What the nemesis did for one planned fault."""

    index: int
    kind: FaultKind
    target: str
    started_s: float
    """Seconds since the workload started."""
    healed_s: float
    note: str = ""
    injected: bool = True
    """False when the nemesis could not do what the fault names (no leader to kill, too few keys to
    split): the run then fails, since the schedule's guarantee went unexercised."""


class KeyViolation(Shape):
    """One key that a replica holds wrongly."""

    server_id: str
    key: int
    problem: str
    """lost, duplicated, stale, unexpected or misplaced."""
    found: list[str]
    expected: list[str]


class GtidViolation(Shape):
    """A GTID stamped twice, out of order on a channel, an epoch on two channels, a key's versions
    inverted, or GTIDs that do not follow the order the leaders accepted the ingest topic in."""

    problem: str
    detail: str


class ChannelSummary(Shape):
    """What the WAL observer read from one channel: records, epochs, first and last GTID."""

    channel: str
    records: int
    epochs: list[int]
    first: str
    last: str


class ChaosCounts(Shape):
    """Counts of one run or of several (``runs``): the README's guarantees table quotes them."""

    runs: int = 0
    faults: dict[str, int] = {}
    writes: int = 0
    """Row writes sent (a new key, an overwrite of one, or a delete)."""
    deletes: int = 0
    """Of ``writes``, the deletes."""
    acked: int = 0
    """Row writes acknowledged: ``Producer.sync()`` returned after their delivery succeeded."""
    uncertain: int = 0
    """Row writes whose delivery or acceptance failed: they may or may not be in the table."""
    uncertain_accepted: int = 0
    """Of ``uncertain``, the writes a committed WAL record holds: a leader accepted them, so they are
    judged as acknowledged."""
    keys: int = 0
    lost: int = 0
    """(replica, key) pairs where an acknowledged key is missing."""
    duplicated: int = 0
    stale: int = 0
    """(replica, key) pairs holding an older value than the newest acknowledged one."""
    unexpected: int = 0
    """(replica, key) pairs holding a value that was never written."""
    misplaced: int = 0
    """(replica, key) pairs a partition returned although the key is outside its key range."""
    gtid_violations: int = 0
    wal_records_observed: int = 0
    wal_offsets_unobserved: int = 0
    """WAL channel offsets the Tail truncated before the observer read them (transaction markers
    included): the GTID rules did not see the records among them."""
    wal_rounds_failed: int = 0
    """Observer rounds that raised (a broker restarting): records the Tail truncated meanwhile count
    in ``wal_offsets_unobserved``."""
    verify_failures: int = 0
    failed_runs: int = 0

    def add(self, other: ChaosCounts) -> ChaosCounts:
        faults = dict(self.faults)
        for kind, n in other.faults.items():
            faults[kind] = faults.get(kind, 0) + n
        fields = {
            name: getattr(self, name) + getattr(other, name) for name in type(self).model_fields if name != "faults"
        }
        return ChaosCounts(**{**fields, "faults": faults})


class CheckResult(Shape):
    """The checker's verdict on one run's final state."""

    ok: bool
    counts: ChaosCounts
    key_violations: list[KeyViolation]
    """The first violations found (at most ``limit`` of them)."""
    gtid_violations: list[GtidViolation]
    replicas_identical: bool
    verify_ok: bool | None
    channels: list[ChannelSummary] = []


class ChaosRun(Shape):
    """One run: its seed, schedule, what happened, and the checker's result."""

    ok: bool
    """The checker found nothing and the replicas converged within the bound."""
    seed: int
    schedule: list[Fault]
    events: list[FaultEvent]
    converged: bool
    wall_s: float
    result: CheckResult
    errors: list[str]


class ChaosReport(Shape):
    """``python -m chaos --output json``: every run and their summed counts."""

    ok: bool
    counts: ChaosCounts
    runs: list[ChaosRun]
