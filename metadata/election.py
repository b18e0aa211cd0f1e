"""Leader election per partition, with a leader epoch bumped by compare-and-swap.

Only LIVE replicas may campaign (LOAD/joining replicas are not eligible, segment replication 3.2).
Each candidate creates an ephemeral sequential znode under ``<partition>/election``; the lowest
sequence leads. Before it acts as leader the winner bumps ``<partition>/epoch`` by CAS, in one
ZooKeeper transaction with a check that its candidate znode still exists, so every election has
its own epoch and no two leaders ever share one (TokuMX's primarySeqNumber).

Liveness: a candidate that is not first watches its predecessor's znode (kazoo's Election recipe)
and checks the line again when it goes. The node also calls :meth:`PartitionElection.recheck` at
every supervision tick, so a candidate whose event never came reads the line again within
:data:`RECHECK_S`, and an election step that hangs is logged with its stack (DESIGN.md section 7).

Eligibility (DESIGN.md section 7: an out-of-sync replica never leads while an in-sync one exists): an
``eligible`` hook names the candidates of the line that may lead now (the node's:
:func:`metadata.in_sync.prefer_in_sync`). It is a rule, not a preference: a first-in-line candidate
that may not lead re-enters behind the line when one that may is in it (not counted as a yield), and
otherwise stays first without leading, watching the line, until a candidate that may lead enters it
or the rule changes (read again at every :meth:`PartitionElection.recheck`). The hook may return an
:class:`Eligibility` naming the znode its rule was read from and that znode's version: the winner's
epoch bump then commits only while the znode is unchanged (checked, or created empty when it did not
exist, in the same ZooKeeper transaction), so an old leader that marks the winner out of sync between
the winner's read and its bump makes the bump fail and the winner look at the line again.

Connection states (kazoo listener): while the connection is SUSPENDED a leader must not trust its
position and stops accepting writes (:meth:`PartitionElection.check_writable` raises); when the
connection comes back it resumes only if its candidate znode and epoch are still its own; at LOST
(session expired) it has stepped down, and a later epoch belongs to somebody else. Anything
committed on behalf of a leader carries an :class:`EpochFence` that the coordinator checks
atomically with its CAS, so a fenced leader commits nothing more.

Preferred leaders (DESIGN.md section 7, Kafka's preferred replica and auto leader rebalance): each
partition has a preferred leader, the first placement of its ``servers``
(:func:`metadata.placements.preferred_leader`). Two decisions here, both pure:

- at election time, :func:`prefer_preferred` wraps a node's ``prefer`` hook: when the preferred
  placement is in line and caught up, it is the one to lead (a first-in-line candidate yields to
  it, :meth:`PartitionElection._should_yield`); otherwise the fallback (TokuMX's most advanced
  replica) decides;
- while leading, :func:`decide_yield`: a leader that is not the preferred one hands leadership
  over once the preferred placement is a candidate and caught up (:func:`preferred_caught_up`: its
  Ack on the leader's segments channel is at the channel's Append index, so it holds every segment
  the leader published; the rows the leader still has in memory are in its WAL channel, which the
  next leader adopts), and has stayed so for ``delay_s`` (like ``leader.imbalance.check.interval.seconds``),
  or at once when an operator asked for it (``shoal table rebalance``, :mod:`metadata.rebalance`).
  The node stops its leader role first and only then resigns its candidacy, so it writes nothing
  after the preferred leader's epoch bump (the epoch CAS and the WAL channel's fencing would refuse
  it anyway).
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.protocol.states import KazooState
from kazoo.retry import RetryFailedError

from metadata.discovery import HeldReplica, ReplicaState, discover_one
from metadata.errors import LeadershipLostError, MetadataDecodeError, NotEligibleError
from metadata.metadata_file import MetadataFile
from metadata.security import OPEN, ZkSecurity
from metadata.zk_client import cas_retry, ensure_path, zk_errors
from metadata.zk_layout import EpochRecord, ZkLayout
from shoal import jsonio
from shoal.errors import InvalidIdError, MetadataError
from shoal.ids import validate_partition_id, validate_placement_id, validate_server_id

log = logging.getLogger(__name__)
_PREFIX = "n_"

RECHECK_S = 10.0
"""A candidate re-reads the line at least this often when its node asks (:meth:`PartitionElection.recheck`)."""
STUCK_STEP_S = 60.0
"""An election step running this long is logged with its stack (:meth:`PartitionElection.recheck`)."""


@dataclass(frozen=True)
class EpochFence:
    """'Only if partition ``partition_id`` is still at ``epoch``': checked atomically with a commit."""

    partition_id: str
    epoch: int


class LeaderState(enum.Enum):
    IDLE = "IDLE"
    """Not campaigning."""
    CANDIDATE = "CANDIDATE"
    """In line, not leading."""
    LEADER = "LEADER"
    """Elected with its own epoch; accepts writes."""
    SUSPENDED = "SUSPENDED"
    """Was leader, connection suspended: must not accept writes until it is confirmed."""
    LOST = "LOST"
    """Stepped down (session lost, superseded, or resigned); start() campaigns again."""


@dataclass(frozen=True)
class Leadership:
    partition_id: str
    server_id: str
    placement_id: int
    epoch: int

    def fence(self) -> EpochFence:
        return EpochFence(self.partition_id, self.epoch)


@dataclass(frozen=True)
class Eligibility:
    """What an ``eligible`` hook decided and what it read (:class:`PartitionElection`)."""

    allowed: frozenset[int]
    """The placement ids of the line that may lead now."""
    znode: str | None = None
    """The znode the rule was read from (None: nothing to guard)."""
    version: int = -1
    """Its version when read (-1: it did not exist; the bump then creates it empty)."""


@dataclass(frozen=True)
class Candidate:
    node: str
    sequence: int
    server_id: str
    placement_id: int


def _seq(node: str) -> int:
    try:
        return int(node.rsplit("_", 1)[-1])
    except ValueError:
        return 2**63


def candidates(zk: Any, layout: ZkLayout, partition_id: str) -> list[Candidate]:
    """The candidates of a partition in election order (the first one leads)."""
    path = layout.election(partition_id)
    out = []
    with zk_errors(f"read candidates of {partition_id}"):
        try:
            nodes = zk.get_children(path)
        except NoNodeError:
            return []
        for node in sorted((n for n in nodes if n.startswith(_PREFIX)), key=_seq):
            try:
                data, _ = zk.get(f"{path}/{node}")
            except NoNodeError:
                continue
            try:
                obj = jsonio.loads_checked(data)
                out.append(
                    Candidate(
                        node,
                        _seq(node),
                        validate_server_id(obj["server_id"]),
                        validate_placement_id(obj["placement_id"]),
                    )
                )
            except (ValueError, KeyError, TypeError, UnicodeDecodeError, InvalidIdError, RecursionError):
                log.warning("ignoring malformed election candidate %s/%s", path, node)
    return out


# -- preferred leaders -------------------------------------------------------------------------------


def preferred_caught_up(ack: int | None, append: int) -> bool:
    """Whether a replica whose Ack on the leader's segments channel is ``ack`` holds every segment the
    leader published there (``append``: the channel's Append index). A replica that never acked is
    caught up only on a channel that never held a record."""
    return (0 if ack is None else ack) >= append


def prefer_preferred(
    preferred: Callable[[], int | None],
    caught_up: Callable[[int], bool],
    fallback: Callable[[Sequence[Candidate]], int | None] | None = None,
) -> Callable[[Sequence[Candidate]], int | None]:
    """A ``prefer`` hook for :class:`PartitionElection`: the preferred placement (``preferred()``) when it
    is in line and ``caught_up(placement)``, else what ``fallback`` prefers (None without one)."""

    def prefer(line: Sequence[Candidate]) -> int | None:
        p = preferred()
        if p is not None and any(c.placement_id == p for c in line) and caught_up(p):
            return p
        return None if fallback is None else fallback(line)

    return prefer


@dataclass(frozen=True)
class YieldDecision:
    """What a leader does about its partition's preferred leader at one check."""

    yield_now: bool
    ready_since: float | None
    """Since when the preferred leader has been ready (a candidate and caught up), for the next check;
    None while it is not."""
    reason: str


def decide_yield(
    own_placement_id: int,
    preferred_placement_id: int | None,
    *,
    candidate: bool,
    caught_up: bool,
    ready_since: float | None,
    now: float,
    delay_s: float,
    requested: bool = False,
) -> YieldDecision:
    """Should a leader hand leadership to the preferred placement now?

    Only when it is not the preferred leader itself, the preferred placement is a ``candidate`` and
    ``caught_up``, and it has been so since ``ready_since`` for at least ``delay_s`` seconds
    (``requested``: an operator asked for a preferred-leader election: no delay).
    """
    if preferred_placement_id is None or preferred_placement_id == own_placement_id:
        return YieldDecision(False, None, "leads as the preferred leader")
    if not candidate:
        return YieldDecision(False, None, f"preferred placement {preferred_placement_id} is not a candidate")
    if not caught_up:
        return YieldDecision(False, None, f"preferred placement {preferred_placement_id} is catching up")
    since = now if ready_since is None else ready_since
    waited = now - since
    if requested or waited >= delay_s:
        why = "a preferred-leader election was requested" if requested else f"ready for {waited:.1f}s"
        return YieldDecision(True, since, f"preferred placement {preferred_placement_id} is caught up ({why})")
    left = delay_s - waited
    return YieldDecision(False, since, f"preferred placement {preferred_placement_id} ready, {left:.1f}s to go")


def read_epoch(zk: Any, layout: ZkLayout, partition_id: str) -> EpochRecord:
    with zk_errors(f"read epoch of {partition_id}"):
        try:
            data, stat = zk.get(layout.epoch(partition_id))
        except NoNodeError:
            return EpochRecord(partition_id, 0, None, None)
    return EpochRecord.decode(partition_id, data, stat.version)


def next_epoch(current: EpochRecord, server_id: str, placement_id: int) -> EpochRecord:
    """The epoch record a new leader role CASes in over ``current``: one more, naming the new leader."""
    return EpochRecord(current.partition_id, current.epoch + 1, server_id, placement_id)


class PartitionElection:
    """One replica's candidacy for the leadership of one partition."""

    def __init__(
        self,
        zk: Any,
        partition_id: str,
        server_id: str,
        placement_id: int,
        *,
        replica_state: ReplicaState,
        layout: ZkLayout | None = None,
        security: ZkSecurity = OPEN,
        on_change: Callable[[LeaderState, Leadership | None], None] | None = None,
        prefer: Callable[[Sequence[Candidate]], int | None] | None = None,
        max_yields: int = 2,
        eligible: Callable[[Sequence[Candidate]], Collection[int] | Eligibility] | None = None,
    ) -> None:
        """``prefer``: given the line of candidates, the placement id that should lead (e.g. the replica
        with the highest acked position on the old leader's channel, TokuMX), or None for no preference.
        A first-in-line candidate that is not preferred, while the preferred one is in line, yields:
        it re-enters at the back (at most ``max_yields`` times per election round, i.e. until a leader takes
        a new epoch, so the election always ends).

        ``eligible``: given the line, the placement ids that may lead now (None: every candidate); a
        candidate only yields to a preferred one that may lead. An error in it is an error of the step
        (retried at the next event or :meth:`recheck`): nobody leads on a rule it could not read. An
        :class:`Eligibility` it returns also guards the epoch bump with the znode it was read from."""
        self.partition_id = validate_partition_id(partition_id)
        self.server_id = validate_server_id(server_id)
        self.placement_id = validate_placement_id(placement_id)
        self.replica_state = replica_state
        self._zk = zk
        self._layout = layout or ZkLayout()
        self._security = security
        self._on_change = on_change
        self._cond = threading.Condition(threading.RLock())
        self._work = threading.Lock()
        self._start_lock = threading.Lock()
        """Held by :meth:`start` from its state check to CANDIDATE: one candidate znode per entry."""
        self._state = LeaderState.IDLE
        self._leadership: Leadership | None = None
        self._connected = True
        """False from a SUSPENDED until the next CONNECTED (set by the kazoo listener under ``_cond``):
        a leadership granted meanwhile starts SUSPENDED and the reconnect verifies it (:meth:`_set`)."""
        self._node: str | None = None
        self._listening = False
        self._prefer = prefer
        self._eligible = eligible
        self._waiting_logged: tuple[str, ...] | None = None
        """The line last logged as having no candidate that may lead (logged once per line)."""
        self._max_yields = max_yields
        self._yields = 0
        self._yields_epoch: int | None = None
        self._step: tuple[str, float, int] | None = None
        """The running step: (name, monotonic start, thread ident)."""
        self._last_check = 0.0
        self._stuck_logged: float | None = None

    @classmethod
    def for_file(
        cls, zk: Any, file: MetadataFile, partition_id: str, server_id: str, placement_id: int, **kwargs: Any
    ) -> PartitionElection:
        """An election whose eligibility is what the METADATA file says about this placement."""
        index = file.index_of(partition_id)
        held = HeldReplica(partition_id, placement_id, file.range_of(index))
        state = discover_one(file, server_id, held).state
        return cls(zk, partition_id, server_id, placement_id, replica_state=state, **kwargs)

    # -- state ----------------------------------------------------------------------------------

    @property
    def state(self) -> LeaderState:
        with self._cond:
            return self._state

    @property
    def leadership(self) -> Leadership | None:
        with self._cond:
            return self._leadership if self._state is LeaderState.LEADER else None

    @property
    def is_leader(self) -> bool:
        return self.leadership is not None

    def check_writable(self) -> Leadership:
        """The current leadership, or LeadershipLostError if this replica must not accept writes now."""
        with self._cond:
            if self._state is LeaderState.LEADER and self._leadership is not None:
                return self._leadership
            raise LeadershipLostError(
                f"{self.server_id}#{self.placement_id} is not the writable leader of {self.partition_id} "
                f"(state {self._state.value})"
            )

    def wait_for(self, *states: LeaderState, timeout: float = 30.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._state in states, timeout)

    def _set(self, state: LeaderState, leadership: Leadership | None) -> LeaderState:
        """Move to ``state``; returns the state set. LEADER while the connection is SUSPENDED is set as
        SUSPENDED: an election step that ran while the listener saw the SUSPENDED (the state was not
        LEADER yet, so it had nothing to flip) must not hand out a writable leadership, and the next
        CONNECTED runs :meth:`_verify`, which renews the epoch (nothing is trusted while SUSPENDED)."""
        with self._cond:
            if state is LeaderState.LEADER and not self._connected:
                state = LeaderState.SUSPENDED
            if self._state is state and self._leadership == leadership:
                return state
            log.info(
                "%s#%d on %s: %s -> %s",
                self.server_id,
                self.placement_id,
                self.partition_id,
                self._state.value,
                state.value,
            )
            self._state = state
            self._leadership = leadership
            self._cond.notify_all()
        if self._on_change is not None:
            try:
                self._on_change(state, leadership)
            except Exception:
                log.exception("election on_change callback failed")
        return state

    # -- campaign -------------------------------------------------------------------------------

    def start(self) -> None:
        """Enter the election (non-blocking). Only LIVE replicas are eligible."""
        if self.replica_state is not ReplicaState.LIVE:
            raise NotEligibleError(
                f"{self.server_id}#{self.placement_id} is {self.replica_state.value} in {self.partition_id}; "
                "only LIVE replicas take part in leader election"
            )
        # Two callers may (re)start a LOST election at once (the node's handover thread and its
        # supervision tick): checked and claimed under one lock, or each creates a candidate znode and
        # the one this object forgets stays first in line, in a live session, for ever.
        with self._start_lock:
            with self._cond:
                if self._state in (LeaderState.CANDIDATE, LeaderState.LEADER, LeaderState.SUSPENDED):
                    return
            self._yields = 0
            ensure_path(self._zk, self._layout.election(self.partition_id), self._security)
            with zk_errors(f"create epoch of {self.partition_id}"):
                with contextlib.suppress(NodeExistsError):
                    self._zk.create(self._layout.epoch(self.partition_id), b"", acl=self._security.acls())
                data = json.dumps({"server_id": self.server_id, "placement_id": self.placement_id}).encode()
                path = self._zk.create(
                    f"{self._layout.election(self.partition_id)}/{_PREFIX}",
                    data,
                    acl=self._security.acls(),
                    ephemeral=True,
                    sequence=True,
                )
            with self._cond:
                self._node = path.rsplit("/", 1)[-1]
            if not self._listening:
                self._zk.add_listener(self._on_connection_state)
                self._listening = True
                with self._cond:  # kazoo sets its state before it calls the listeners, which wait for this
                    self._connected = getattr(self._zk, "state", KazooState.CONNECTED) == KazooState.CONNECTED
            self._set(LeaderState.CANDIDATE, None)
        self._spawn(self._check)

    def _spawn(self, fn: Callable[[], None]) -> None:
        threading.Thread(
            target=self._guarded, args=(fn,), daemon=True, name=f"election-{self.partition_id[:8]}"
        ).start()

    def _guarded(self, fn: Callable[[], None]) -> None:
        with self._work:
            with self._cond:
                self._step = (getattr(fn, "__name__", "step"), time.monotonic(), threading.get_ident())
            try:
                fn()
            except (MetadataError, KazooException):
                log.warning(
                    "election step for %s failed; will retry on the next event", self.partition_id, exc_info=True
                )
            finally:
                with self._cond:
                    self._step = None

    def recheck(self, now: float | None = None) -> None:
        """Liveness backstop, called by the node at every supervision tick (DESIGN.md section 7).

        A candidate waits for a one-shot watch on its predecessor; if that event never arrives (a
        watch lost with a connection, a step that failed between two events), nothing else would
        wake it. So a candidate re-reads the line when its last check is :data:`RECHECK_S` old: a
        few ZooKeeper reads, and the watch it sets again is the same callback (kazoo keeps one per
        path). A step that has run for :data:`STUCK_STEP_S` is logged with its thread's stack."""
        now = time.monotonic() if now is None else now
        with self._cond:
            step = self._step
            due = self._state is LeaderState.CANDIDATE and now - self._last_check >= RECHECK_S
            if due and step is None:
                self._last_check = now
        if step is not None:
            name, since, ident = step
            if now - since >= STUCK_STEP_S and self._stuck_logged != since:
                self._stuck_logged = since
                frame = sys._current_frames().get(ident)
                stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no frame)"
                log.warning(
                    "election step %s of %s has run for %.0f s; its thread:\n%s",
                    name,
                    self.partition_id,
                    now - since,
                    stack,
                )
            return
        if due:
            self._spawn(self._check)

    def _on_predecessor_event(self, _event: Any) -> None:
        self._spawn(self._check)

    def _check(self) -> None:
        """Lead if first in line, else watch the predecessor."""
        with self._cond:
            self._last_check = time.monotonic()
        while True:
            with self._cond:
                node = self._node
                if node is None or self._state not in (LeaderState.CANDIDATE,):
                    return
            line = candidates(self._zk, self._layout, self.partition_id)
            names = [c.node for c in line]
            if node not in names:
                self._step_down("candidate znode is gone")
                return
            idx = names.index(node)
            if self._drop_own_strays(line[:idx]):
                continue
            if idx == 0:
                rule = self._allowed(line)
                allowed = rule.allowed
                if self.placement_id not in allowed:
                    if any(c.placement_id in allowed for c in line[1:]):
                        self._requeue(node, counted=False)
                        continue
                    if self._wait_for_line(names):
                        return
                    continue  # the line changed meanwhile: look again
                if self._should_yield(line, allowed):
                    self._requeue(node)
                    continue
                if self._become_leader(node, rule):
                    return
                continue  # the rule's znode changed before the bump: look again
            pred = f"{self._layout.election(self.partition_id)}/{names[idx - 1]}"
            with zk_errors("watch predecessor"):
                if self._zk.exists(pred, watch=self._on_predecessor_event) is not None:
                    return

    def _drop_own_strays(self, ahead: Sequence[Candidate]) -> bool:
        """Delete candidate znodes ahead of this one that this session created for this replica but no
        longer tracks (a start that raced another): nobody would ever remove them while the session
        lives, and the line would wait behind them. True if any was deleted."""
        mine = [c for c in ahead if c.server_id == self.server_id and c.placement_id == self.placement_id]
        session = (self._zk.client_id or (None,))[0] if mine else None
        if session is None:
            return False
        base = self._layout.election(self.partition_id)
        dropped = False
        for c in mine:
            with zk_errors(f"remove a stray candidate of {self.partition_id}"):
                stat = self._zk.exists(f"{base}/{c.node}")
                if stat is None or stat.ephemeralOwner != session:
                    continue  # another session's (an older incarnation's): it ends with that session
                with contextlib.suppress(NoNodeError):
                    self._zk.delete(f"{base}/{c.node}", version=stat.version)
            dropped = True
            log.warning(
                "%s#%d removed its own stray candidate %s of %s (its session's, not tracked)",
                self.server_id,
                self.placement_id,
                c.node,
                self.partition_id,
            )
        return dropped

    def _allowed(self, line: Sequence[Candidate]) -> Eligibility:
        """The placements of ``line`` that may lead now (the ``eligible`` hook; all without one)."""
        if self._eligible is None:
            return Eligibility(frozenset(c.placement_id for c in line))
        rule = self._eligible(line)
        return rule if isinstance(rule, Eligibility) else Eligibility(frozenset(rule))

    def _wait_for_line(self, names: Sequence[str]) -> bool:
        """First in line but no candidate may lead: watch the line, so that a candidate entering it
        (e.g. an in-sync replica whose node restarted) wakes this one. False if the line already
        changed since ``names`` were read (then the caller looks again)."""
        base = self._layout.election(self.partition_id)
        with zk_errors(f"watch the line of {self.partition_id}"):
            now = sorted(
                (n for n in self._zk.get_children(base, watch=self._on_predecessor_event) if n.startswith(_PREFIX)),
                key=_seq,
            )
        if now != list(names) and [c.node for c in candidates(self._zk, self._layout, self.partition_id)] != list(
            names
        ):
            # (children candidates() skips, malformed znodes, are no change of the line: read again
            # after the watch was set, so a candidate entering the line since still fires it)
            return False
        if self._waiting_logged != tuple(names):
            self._waiting_logged = tuple(names)
            log.warning(
                "%s#%d is first in line for %s but may not lead (out of sync while an in-sync replica of "
                "the partition exists); waiting for an in-sync replica to campaign",
                self.server_id,
                self.placement_id,
                self.partition_id,
            )
        return True

    def _should_yield(self, line: Sequence[Candidate], allowed: Collection[int] | None = None) -> bool:
        if self._prefer is None:
            return False
        # the yield budget is per election round: a leader elected since the last yield starts a new one
        # (a candidate stays in line across many handovers of a preferred leader)
        with contextlib.suppress(MetadataError):  # unreadable now: the budget of the last round stands
            epoch = read_epoch(self._zk, self._layout, self.partition_id).epoch
            if epoch != self._yields_epoch:
                self._yields, self._yields_epoch = 0, epoch
        if self._yields >= self._max_yields:
            return False
        try:
            preferred = self._prefer(line)
        except Exception:  # a preference that cannot be computed never blocks the election
            log.warning("election preference of %s failed; ignoring it", self.partition_id, exc_info=True)
            return False
        return (
            preferred is not None
            and preferred != self.placement_id
            and (allowed is None or preferred in allowed)
            and any(c.placement_id == preferred for c in line[1:])
        )

    def _requeue(self, node: str, *, counted: bool = True) -> None:
        """Give way to a preferred candidate, or one that may lead when this one may not (not
        ``counted`` against the yield budget): re-enter the line at its back."""
        if counted:
            self._yields += 1
        base = self._layout.election(self.partition_id)
        data = json.dumps({"server_id": self.server_id, "placement_id": self.placement_id}).encode()
        with zk_errors(f"re-enter the election of {self.partition_id}"):
            path = self._zk.create(f"{base}/{_PREFIX}", data, acl=self._security.acls(), ephemeral=True, sequence=True)
            with self._cond:
                self._node = path.rsplit("/", 1)[-1]
            with contextlib.suppress(NoNodeError):
                self._zk.delete(f"{base}/{node}")
        log.info(
            "%s#%d yields the leadership of %s to a preferred, more advanced or in-sync replica",
            self.server_id,
            self.placement_id,
            self.partition_id,
        )

    def _become_leader(self, node: str, rule: Eligibility) -> bool:
        """Bump the epoch and lead. False when ``rule``'s znode changed since it was read (the caller
        looks at the line again); True otherwise (led, stepped down, or no longer a candidate)."""
        cand_path = f"{self._layout.election(self.partition_id)}/{node}"
        epoch_path = self._layout.epoch(self.partition_id)
        while True:
            with zk_errors(f"bump epoch of {self.partition_id}"):
                data, stat = self._zk.get(epoch_path)
                try:
                    rec = EpochRecord.decode(self.partition_id, data, stat.version)
                except MetadataDecodeError:
                    log.error("epoch znode of %s is corrupt; refusing to lead", self.partition_id)
                    raise
                new = next_epoch(rec, self.server_id, self.placement_id)
                txn = self._zk.transaction()
                txn.check(cand_path, 0)
                txn.set_data(epoch_path, new.encode(), version=stat.version)
                if rule.znode is not None:
                    if rule.version < 0:
                        txn.create(rule.znode, b"", acl=self._security.acls())
                    else:
                        txn.check(rule.znode, rule.version)
                results = txn.commit()
            if not any(isinstance(r, Exception) for r in results):
                lead = Leadership(self.partition_id, self.server_id, self.placement_id, new.epoch)
                with self._cond:
                    if self._state is not LeaderState.CANDIDATE:
                        return True
                if self._set(LeaderState.LEADER, lead) is LeaderState.LEADER:
                    self._watch_epoch()
                return True
            if isinstance(results[0], (NoNodeError, BadVersionError)):
                self._step_down("candidate znode vanished before the epoch bump")
                return True
            if len(results) > 2 and isinstance(results[2], (NoNodeError, NodeExistsError, BadVersionError)):
                log.info(
                    "%s#%d: %s changed before the epoch bump of %s; looking at the line again",
                    self.server_id,
                    self.placement_id,
                    rule.znode,
                    self.partition_id,
                )
                return False
            log.debug("epoch CAS race on %s, retrying", self.partition_id)

    def _watch_epoch(self) -> None:
        def on_event(_event: Any) -> None:
            self._spawn(self._verify)

        with zk_errors("watch epoch"):
            self._zk.exists(self._layout.epoch(self.partition_id), watch=on_event)

    def _verify(self) -> None:
        """Still leader? (after a reconnect or an epoch change)"""
        with self._cond:
            if not self._connected:
                return  # the next CONNECTED runs it (the listener), nothing is read while SUSPENDED
            lead = self._leadership
            node = self._node
            if self._state not in (LeaderState.LEADER, LeaderState.SUSPENDED) or lead is None or node is None:
                if self._state is LeaderState.CANDIDATE:
                    self._spawn(self._check)
                return
            resumed = self._state is LeaderState.SUSPENDED
        rec = read_epoch(self._zk, self._layout, self.partition_id)
        with zk_errors("verify candidacy"):
            alive = self._zk.exists(f"{self._layout.election(self.partition_id)}/{node}") is not None
        if not (alive and rec.epoch == lead.epoch and rec.placement_id == self.placement_id):
            self._step_down(f"epoch is now {rec.epoch} (ours {lead.epoch}), candidate alive={alive}")
            return
        if resumed:
            # DESIGN.md section 7: a leadership resumed after SUSPENDED is a new leader role and never
            # reuses an epoch: it takes the next one by CAS, as an election does.
            renewed = self._renew_epoch(node, rec)
            if renewed is None:
                self._step_down(f"the epoch of {self.partition_id} moved on while this leader was suspended")
                return
            lead = renewed
        if self._set(LeaderState.LEADER, lead) is LeaderState.LEADER:
            self._watch_epoch()

    def _renew_epoch(self, node: str, rec: EpochRecord) -> Leadership | None:
        """CAS the epoch from ``rec`` (still this leader's) to the next one, only while this candidate's
        znode exists and the epoch znode is still at ``rec.version``; None if either check fails."""
        new = next_epoch(rec, self.server_id, self.placement_id)
        with zk_errors(f"renew the epoch of {self.partition_id}"):
            txn = self._zk.transaction()
            txn.check(f"{self._layout.election(self.partition_id)}/{node}", 0)
            txn.set_data(self._layout.epoch(self.partition_id), new.encode(), version=rec.version)
            results = txn.commit()
        if any(isinstance(r, Exception) for r in results):
            return None
        log.info("%s#%d resumes %s with epoch %d", self.server_id, self.placement_id, self.partition_id, new.epoch)
        return Leadership(self.partition_id, self.server_id, self.placement_id, new.epoch)

    def _step_down(self, why: str) -> None:
        log.warning("%s#%d steps down from %s: %s", self.server_id, self.placement_id, self.partition_id, why)
        with self._cond:
            node, self._node = self._node, None
        if node is not None:
            path = f"{self._layout.election(self.partition_id)}/{node}"
            try:
                # a ConnectionLoss must not leave the znode first in line for the session's lifetime:
                # retried (a retry after a delete that did land finds NoNode)
                cas_retry(max_tries=10, deadline=10.0)(self._zk.delete, path)
            except (NoNodeError, SessionExpiredError):
                pass  # gone: deleted, or with the session (an ephemeral znode)
            except (KazooException, RetryFailedError):
                log.error("%s: could not delete candidate %s; it stays in line until the session ends", why, path)
        self._set(LeaderState.LOST, None)

    def _on_connection_state(self, state: str) -> bool:
        """kazoo listener: runs on kazoo's thread, so it only flips state and schedules work."""
        with self._cond:
            current = self._state
            self._connected = state == KazooState.CONNECTED
        if state == KazooState.SUSPENDED:
            if current is LeaderState.LEADER:
                with self._cond:
                    lead = self._leadership
                self._set(LeaderState.SUSPENDED, lead)
        elif state == KazooState.LOST:
            if current in (LeaderState.LEADER, LeaderState.SUSPENDED, LeaderState.CANDIDATE):
                with self._cond:
                    self._node = None  # the ephemeral candidate died with the session
                self._set(LeaderState.LOST, None)
        elif state == KazooState.CONNECTED and current in (LeaderState.SUSPENDED, LeaderState.CANDIDATE):
            self._spawn(self._verify if current is LeaderState.SUSPENDED else self._check)
        return False

    def resign(self) -> None:
        """Leave the election (and the leadership, if held)."""
        with self._work:
            with self._cond:
                active = self._state in (LeaderState.CANDIDATE, LeaderState.LEADER, LeaderState.SUSPENDED)
            if active:
                self._step_down("resigned")

    def close(self) -> None:
        self.resign()
        if self._listening:
            self._zk.remove_listener(self._on_connection_state)
            self._listening = False

    def __enter__(self) -> PartitionElection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
