"""Metadata servers (EventQL table partitioning, sections 5.2 - 5.4).

A metadata server keeps a local copy of the current METADATA file of the tables it is listed for
in ``metadata_servers`` and answers reads and partition discovery requests from it. In shoal the
durable copy that a commit waits for is the compacted metadata topic (Kafka replicates it with
``acks=all``, standing in for "a majority of metadata servers stored it"); a metadata server
fetches versions from there and keeps them in ``data_dir`` (one file per txnid, written
atomically) so that it can restart.

- ``join``: fetch the current version first, then CAS itself into ``metadata_servers``; if a
  commit happened meanwhile the CAS fails and the procedure restarts (5.2).
- ``leave``: CAS itself out (5.3).
- ``serve``: only while it holds the current version; otherwise MetadataNotCaughtUpError until
  ``catch_up`` (or the background watcher) fetched it (5.4).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from kazoo.retry import KazooRetry

from metadata.coordinator import MetadataCoordinator
from metadata.discovery import HeldReplica, PartitionDiscovery, discover
from metadata.errors import MetadataConflictError, MetadataDecodeError, MetadataNotCaughtUpError
from metadata.metadata_file import MetadataFile, validate_txnid
from metadata.notify import TableWatcher
from metadata.zk_client import cas_retry, retrying
from metadata.zk_layout import TableHead
from shoal.errors import InvalidIdError, MetadataError
from shoal.ids import validate_server_id, validate_table_name

log = logging.getLogger(__name__)


class MetadataServer:
    def __init__(
        self,
        server_id: str,
        coordinator: MetadataCoordinator,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        retry: KazooRetry | None = None,
    ) -> None:
        self.server_id = validate_server_id(server_id)
        self._coord = coordinator
        self._dir = Path(data_dir) if data_dir is not None else None
        self._retry = retry or cas_retry()
        self._lock = threading.Lock()
        self._local: dict[str, MetadataFile] = {}
        self._watchers: dict[str, TableWatcher] = {}
        if self._dir is not None:
            self._load_dir()

    # -- local copies ---------------------------------------------------------------------------

    def _load_dir(self) -> None:
        assert self._dir is not None
        if not self._dir.is_dir():
            return
        for tdir in self._dir.iterdir():
            try:
                table = validate_table_name(tdir.name)
            except InvalidIdError:
                continue
            best: MetadataFile | None = None
            for f in tdir.glob("*.metadata"):
                try:
                    file = MetadataFile.decode(f.read_bytes())
                except (MetadataDecodeError, OSError) as exc:
                    log.warning("ignoring unreadable local METADATA file %s: %s", f, exc)
                    continue
                if file.table.name == table and (best is None or file.sequence > best.sequence):
                    best = file
            if best is not None:
                self._local[table] = best

    def _keep(self, file: MetadataFile) -> None:
        with self._lock:
            cur = self._local.get(file.table.name)
            if cur is not None and cur.sequence >= file.sequence:
                return
            self._local[file.table.name] = file
        if self._dir is not None:
            tdir = self._dir / file.table.name
            tdir.mkdir(parents=True, exist_ok=True)
            final = tdir / f"{validate_txnid(file.txnid)}.metadata"
            tmp = final.with_suffix(".tmp")
            with open(tmp, "wb") as fh:
                fh.write(file.encode())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)

    def local(self, table: str) -> MetadataFile | None:
        with self._lock:
            return self._local.get(table)

    # -- 5.2 / 5.3 / 5.4 ------------------------------------------------------------------------

    def catch_up(self, table: str) -> MetadataFile:
        """Fetch the current version (from the durable store) and keep it locally."""
        file = self._coord.current(table)
        self._keep(file)
        return file

    def join(self, table: str) -> TableHead:
        """Catch up, then CAS this server into ``metadata_servers``; restart if the table moved."""

        def attempt() -> TableHead:
            head = self._coord.head(table)
            file = self._coord.store.get(table, head.metadata_txnid)
            self._keep(file)
            if self.server_id in head.metadata_servers:
                return head
            new = self._coord.set_metadata_servers(head, (*head.metadata_servers, self.server_id))
            log.info("%s joined the metadata servers of %s at sequence %d", self.server_id, table, file.sequence)
            return new

        return self._cas(f"join the metadata servers of {table}", attempt)

    def leave(self, table: str) -> TableHead:
        def attempt() -> TableHead:
            head = self._coord.head(table)
            if self.server_id not in head.metadata_servers:
                self.unwatch(table)
                return head
            new = self._coord.set_metadata_servers(head, tuple(s for s in head.metadata_servers if s != self.server_id))
            self.unwatch(table)
            return new

        return self._cas(f"leave the metadata servers of {table}", attempt)

    def _cas(self, what: str, attempt: Callable[[], TableHead]) -> TableHead:
        """``attempt`` under the retry policy; conflicts beyond it: ``<server> could not <what>: <last>``."""
        try:
            return retrying(self._retry, attempt)
        except MetadataConflictError as exc:
            raise MetadataConflictError(f"{self.server_id} could not {what}: {exc}") from exc

    def serve(self, table: str, *, txnid: str | None = None) -> MetadataFile:
        """The current METADATA file, only if this server is a metadata server of the table and
        holds the current transaction (and, if given, the requester's ``txnid``)."""
        head = self._coord.head(table)
        if self.server_id not in head.metadata_servers:
            raise MetadataError(f"{self.server_id} is not a metadata server of table {table}")
        local = self.local(table)
        if local is None or local.txnid != head.metadata_txnid:
            have = "nothing" if local is None else f"sequence {local.sequence}"
            raise MetadataNotCaughtUpError(
                f"{self.server_id} holds {have} of {table}, the current one is sequence {head.metadata_sequence}; "
                "it serves nothing until it has caught up"
            )
        if txnid is not None and txnid != local.txnid:
            raise MetadataNotCaughtUpError(f"requested txnid {txnid} is not the current txnid of {table}")
        return local

    def discover(
        self, table: str, server_id: str, held: Iterable[HeldReplica], *, txnid: str | None = None
    ) -> list[PartitionDiscovery]:
        """Answer a partition discovery request (section 6.1) from the local copy."""
        return discover(self.serve(table, txnid=txnid), server_id, held)

    def watch(self, table: str) -> TableWatcher:
        """Background replication (5.4): keep the local copy current on every commit."""
        with self._lock:
            if table in self._watchers:
                return self._watchers[table]
            local = self._local.get(table)
        w = TableWatcher(
            self._coord.zk,
            self._coord.store,
            table,
            self._keep,
            layout=self._coord.layout,
            since_sequence=None if local is None else local.sequence,
        ).start()
        with self._lock:
            self._watchers[table] = w
        return w

    def unwatch(self, table: str) -> None:
        with self._lock:
            w = self._watchers.pop(table, None)
        if w is not None:
            w.stop()

    def close(self) -> None:
        for table in list(self._watchers):
            self.unwatch(table)

    def __enter__(self) -> MetadataServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
