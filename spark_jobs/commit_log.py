"""The sink's record of committed micro-batches, per streaming query, in ZooKeeper.

``<zk_root>/spark/sinks/<query_id>`` holds ``{"batch_id": N, "table": T, "partitions": P, "maps":
[S, ...]}``: the newest batch the driver committed for that query (the query id is Spark's, stable
across restarts from the same checkpoint), the most Spark partitions a recorded batch of it had
(each commit fences their transactional ids, :mod:`spark_jobs.sink`), and the METADATA sequences
of the partition maps that batch's tasks routed with (a batch routed with another one waits for
the split parents' backlog, :func:`spark_jobs.sink.retired_backlog`). The driver's
``commit(messages, batchId)`` raises it by compare-and-swap on the znode version; executors read
it before they write (:meth:`BatchCommitLog.check`):

- the batch id equals it: Spark replays the last batch after a crash lost its commit-log entry, over
  the same offsets (``offsets/N`` is written before batch N runs): skipped, so it changes nothing
  (Paimon's open issue #9666 avoided);
- the batch id is below it: the checkpoint went back (restored from a backup, files lost), and
  Spark planned an old batch id again, maybe over other offsets. Skipping it would drop its rows
  and writing it would put older values over newer ones: :class:`~spark_jobs.errors.SinkCommitError`;
- the record names another table: a checkpoint copied from another query (same query id):
  :class:`~spark_jobs.errors.SinkCommitError`.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from metadata.client import MetadataConfig
from metadata.zk_client import ensure_path, make_client, zk_errors
from metadata.zk_layout import ZkLayout
from shoal import jsonio
from spark_jobs.errors import SinkCommitError

log = logging.getLogger(__name__)

_QUERY_ID = re.compile(r"^[0-9a-fA-F-]{1,64}$")


def validate_query_id(query_id: object) -> str:
    if not isinstance(query_id, str) or not _QUERY_ID.fullmatch(query_id):
        raise SinkCommitError(f"streaming query id must be a UUID, got {query_id!r:.80}")
    return query_id


class BatchCommitLog:
    """Committed batch ids per query. Lazy ZooKeeper client; ``close()`` / context manager."""

    def __init__(self, config: MetadataConfig, *, zk: Any = None) -> None:
        self.config = config
        self.layout = ZkLayout(config.zk_root)
        self._zk = zk
        self._own = zk is None

    @property
    def zk(self) -> Any:
        if self._zk is None:
            self._zk = make_client(self.config.zk_hosts, self.config.security, timeout=self.config.zk_timeout_s)
        return self._zk

    def path(self, query_id: str) -> str:
        return f"{self.layout.root}/spark/sinks/{validate_query_id(query_id)}"

    def committed(self, query_id: str) -> int | None:
        """The newest committed batch id of the query, or None if it never committed."""
        found = self._read(query_id)
        return None if found is None else found[0]

    def check(self, query_id: str, batch_id: int, table: str) -> bool:
        """Whether a write task of ``batch_id`` must skip its rows (the replay of the last committed
        batch). SinkCommitError for a batch id below the committed one, or a record of another table."""
        found = self._read(query_id)
        if found is None:
            return False
        committed, recorded_table = found
        if recorded_table is not None and recorded_table != table:
            raise SinkCommitError(
                f"streaming query {query_id} committed batches to table {recorded_table}, not {table}: "
                "a query writing another table needs its own checkpoint"
            )
        if batch_id < committed:
            raise SinkCommitError(
                f"streaming query {query_id}: batch {batch_id} is below batch {committed}, which it already "
                f"committed to {table}; its checkpoint went back (restored, or files lost). Neither skipping "
                "nor writing that batch is safe: restart the query from a checkpoint that is not behind"
            )
        return batch_id == committed

    def partitions(self, query_id: str) -> int:
        """The most Spark partitions a recorded batch of the query had (0 if none is recorded)."""
        path = self.path(query_id)
        data = self._get(path)
        return 0 if data is None else self._partitions(path, data)

    def routed_with(self, query_id: str) -> frozenset[int] | None:
        """The METADATA sequences of the partition maps the write tasks of the query's last recorded
        batch routed with (None: no batch recorded, or recorded without them)."""
        path = self.path(query_id)
        data = self._get(path)
        if data is None:
            return None
        self._decode(path, data)  # malformed: SinkCommitError
        value = jsonio.loads_checked(data).get("maps")
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise SinkCommitError(f"{path}: bad map sequences {value!r:.60}")
        return frozenset(value)

    def _read(self, query_id: str) -> tuple[int, str | None] | None:
        path = self.path(query_id)
        data = self._get(path)
        return None if data is None else (self._decode(path, data), self._table(path, data))

    def _get(self, path: str) -> bytes | None:
        with zk_errors(f"read sink commit {path}"):
            try:
                data, _ = self.zk.get(path)
            except NoNodeError:
                return None
        return bytes(data)

    @staticmethod
    def _decode(path: str, data: bytes) -> int:
        try:
            value = jsonio.loads_checked(data)["batch_id"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise SinkCommitError(f"{path} is malformed: {exc}") from exc
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SinkCommitError(f"{path}: bad batch id {value!r:.40}")
        return value

    @staticmethod
    def _table(path: str, data: bytes) -> str | None:
        table = jsonio.loads_checked(data).get("table")
        if table is not None and not isinstance(table, str):
            raise SinkCommitError(f"{path}: bad table {table!r:.40}")
        return table

    @staticmethod
    def _partitions(path: str, data: bytes) -> int:
        BatchCommitLog._decode(path, data)  # malformed: SinkCommitError
        value = jsonio.loads_checked(data).get("partitions", 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SinkCommitError(f"{path}: bad partition count {value!r:.40}")
        return value

    def record(
        self, query_id: str, batch_id: int, *, table: str, partitions: int = 0, maps: frozenset[int] | None = None
    ) -> bool:
        """Raise the query's committed batch id to ``batch_id`` (CAS), and its partition count to at
        least ``partitions``; False (nothing changed) if the batch id already was >= ``batch_id``.
        ``maps``: the METADATA sequences of the partition maps the batch's tasks routed with
        (:meth:`routed_with`); None or empty keeps the ones recorded before."""
        if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
            raise SinkCommitError(f"batch id must be an int >= 0, got {batch_id!r:.40}")
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 0:
            raise SinkCommitError(f"partition count must be an int >= 0, got {partitions!r:.40}")
        path = self.path(query_id)

        def data(before: int, current: bytes | None = None) -> bytes:
            kept = jsonio.loads_checked(current).get("maps") if current is not None else None
            routed = sorted(maps) if maps else kept
            out = {"batch_id": batch_id, "table": table, "partitions": max(before, partitions)}
            return json.dumps(out if routed is None else {**out, "maps": routed}).encode()

        with zk_errors(f"record sink commit {path}"):
            ensure_path(self.zk, path.rsplit("/", 1)[0], self.config.security)
            for _attempt in range(50):
                try:
                    current, stat = self.zk.get(path)
                except NoNodeError:
                    try:
                        self.zk.create(path, data(0), acl=self.config.security.acls())
                        return True
                    except NodeExistsError:
                        continue
                if self._decode(path, current) >= batch_id:
                    return False
                try:
                    self.zk.set(path, data(self._partitions(path, current), current), version=stat.version)
                    return True
                except BadVersionError:
                    continue
        raise SinkCommitError(f"{path}: could not record batch {batch_id} (too many concurrent updates)")

    def close(self) -> None:
        if self._zk is not None and self._own:
            self._zk.stop()
            self._zk.close()
        self._zk = None

    def __enter__(self) -> BatchCommitLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
