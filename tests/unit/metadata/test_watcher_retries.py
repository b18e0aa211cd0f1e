"""A table watcher delivers a committed version whose file could not be read at first."""

from __future__ import annotations

import threading
from typing import Any

from helpers_metadata import Ids, new_file

from metadata.errors import MetadataStoreError
from metadata.metadata_file import MetadataFile
from metadata.notify import TableWatcher
from metadata.operations import JoinServer
from metadata.store import MemoryFileStore
from metadata.zk_layout import TableHead


class _Flaky(MemoryFileStore):
    """The metadata topic without a leader for the first ``failures`` reads."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def get(self, table: str, txnid: str) -> MetadataFile:
        if self.failures:
            self.failures -= 1
            raise MetadataStoreError("metadata topic has no leader (broker restarting)")
        return super().get(table, txnid)


def _head(file: MetadataFile) -> TableHead:
    return TableHead(file.table.name, file.txnid, file.sequence, ())


def test_a_version_whose_file_does_not_read_at_first_is_read_again_not_dropped() -> None:
    """The znode watch fires once per change: a version dropped on a failed read came back only
    with the next commit on the table, and a node did not see a join meanwhile (an audit's proof)."""
    first = new_file(rf=2)
    store = _Flaky(failures=2)
    store.put(first)
    seen: list[int] = []
    watcher = TableWatcher(object(), store, first.table.name, lambda f: seen.append(f.sequence), since_sequence=0)
    watcher._events.put(_head(first))
    done = threading.Event()

    def deliver() -> None:
        watcher._deliver_next()
        done.set()

    threading.Thread(target=deliver, daemon=True).start()
    assert done.wait(10)
    assert seen == [first.sequence] and len(watcher.errors) == 1  # the same error twice: kept once


def test_a_newer_version_queued_while_retrying_is_delivered_with_its_parents() -> None:
    ids = Ids()
    first = new_file(rf=2, ids=ids)
    second = JoinServer(first.partitions[0].partition_id, ids.place("node-3")[0]).apply(first)
    store = _Flaky(failures=1)
    store.put(first)
    store.put(second)
    seen: list[Any] = []
    watcher = TableWatcher(
        object(), store, first.table.name, lambda f: seen.append(f.sequence), since_sequence=first.sequence - 1
    )
    watcher._events.put(_head(first))
    watcher._events.put(_head(second))
    assert watcher._deliver_next() is True
    assert seen == [first.sequence, second.sequence]


def test_a_watcher_stopped_while_retrying_returns() -> None:
    first = new_file(rf=2)
    store = _Flaky(failures=1)
    store.put(first)
    watcher = TableWatcher(object(), store, first.table.name, lambda f: None, since_sequence=0)
    watcher._events.put(_head(first))
    watcher._events.put(None)  # stopped while retrying: no delivery, no hang
    assert watcher._deliver_next() is False and watcher.last_sequence == 0
