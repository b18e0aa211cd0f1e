"""A splitter whose SPLIT_FINALIZE call raises keeps the parent paused until METADATA says what happened.

The real :class:`PartitionSplitter` procedure (``run``/``_round``) with its Kafka and ZooKeeper sides
replaced: once SPLIT_FINALIZE may have committed, un-pausing the parent would let its leader accept
writes that no child will hold (METADATA no longer lists the parent), and those acknowledged rows
would be gone once its replicas' UNLOAD_FINAL deleted its channels.
"""

from __future__ import annotations

import threading
import types
from typing import Any

import pytest

import storage_node.roles.split as split
from metadata.errors import CommitOutcomeUnknownError, MetadataError
from metadata.operations import SplitNotAckedError
from shoal.worker import Worker
from storage_node.roles.split import PartitionSplitter, SplitPhase, SplitStats


class Metadata:
    """``finalize_split`` and ``current``: whether the change committed, and whether ZooKeeper answers."""

    def __init__(self, *, commits: bool, error: Exception) -> None:
        self.commits, self.error = commits, error
        self.committed = False
        self.reachable = threading.Event()
        self.fences: list[Any] = []

    def finalize_split(self, *_a: Any, fence: Any = None, **_k: Any) -> None:
        self.fences.append(fence)
        self.committed = self.commits
        raise self.error

    def current(self, _table: str) -> Any:
        if not self.reachable.is_set():
            raise MetadataError("ZooKeeper unreachable")
        listed = [] if self.committed else [types.SimpleNamespace(partition_id="p" * 32)]
        return types.SimpleNamespace(partitions=listed)


def _splitter(meta: Metadata, monkeypatch: pytest.MonkeyPatch) -> tuple[PartitionSplitter, Any]:
    s = object.__new__(PartitionSplitter)
    Worker.__init__(s, "split-test")
    leader = types.SimpleNamespace(
        ingest_paused=threading.Event(),
        ingest_quiesced=threading.Event(),
        stopped=threading.Event(),
        accepted_through=None,
        term=None,
    )

    def quiesce() -> None:  # the leader's step: quiesced only once it saw the pause
        while not leader.stopped.is_set():
            if leader.ingest_paused.is_set():
                leader.ingest_quiesced.set()
            leader.stopped.wait(0.01)

    threading.Thread(target=quiesce, daemon=True).start()
    s.leader, s.parent = leader, types.SimpleNamespace(name="t/parent", partition_id="p" * 32)
    s.table, s.precopy_s, s.freeze_timeout_s, s.poll_s = types.SimpleNamespace(name="t"), 1.0, 1.0, 0.01
    s.children, s.phase, s.stats = (), SplitPhase.COPYING, SplitStats()
    s._publishers, s._staging = {}, {}
    s._prepare = lambda: None  # type: ignore[method-assign]
    s._copy = lambda: True  # type: ignore[method-assign]
    s._behind = lambda: {}  # type: ignore[method-assign]
    s._seed_child_epochs = lambda: None  # type: ignore[method-assign]
    monkeypatch.setattr(split, "chain_max_gtid", lambda _replica: (3, 10))
    s.client = types.SimpleNamespace(coordinator=meta)
    s.election = {"epoch": 3}  # type: ignore[attr-defined]
    s.fence = lambda: types.SimpleNamespace(partition_id="p" * 32, epoch=s.election["epoch"])  # type: ignore[attr-defined]
    return s, leader


def test_a_finalize_that_committed_although_the_call_raised_ends_the_split_with_the_parent_paused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    meta = Metadata(commits=True, error=CommitOutcomeUnknownError("connection lost while reading the outcome"))
    s, leader = _splitter(meta, monkeypatch)
    s.start()
    try:
        assert not s.stopped.wait(0.5)
        # ZooKeeper cannot say: the parent stays paused (it used to be un-paused here)
        assert s.phase is SplitPhase.FINALIZING and leader.ingest_paused.is_set()
        meta.reachable.set()  # it committed after all: the split is done, the parent still paused
        assert s.stopped.wait(2.0)
        assert s.phase is SplitPhase.FINALIZED and s.error is None and leader.ingest_paused.is_set()
    finally:
        s.stop()
        leader.stopped.set()


def test_a_finalize_that_did_not_commit_unpauses_and_tries_again(monkeypatch: pytest.MonkeyPatch) -> None:
    meta = Metadata(commits=False, error=SplitNotAckedError("p" * 32, (3, 10), {2: None}))
    meta.reachable.set()
    s, leader = _splitter(meta, monkeypatch)
    rounds: list[bool] = []
    real_round = s._round

    def counting() -> bool:
        rounds.append(leader.ingest_paused.is_set())
        return real_round()

    s._round = counting  # type: ignore[method-assign]
    s.start()
    try:
        assert not s.stopping.wait(0.3)
        assert len(rounds) > 1 and not any(rounds) and s.phase is not SplitPhase.FINALIZED  # each began un-paused
    finally:
        s.stop()
        s.join(5)
        leader.stopped.set()
    assert not leader.ingest_paused.is_set()


def test_the_finalize_is_fenced_by_the_epoch_the_parent_was_frozen_at(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fenced by the election's epoch when it commits, a finalize passed with a newer term of the
    parent leading unpaused (its writes would reach no child); nor is one sent once the frozen
    leader wrote at another epoch than the one it was frozen at."""
    meta = Metadata(commits=False, error=SplitNotAckedError("p" * 32, (3, 10), {2: None}))
    meta.reachable.set()
    s, leader = _splitter(meta, monkeypatch)
    s._seed_child_epochs = lambda: s.election.update(epoch=4)  # type: ignore[attr-defined,method-assign]
    assert not s._round()
    [fence] = meta.fences
    assert fence.epoch == 3  # taken as the parent froze; the election's epoch moved on (4) since
    leader.term = 7  # the frozen leader wrote at a newer epoch since
    assert not s._round() and len(meta.fences) == 1
    leader.term = 2  # an idle parent's role whose epoch a ZooKeeper blip renewed: it wrote nothing since
    assert not s._round() and len(meta.fences) == 2
    leader.stopped.set()
