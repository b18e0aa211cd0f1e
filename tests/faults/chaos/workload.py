"""The live workload: writers that record every write in a :class:`~chaos.history.History`, and an
observer that reads every WAL channel of the table as it is written (before Tail truncates it).

A write is acknowledged when its delivery succeeded and a later ``Producer.sync()`` returned (the
leader accepted everything delivered so far, README "Guarantees"); a write whose delivery failed,
or that was delivered but never covered by a successful ``sync()``, stays uncertain.
"""

from __future__ import annotations

import logging
import random
import threading

from chaos.checker import WalObservation
from chaos.history import History, encode_value
from metadata.partition_map import PartitionMap
from producer import Producer, ProducerConfig, WriteResult
from shoal.kafka import clients
from shoal.kafka.admin import log_start_and_end
from shoal.kafka.readers import read_wal_channel
from shoal.kafka.settings import ConnectionSettings, KafkaSettings
from shoal.topics import TopicNames
from shoal.wire.ingest import DELETED_COLUMN
from shoal.wire.records import WalRecord

Pending = list[tuple[WriteResult, list[tuple[int, int]], dict[int, str] | None]]
"""Writes in flight: the call, its (key, version) pairs, and key -> partition id when known."""

log = logging.getLogger(__name__)

TABLE = "events"


class ChaosWriter(threading.Thread):
    """Writer ``index`` of ``count``: owns the keys ``index + count * j``. Each round writes one batch that
    creates ``new_keys`` keys, overwrites up to ``overwrites`` of its earlier keys with their next
    version and holds one of those keys twice (two versions; the later row is the newer one), then
    deletes up to ``deletes`` of its keys (possibly ones the batch just wrote) in a call of its own."""

    def __init__(
        self,
        connection: ConnectionSettings,
        history: History,
        *,
        index: int,
        count: int,
        seed: int,
        new_keys: int = 10,
        overwrites: int = 5,
        deletes: int = 2,
        pause_s: float = 0.05,
        sync_timeout_s: float = 20.0,
        quiet: threading.Event | None = None,
    ) -> None:
        super().__init__(daemon=True, name=f"chaos-writer-{index}")
        self.connection, self.history = connection, history
        self.index, self.count = index, count
        self.rng = random.Random(seed * 1_000 + index)
        self.new_keys, self.overwrites, self.deletes = new_keys, overwrites, deletes
        self.pause_s, self.sync_timeout_s = pause_s, sync_timeout_s
        self.halt = threading.Event()
        self.quiet = quiet or threading.Event()
        """While set, the writer stays idle (the nemesis's quiet phases)."""
        self.failures = 0
        self.error: BaseException | None = None
        self._next = 0
        self._mine: list[int] = []

    def _config(self) -> ProducerConfig:
        # a short delivery timeout: messages produced during an outage fail instead of waiting it out
        return ProducerConfig(self.connection, kafka_config={"message.timeout.ms": 10_000})

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                pending: Pending = []
                try:
                    with Producer(self._config()) as producer:
                        self._write_with(producer, pending)
                finally:
                    # after close(), which flushes: a delivery reported late (after flush(10) gave
                    # up) is a delivered write too, so it must be acknowledged, not left uncertain
                    self._acknowledge_delivered(pending)
        except BaseException as exc:
            self.error = exc
            log.exception("chaos writer %d failed", self.index)

    def _write_with(self, producer: Producer, pending: Pending) -> None:
        """Write until halted, or until six calls in a row failed (then the caller makes a new producer).

        A write is acknowledged as soon as its delivery succeeded (README: the producer's delivery
        report, acks=all), whether or not a ``sync()`` after it returned: shoal must accept it; one
        whose delivery failed or is unknown stays uncertain. ``pending`` keeps the writes whose
        delivery is not reported yet, for the caller to look at once the producer is closed."""
        try:
            self._write_loop(producer, pending)
        finally:
            try:  # the outcome of what is still in flight; a failed delivery only keeps it uncertain
                producer.flush(10)
            except Exception as exc:
                self._failed(f"flush: {exc}")
            self._acknowledge_delivered(pending)

    def _acknowledge_delivered(self, pending: Pending) -> None:
        """Acknowledge every pending write whose every message was delivered; keep those still in flight."""
        still = []
        for result, pairs, routes in pending:
            if not all(f.done() for f in result.futures):
                still.append((result, pairs, routes))
            elif all(f.exception() is None for f in result.futures):
                self.history.acknowledge(pairs)
            elif routes is not None:
                # acks=all is per message: the rows of a delivered message are acknowledged even when
                # another message of the call (another partition's) failed
                delivered = {f.result().partition_id for f in result.futures if f.exception() is None}
                failed = {
                    getattr(r, "partition_id", None)
                    for f in result.futures
                    if f.exception() is not None
                    for r in (getattr(f.exception(), "reports", None) or [None])
                }
                if None not in failed:  # every failure names its partition
                    self.history.acknowledge(
                        [(k, v) for k, v in pairs if routes.get(k) in delivered and routes.get(k) not in failed]
                    )
        pending[:] = still

    @staticmethod
    def _routes(producer: Producer, keys: list[int], before: PartitionMap | None) -> dict[int, str] | None:
        """Key -> partition id by the map the producer routed with (None if it changed meanwhile)."""
        pmap = ChaosWriter._map_now(producer)
        if pmap is None or before is None or before.sequence != pmap.sequence:
            return None
        return {k: pmap.lookup(k).partition_id for k in keys}

    @staticmethod
    def _map_now(producer: Producer) -> PartitionMap | None:
        """The producer's partition map now, or None if it cannot be had."""
        try:
            return producer.partition_map(TABLE)
        except Exception:
            return None

    def _write_loop(self, producer: Producer, pending: Pending) -> None:
        failed_in_row = 0
        while not self.halt.is_set() and failed_in_row < 6:
            if self.quiet.is_set():
                self.halt.wait(0.2)
                continue
            keys = [self.index + self.count * (self._next + i) for i in range(self.new_keys)]
            self._next += self.new_keys
            old = self.rng.sample(self._mine, min(self.overwrites, len(self._mine)))
            self._mine += keys
            batch = keys + old
            batch.append(self.rng.choice(batch))  # one key twice in the batch
            pairs = [(k, self.history.sent(k)) for k in batch]
            try:
                before = self._map_now(producer)
                result = producer.write(TABLE, [{"k": k, "v": encode_value(k, v)} for k, v in pairs])
            except Exception as exc:
                self._failed(f"write: {exc}")
                failed_in_row += 1
                self.halt.wait(0.5)
                continue
            pending.append((result, pairs, self._routes(producer, batch, before)))
            doomed = self.rng.sample(self._mine, min(self.deletes, len(self._mine)))
            if doomed:
                gone = [(k, self.history.sent(k, delete=True)) for k in doomed]
                try:
                    before = self._map_now(producer)
                    deleted = producer.delete(TABLE, doomed)
                    pending.append((deleted, gone, self._routes(producer, doomed, before)))
                except Exception as exc:
                    self._failed(f"delete: {exc}")
                    failed_in_row += 1
                    self.halt.wait(0.5)
                    continue
            try:
                producer.sync(timeout=self.sync_timeout_s)
            except Exception as exc:
                self._failed(f"sync: {exc}")
                failed_in_row += 1
                self._acknowledge_delivered(pending)
                self.halt.wait(0.5)
                continue
            failed_in_row = 0
            self._acknowledge_delivered(pending)
            self.halt.wait(self.pause_s)

    def _failed(self, what: str) -> None:
        self.failures += 1
        log.info("chaos writer %d: %s", self.index, what[:300])

    def stop(self, timeout_s: float = 120.0) -> None:
        self.halt.set()
        self.join(timeout_s)


class WalObserver(threading.Thread):
    """Reads every WAL channel ``<prefix>.wal.*`` (every partition's, split children's too) from its start,
    once a second from where it left off, picking up new channels as they appear, and keeps one
    :class:`WalObservation` per record.

    Each round uses :func:`shoal.kafka.readers.read_wal_channel` (a short-lived read_committed consumer,
    as ``shoal verify`` reads a channel); a round that fails (a broker down) is retried the next second.
    A record truncated by Tail before a round reached it is not observed; ``unobserved`` counts the
    offsets truncated before a round read them (transaction markers included), and those a channel
    deleted between two rounds (a split parent's, at UNLOAD_FINAL) still had past the last one.
    """

    def __init__(self, kafka: KafkaSettings, prefix: str) -> None:
        super().__init__(daemon=True, name="chaos-wal-observer")
        self.kafka, self.stem = kafka, f"{prefix}.wal."
        self.topics = TopicNames(prefix)
        self.unobserved = 0
        self.observations: list[WalObservation] = []
        self.errors: list[str] = []
        self.failed_rounds = 0
        self.halt = threading.Event()
        self._next: dict[str, int] = {}
        self._end: dict[str, int] = {}

    def run(self) -> None:
        while not self.halt.is_set():
            self.read_round()
            self.halt.wait(1.0)

    def read_round(self) -> None:
        try:
            topics = clients.admin(self.kafka).list_topics(timeout=10).topics
            for topic in [t for t in self._end if t not in topics]:  # deleted since the last round
                self.unobserved += max(0, self._end.pop(topic) - self._next.get(topic, 0))
            for topic in sorted(t for t in topics if t.startswith(self.stem)):
                start, end = log_start_and_end(self.kafka, topic)
                if end < self._next.get(topic, 0):  # deleted and created again, or lost records
                    self.errors.append(
                        f"{topic} ends at {end}, below offset {self._next[topic]} the observer already read: "
                        "the channel was deleted and created again or lost records"
                    )
                    self.unobserved += self._next[topic] - end
                    self._next[topic] = 0  # read the new incarnation from its start
                self._end[topic] = end
                self.unobserved += max(0, start - self._next.get(topic, 0))  # truncated before this round
                self._next[topic] = max(start, self._next.get(topic, 0))
                # exact_start: records truncated since log_start_and_end are counted next round, not skipped
                for item in read_wal_channel(self.kafka, topic, self._next[topic], timeout_s=10, exact_start=True):
                    self._observe(topic, item.offset, item.record)
                    self._next[topic] = item.offset + 1
        except Exception as exc:  # a broker down, a coordinator moving: the next round reads on
            self.failed_rounds += 1
            log.info("WAL observer round failed: %s", exc)

    def _observe(self, topic: str, offset: int, record: WalRecord) -> None:
        try:
            table = record.rows()
            values = table.column("v").to_pylist()
            if DELETED_COLUMN in table.column_names:  # a delete's row has no value
                values = [
                    None if d else v for v, d in zip(values, table.column(DELETED_COLUMN).to_pylist(), strict=True)
                ]
            rows = tuple(zip(table.column("k").to_pylist(), values, strict=True))
        except Exception as exc:
            self.errors.append(f"{topic}@{offset}: {exc}")
            return
        ingest_topic = self.topics.ingest(record.partition_id)
        ingest = [o.offset for o in record.ingest_offsets if o.topic == ingest_topic]
        gtid = record.gtid
        self.observations.append(
            WalObservation(
                topic, offset, gtid.epoch, gtid.seq, rows, ingest[0] if ingest else None, record.partition_id
            )
        )

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop after one last round (everything written up to now)."""
        self.halt.set()
        self.join(timeout_s)
        self.read_round()
