"""The nemesis: injects one planned :class:`~chaos.models.Fault` into a local cluster and heals it.

Processes are the cluster file's (``shoal up``), acted on by pid only: kill -9 and restart in place
(:func:`shoal_app.runtime.restart.restart_process`: same data dir, ports and command line), SIGSTOP
and SIGCONT. Targets are resolved when the fault starts: the partition's leader from its epoch
znode, a follower or a broker by the fault's ``pick``.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from chaos.models import Fault, FaultEvent, FaultKind
from chaos.schedule import ZK_BLIP_S
from chaos.workload import TABLE
from metadata.client import MetadataClient
from metadata.election import read_epoch
from metadata.keyspace import UNBOUNDED
from shoal.cluster_file import ClusterInfo
from shoal.worker import poll_until
from shoal_app.runtime.process import is_running, kill
from shoal_app.runtime.restart import restart_process, start_missing

NODES = ("node-1", "node-2", "node-3")
SPLIT_TIMEOUT_S = 120.0
"""How long a split fault waits for SPLIT_FINALIZE (its copy runs under the writers' load)."""
RELEASE_BEFORE_END_S = (0.3, 1.8)
"""quiet_zk_blip: the writers resume this long before ZooKeeper does (by the fault's pick, in this range)."""
NO_LEADER = "no leader within 30 s"
NO_SPLIT = "no split"
"""How the note of a fault the nemesis could not inject starts (``FaultEvent.injected`` False)."""


class Nemesis:
    def __init__(
        self,
        info: ClusterInfo,
        client: MetadataClient,
        partition_id: str,
        *,
        cache_dir: Path,
        kafka_heap_mb: int,
        clock: Callable[[], float],
        halt: threading.Event,
        quiet: threading.Event,
        highest_key: Callable[[], int] = lambda: 0,
    ) -> None:
        self.info, self.client, self.pid = info, client, partition_id
        self.highest_key = highest_key
        """The highest key written so far (a split's point is the middle of the target's keys)."""
        self.cache_dir, self.kafka_heap_mb = cache_dir, kafka_heap_mb
        self.clock, self.halt = clock, halt
        self.quiet = quiet
        """Set while the writers must stay idle (they wait on it between writes)."""
        self.paused: set[str] = set()

    # -- targets ----------------------------------------------------------------------------------

    def leader(self, timeout_s: float = 30.0) -> str | None:
        """The partition's leader (a running node), waiting up to ``timeout_s`` for one."""
        found: list[str] = []

        def probe() -> bool:
            try:
                server = read_epoch(self.client.zk, self.client.layout, self.pid).server_id
            except Exception:
                return False
            record = self.info.process(server) if server else None
            if server and record is not None and is_running(record):
                found.append(server)
                return True
            return False

        return found[-1] if poll_until(probe, timeout_s, interval_s=0.5) else None

    def _target(self, fault: Fault) -> tuple[str, str]:
        """(process name, note) for ``fault``."""
        kind = fault.kind
        if kind in (FaultKind.ZK_BLIP, FaultKind.ZK_RESTART, FaultKind.QUIET_ZK_BLIP):
            return "zookeeper", ""
        if kind is FaultKind.SPLIT:
            return "metadata", ""
        if kind is FaultKind.BROKER_RESTART:
            return f"kafka-{fault.pick % self.info.brokers + 1}", ""
        leader = self.leader()
        if kind in (FaultKind.KILL_LEADER, FaultKind.PAUSE_LEADER, FaultKind.QUIET_PAUSE_LEADER):
            if leader is not None:
                return leader, "leader"
            return NODES[fault.pick % len(NODES)], f"{NO_LEADER}: a node picked instead"
        followers = sorted(n for n in NODES if n != leader)
        return followers[fault.pick % len(followers)], f"follower (leader {leader})"

    # -- faults -----------------------------------------------------------------------------------

    def inject(self, fault: Fault) -> FaultEvent:
        """Inject ``fault``, hold it for its duration, heal it; what was done."""
        name, note = self._target(fault)
        started = self.clock()
        kind = fault.kind
        # a leader fault on whichever node, because none led: not the fault the schedule names
        injected = not note.startswith(NO_LEADER)
        if kind is FaultKind.SPLIT:
            note = self._split()
            injected = not note.startswith(NO_SPLIT)
        elif kind in (FaultKind.PAUSE_LEADER, FaultKind.PAUSE_FOLLOWER, FaultKind.ZK_BLIP):
            self._pause(name, fault.duration_s)
        elif kind is FaultKind.QUIET_ZK_BLIP:
            self.quiet.set()
            # the writers start again just before the end of the blip, when the nodes' clients have seen
            # their read timeout (SUSPENDED): the leader's first batch after the quiet phase meets it
            low, high = RELEASE_BEFORE_END_S
            early = low + (fault.pick % 10) / 10 * (high - low)
            release = threading.Timer(ZK_BLIP_S - early, self.quiet.clear)
            try:
                self.halt.wait(fault.duration_s)
                note = f"leader {self.leader(0.0)} before the blip, writers back {early:.2f} s before its end"
                release.start()
                self._pause(name, ZK_BLIP_S)
            finally:
                release.cancel()
                self.quiet.clear()
        elif kind is FaultKind.QUIET_PAUSE_LEADER:
            self.quiet.set()
            try:
                self.halt.wait(fault.duration_s)
            finally:
                self.quiet.clear()
            self._pause(name, ZK_BLIP_S)
        elif kind is FaultKind.WIPE_THEN_FAILOVER:
            self._kill(name)
            self._wipe(name)
            self._restart(name)
            leader = self.leader()
            note += f"; then leader {leader} killed"
            injected = injected and leader is not None  # no failover without a leader to kill
            if leader is not None:
                self._kill(leader)
                self.halt.wait(fault.duration_s)
                self._restart(leader)
        else:
            self._kill(name)
            if kind is FaultKind.WIPE_FOLLOWER:
                self._wipe(name)
            self.halt.wait(fault.duration_s)
            self._restart(name)
        return FaultEvent(
            index=fault.index,
            kind=kind,
            target=name,
            started_s=round(started, 2),
            healed_s=round(self.clock(), 2),
            note=note,
            injected=injected,
        )

    def _split(self) -> str:
        """Split the target partition at the middle of its written keys; wait for SPLIT_FINALIZE; the
        low child becomes the target. A note of what was done (or why nothing was)."""
        coordinator = self.client.coordinator
        file = coordinator.current(TABLE)
        ks = file.table.keyspace
        key_range = file.range_of(file.index_of(self.pid))
        begin = 0 if key_range.begin == UNBOUNDED else int(ks.decode(key_range.begin))
        end = self.highest_key() + 1 if key_range.end == UNBOUNDED else int(ks.decode(key_range.end))
        point = (begin + end) // 2
        if not begin < point < end:
            return f"{NO_SPLIT}: too few keys in [{begin}, {end})"
        servers = [p.server_id for p in file.partition(self.pid).servers]
        split = coordinator.split(TABLE, self.pid, ks.encode(point), servers, servers[1:] + servers[:1])
        low = split.partition(self.pid).split_partition_id_low

        def finalized() -> bool:
            try:
                return all(e.partition_id != self.pid for e in coordinator.current(TABLE).partitions)
            except Exception:
                return False

        if not poll_until(finalized, SPLIT_TIMEOUT_S, interval_s=0.5):
            raise RuntimeError(f"split of {self.pid} at {point} not finalized within {SPLIT_TIMEOUT_S:.0f} s")
        assert low is not None
        note = f"split {self.pid[:8]} at {point}: faults now target {low[:8]}"
        self.pid = low
        return note

    def _pause(self, name: str, seconds: float) -> None:
        record = self.info.process(name)
        assert record is not None and is_running(record), name
        os.kill(record.pid, signal.SIGSTOP)
        self.paused.add(name)
        try:
            self.halt.wait(seconds)
        finally:
            os.kill(record.pid, signal.SIGCONT)
            self.paused.discard(name)

    def _kill(self, name: str) -> None:
        record = self.info.process(name)
        assert record is not None, name
        kill(record)
        if not poll_until(lambda: not is_running(record), 30.0, interval_s=0.1):
            raise RuntimeError(f"{name} (pid {record.pid}) still runs 30 s after kill -9")

    def _wipe(self, name: str) -> None:
        """Disk loss: everything in the node's data dir goes, except its log."""
        data = Path(self.info.data_dir) / "nodes" / name
        for child in data.iterdir():
            if child.name == "node.log":
                continue
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()

    def _restart(self, name: str) -> None:
        self.info = restart_process(
            self.info, name, cache_dir=self.cache_dir, kafka_heap_mb=self.kafka_heap_mb, timeout_s=150.0
        )

    def dump_stacks(self, wait_s: float = 2.0) -> dict[str, str]:
        """``kill -USR1`` every running node (its log gets every thread's stack), then each node's
        election threads and last election lines (:func:`election_stacks`), for a run that failed."""
        logs: dict[str, tuple[Path, int]] = {}
        for name in NODES:
            record = self.info.process(name)
            if record is None or not is_running(record):
                continue
            path = Path(self.info.data_dir) / "nodes" / name / "node.log"
            logs[name] = (path, path.stat().st_size if path.exists() else 0)
            os.kill(record.pid, signal.SIGUSR1)
        time.sleep(wait_s)
        out = {}
        for name, (path, size) in logs.items():
            data = path.read_bytes()  # sizes are in bytes
            before, dump = data[max(0, size - 20_000) : size], data[size:]
            out[name] = election_stacks(before.decode(errors="replace"), dump.decode(errors="replace"))
        return out

    def heal_all(self) -> list[str]:
        """SIGCONT anything still paused and start every process that does not run (in place)."""
        for name in list(self.paused):
            record = self.info.process(name)
            if record is not None and is_running(record):
                os.kill(record.pid, signal.SIGCONT)
            self.paused.discard(name)
        self.info, started = start_missing(
            self.info, cache_dir=self.cache_dir, kafka_heap_mb=self.kafka_heap_mb, timeout_s=150.0
        )
        return started


def election_stacks(before: str, dump: str) -> str:
    """The election lines of a node log's ``before`` part (the last 8) and, from the ``faulthandler``
    ``dump`` that follows it, the stacks of the threads that run election code."""
    lines = [ln for ln in before.splitlines() if "metadata.election" in ln][-8:]
    kept = [t.strip() for t in dump.split("\n\n") if "hread 0x" in t and ("election.py" in t or "rebalance.py" in t)]
    return "\n".join(lines + kept)


def elapsed_clock() -> Callable[[], float]:
    """Seconds since this call (the run's time axis)."""
    t0 = time.monotonic()
    return lambda: time.monotonic() - t0
