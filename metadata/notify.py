"""Change notification (EventQL table partitioning, section 6.1).

:class:`TableWatcher` watches a table's znode. ZooKeeper watches fire at least once per change
but may coalesce several changes into one notification, so the watcher does not trust them to be
one-per-commit: on every notification it reads the current txnid and walks the ``parent_txnid``
chain back to the last version it delivered, then delivers every missed version in sequence
order. A watcher restarted with ``since_sequence`` (a node that was down) thereby learns of every
commit it missed, in order, exactly once.

:func:`discovery_listener` turns a watcher into partition discovery for one server.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any

from metadata.discovery import HeldReplica, PartitionDiscovery, discover
from metadata.errors import UnknownTableError
from metadata.metadata_file import MetadataFile
from metadata.store import FileStore
from metadata.zk_layout import TableHead, ZkLayout
from shoal.errors import MetadataError, ShoalError
from shoal.worker import Worker

log = logging.getLogger(__name__)

OnChange = Callable[[MetadataFile], None]


class TableWatcher:
    """Delivers every committed METADATA version of one table to ``on_change``, in order.

    ``since_sequence=None`` starts with the current version; an int delivers every version after
    it. Delivery runs on the watcher's own thread, never on kazoo's event thread.
    """

    def __init__(
        self,
        zk: Any,
        store: FileStore,
        table: str,
        on_change: OnChange,
        *,
        layout: ZkLayout | None = None,
        since_sequence: int | None = None,
    ) -> None:
        self._zk = zk
        self._store = store
        self.table = table
        self._path = (layout or ZkLayout()).table(table)
        self._on_change = on_change
        self._last = since_sequence
        self._last_txnid: str | None = None
        self._events: queue.Queue[TableHead | None] = queue.Queue()
        self._cond = threading.Condition()
        self._worker = _Delivery(self)
        self._started = False
        self.errors: list[ShoalError] = []

    @property
    def last_sequence(self) -> int | None:
        with self._cond:
            return self._last

    @property
    def _stopped(self) -> threading.Event:
        return self._worker.stopping

    def start(self) -> TableWatcher:
        if self._started:
            return self
        if self._zk.exists(self._path) is None:
            raise UnknownTableError(f"unknown table {self.table!r}")
        self._started = True
        self._worker.start()
        self._zk.DataWatch(self._path, self._on_data)
        return self

    def _on_data(self, data: bytes | None, stat: Any, event: Any = None) -> bool | None:
        if self._stopped.is_set():
            return False  # removes the DataWatch
        if data is None:
            log.warning("table %s znode disappeared", self.table)
            return None
        try:
            self._events.put(TableHead.decode(self.table, data, stat.version))
        except MetadataError as exc:
            log.error("cannot decode znode of %s: %s", self.table, exc)
            self.errors.append(exc)
        return None

    def _deliver_next(self) -> bool:
        """Deliver the next znode version; False once stopped. A version whose file cannot be read
        (the metadata topic without a leader for a moment) is read again, with backoff, until it is
        delivered or a newer version queued meanwhile covers it (delivered with its parents): the
        watch fires once per change, so a version dropped here would not come back until the next
        commit on the table, and a node would not see a join, a leave or a split meanwhile."""
        head = self._events.get()
        if head is None:
            return False
        delay = 0.2
        while True:
            try:
                self._deliver_up_to(head)
                return True
            except ShoalError as exc:
                log.error(
                    "table %s: cannot deliver sequence %d (retrying in %.1fs): %s",
                    self.table,
                    head.metadata_sequence,
                    delay,
                    exc,
                )
                if not self.errors or str(self.errors[-1]) != str(exc):
                    self.errors.append(exc)  # once per distinct error: a lasting one is retried for ever
            if self._stopped.wait(delay):
                return False
            delay = min(delay * 2, 5.0)
            while True:  # a newer version queued meanwhile: deliver up to it instead
                try:
                    queued = self._events.get_nowait()
                except queue.Empty:
                    break
                if queued is None:
                    return False
                if queued.metadata_sequence > head.metadata_sequence:
                    head = queued

    def _deliver_up_to(self, head: TableHead) -> None:
        with self._cond:
            last = self._last
        if last is not None and head.metadata_sequence <= last:
            return
        chain = [self._store.get(self.table, head.metadata_txnid)]
        floor = head.metadata_sequence if last is None else last + 1
        while chain[-1].sequence > floor:
            parent = chain[-1].parent_txnid
            if parent is None:
                break
            chain.append(self._store.get(self.table, parent))
        for file in reversed(chain):
            if self._stopped.is_set():
                return
            try:
                self._on_change(file)
            except Exception:
                log.exception("table %s: on_change failed for sequence %d", self.table, file.sequence)
            with self._cond:
                self._last = file.sequence
                self._last_txnid = file.txnid
                self._cond.notify_all()

    def wait_for_sequence(self, sequence: int, timeout: float = 30.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._last is not None and self._last >= sequence, timeout)

    def stop(self) -> None:
        self._worker.request_stop()
        self._events.put(None)
        self._worker.join(timeout=10)

    close = stop

    def __enter__(self) -> TableWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Delivery(Worker):
    """``watch-<table>``: delivers the versions the znode watch queued, in order, to ``on_change``."""

    def __init__(self, watcher: TableWatcher) -> None:
        super().__init__(f"watch-{watcher.table}")
        self._watcher = watcher

    def run(self) -> None:
        while not self.stopping.is_set() and self._watcher._deliver_next():
            pass


def discovery_listener(
    server_id: str,
    held: Callable[[], Iterable[HeldReplica]],
    on_discovery: Callable[[MetadataFile, list[PartitionDiscovery]], None],
) -> OnChange:
    """An ``on_change`` that runs partition discovery for ``server_id`` on every committed version."""

    def on_change(file: MetadataFile) -> None:
        on_discovery(file, discover(file, server_id, held()))

    return on_change
