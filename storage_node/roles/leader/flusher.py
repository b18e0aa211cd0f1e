"""The leader's memtable flushes, on a thread of their own (DESIGN.md section 4).

A flush merges the memtable (newest GTID per key), sorts it, writes it as a durable Parquet segment
and makes it the chain's root (:meth:`storage_node.replica.PartitionReplica.flush`). On the
leader's thread it held up the next transaction, and every ``sync()`` waiting on it, for as long as
it took: up to a second or two for a 1M-row memtable. The leader now hands the flush to its
:class:`MemtableFlusher` (thread ``flush-<pid8>``) and goes on consuming: the replica freezes the
memtable under its lock and starts a new one, scans read the frozen one until its segment is in the
chain, and pyarrow's sort and Parquet writer release the GIL, so the two overlap.

Rules that keep the chain what it was with one thread:

- at most one flush is in flight, so segments cover the WAL channel in order;
- the leader thread's other chain changes (merging unreferenced and peer segments, the flush of a
  split's quiesce) wait until no flush is in flight (:meth:`MemtableFlusher.wait_idle`);
- memory stays bounded: when the new memtable reaches a size threshold while a flush is in flight,
  the leader waits for it (at most the frozen memtable and one full one are held);
- a flush that fails puts its rows back in front of the memtable (the replica does) and ends the
  flusher with its error, which the leader raises on its next step: the role ends as it did when the
  flush ran on its thread (a stale epoch fences it, anything else fails it);
- the leader stops the flusher before it exits (a flush in progress finishes), so the replica has no
  frozen memtable when a follower role or the next term takes it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from shoal.worker import Worker, wait_any
from storage_node.replica import PartitionReplica


class MemtableFlusher(Worker):
    """Flushes ``replica``'s memtable when asked (:meth:`submit`), one flush at a time.

    ``on_flushed`` runs on this thread after each flush that wrote a segment (the leader counts it
    and wakes its segment publisher)."""

    def __init__(self, replica: PartitionReplica, on_flushed: Callable[[], None]) -> None:
        super().__init__(f"flush-{replica.partition_id[:8]}")
        self.replica = replica
        self._on_flushed = on_flushed
        self._wake = threading.Event()
        self._epoch: int | None = None
        self.idle = threading.Event()
        """Set while no flush is asked for or in progress."""
        self.idle.set()

    def submit(self, epoch: int) -> bool:
        """Ask for a flush of the memtable as it is when the flush starts, with ``epoch``; False if a
        flush is already in flight (nothing is queued). Called by the leader thread only."""
        self.raise_failure()
        if not self.idle.is_set():
            return False
        self._epoch = epoch
        self.idle.clear()
        self._wake.set()
        return True

    def wait_idle(self) -> None:
        """Block until no flush is in flight (or the flusher has ended), then raise its error if any."""
        while not wait_any((self.idle, self.stopped), 1.0):
            pass
        self.raise_failure()

    def raise_failure(self) -> None:
        """Raise the error that ended a flush (the leader's role ends with it)."""
        if self.error is not None:
            raise self.error

    def request_stop(self) -> None:
        super().request_stop()
        self._wake.set()

    def run(self) -> None:
        try:
            while True:
                self._wake.wait()  # an idle flusher sleeps: no polling (a node runs one per leader)
                self._wake.clear()
                if self.stopping.is_set():
                    return  # a flush asked for but not started is skipped: its rows are in the WAL
                epoch = self._epoch
                assert epoch is not None
                if self.replica.flush(epoch) is not None:
                    self._on_flushed()
                self.idle.set()
        finally:
            self.idle.set()
