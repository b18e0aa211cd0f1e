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
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from chaos.checker import WalObservation
from chaos.history import History, encode_value
from producer import Producer, ProducerConfig, WriteResult
from shoal.kafka import clients
from shoal.kafka.settings import ConnectionSettings, KafkaSettings
from shoal.wire.records import WalRecord

log = logging.getLogger(__name__)

TABLE = "events"


class ChaosWriter(threading.Thread):
    """Writer ``index`` of ``count``: owns the keys ``index + count * j``; each batch creates
    ``new_keys`` keys and overwrites up to ``overwrites`` of its earlier keys with their next version."""

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
        pause_s: float = 0.05,
        sync_timeout_s: float = 20.0,
        quiet: threading.Event | None = None,
    ) -> None:
        super().__init__(daemon=True, name=f"chaos-writer-{index}")
        self.connection, self.history = connection, history
        self.index, self.count = index, count
        self.rng = random.Random(seed * 1_000 + index)
        self.new_keys, self.overwrites = new_keys, overwrites
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
                with Producer(self._config()) as producer:
                    self._write_with(producer)
        except BaseException as exc:
            self.error = exc
            log.exception("chaos writer %d failed", self.index)

    def _write_with(self, producer: Producer) -> None:
        """Write until halted, or until six calls in a row failed (then the caller makes a new producer:
        writes still pending on this one are never acknowledged, they stay uncertain)."""
        pending: list[tuple[WriteResult, list[tuple[int, int]]]] = []
        failed_in_row = 0
        while not self.halt.is_set() and failed_in_row < 6:
            if self.quiet.is_set():
                self.halt.wait(0.2)
                continue
            keys = [self.index + self.count * (self._next + i) for i in range(self.new_keys)]
            self._next += self.new_keys
            old = self.rng.sample(self._mine, min(self.overwrites, len(self._mine)))
            self._mine += keys
            pairs = [(k, self.history.sent(k)) for k in keys + old]
            try:
                result = producer.write(TABLE, [{"k": k, "v": encode_value(k, v)} for k, v in pairs])
            except Exception as exc:
                self._failed(f"write: {exc}")
                failed_in_row += 1
                self.halt.wait(0.5)
                continue
            pending.append((result, pairs))
            try:
                producer.sync(timeout=self.sync_timeout_s)
            except Exception as exc:
                self._failed(f"sync: {exc}")
                failed_in_row += 1
                self.halt.wait(0.5)
                continue
            failed_in_row = 0
            for done, done_pairs in pending:
                if all(f.done() and f.exception() is None for f in done.futures):
                    self.history.acknowledge(done_pairs)
            pending = []
            self.halt.wait(self.pause_s)

    def _failed(self, what: str) -> None:
        self.failures += 1
        log.info("chaos writer %d: %s", self.index, what[:300])

    def stop(self, timeout_s: float = 120.0) -> None:
        self.halt.set()
        self.join(timeout_s)


class WalObserver(threading.Thread):
    """Reads every WAL channel ``<prefix>.wal.<partition_id>.*`` from its start (read_committed),
    picking up new channels as they appear, and keeps one :class:`WalObservation` per record."""

    def __init__(self, kafka: KafkaSettings, prefix: str, partition_id: str) -> None:
        super().__init__(daemon=True, name="chaos-wal-observer")
        self.kafka, self.stem = kafka, f"{prefix}.wal.{partition_id}."
        self.observations: list[WalObservation] = []
        self.errors: list[str] = []
        self.halt = threading.Event()
        self._seen: set[tuple[str, int]] = set()

    def run(self) -> None:
        overrides: dict[str, Any] = {"auto.offset.reset": "earliest", "fetch.message.max.bytes": 64 * 1024 * 1024}
        consumer: Any = clients.consumer(self.kafka, group_id=f"{self.stem}chaos-observer", **overrides)
        assigned: set[str] = set()
        try:
            polls = 0
            while not self.halt.is_set():
                if polls % 8 == 0:
                    assigned |= self._assign_new(consumer, assigned)
                polls += 1
                msg = consumer.poll(0.25)
                if msg is None:
                    continue
                if msg.error() is not None:
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        self.errors.append(str(msg.error()))
                    continue
                self._observe(str(msg.topic()), int(msg.offset() or 0), msg.value())
        except BaseException as exc:
            self.errors.append(f"observer stopped: {exc}")
        finally:
            consumer.close()

    def _assign_new(self, consumer: Any, assigned: set[str]) -> set[str]:
        try:
            topics = consumer.list_topics(timeout=5).topics
        except Exception as exc:
            self.errors.append(f"list_topics: {exc}")
            return set()
        new = {t for t in topics if t.startswith(self.stem) and t not in assigned}
        if new:
            consumer.incremental_assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in sorted(new)])
        return new

    def _observe(self, topic: str, offset: int, value: bytes | None) -> None:
        if (topic, offset) in self._seen:  # a re-fetch after a broker restart
            return
        self._seen.add((topic, offset))
        try:
            record = WalRecord.from_bytes(value)
            table = record.rows()
            rows = tuple(zip(table.column("k").to_pylist(), table.column("v").to_pylist(), strict=True))
        except Exception as exc:
            self.errors.append(f"{topic}@{offset}: {exc}")
            return
        self.observations.append(WalObservation(topic, offset, record.gtid.epoch, record.gtid.seq, rows))

    def stop(self, timeout_s: float = 30.0) -> None:
        self.halt.set()
        self.join(timeout_s)
