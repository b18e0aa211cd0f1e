"""The demo's event generator: a thread writing JSON events to an external Kafka topic at a steady rate.

It stands for an application that knows nothing about shoal. It produces with ``acks=all`` and
idempotence, and counts an event as *acknowledged* only from its delivery report; the ids of the
acknowledged events are what the demo later requires to find in shoal, each exactly once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, Message

from shoal.errors import ConfigError, KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.settings import KafkaSettings
from shoal.worker import Worker
from shoal_app.demo.events import event_id_at, event_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GeneratorConfig:
    kafka: KafkaSettings
    topic: str
    events: int
    rate_per_s: float
    partitions: int = 1
    """Event ids are interleaved over this many equal ranges (the table's partitions)."""
    batch: int = 100

    def __post_init__(self) -> None:
        if self.events < 1:
            raise ConfigError(f"events must be >= 1, got {self.events}")
        if self.rate_per_s <= 0:
            raise ConfigError(f"rate must be > 0 events/s, got {self.rate_per_s}")
        if self.partitions < 1:
            raise ConfigError(f"partitions must be >= 1, got {self.partitions}")
        if self.batch < 1:
            raise ConfigError(f"batch must be >= 1, got {self.batch}")


class EventGenerator(Worker):
    """``start()`` it, read ``produced``/``acknowledged`` while it runs, ``stop()``/``join()`` it."""

    def __init__(self, config: GeneratorConfig) -> None:
        super().__init__("shoal-demo-generator")
        self.config = config
        self._lock = threading.Lock()
        self._acked: list[int] = []
        self._failed: list[str] = []
        self.produced = 0
        self.started_at: float | None = None
        self.finished_at: float | None = None

    @property
    def acknowledged(self) -> int:
        with self._lock:
            return len(self._acked)

    @property
    def failed(self) -> int:
        with self._lock:
            return len(self._failed)

    def acknowledged_ids(self) -> pa.Array:
        with self._lock:
            return pa.array(self._acked, pa.uint64())

    @property
    def running(self) -> bool:
        return self.alive

    def stop(self, timeout: float = 0.0) -> bool:
        """Ask the generator to stop after the current batch; ``join()`` waits for it."""
        self.request_stop()
        return self.join(timeout) if timeout > 0 else not self.alive

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        key = msg.key()
        with self._lock:
            if err is None and key is not None:
                self._acked.append(int(key))
            else:
                self._failed.append(str(err))

    def run(self) -> None:
        cfg = self.config
        tuning: dict[str, Any] = {"linger.ms": 20, "delivery.timeout.ms": 120_000}
        producer = clients.producer(cfg.kafka, **tuning)
        self.started_at = time.monotonic()
        try:
            next_id = 0
            while next_id < cfg.events and not self.stopping.is_set():
                end = min(cfg.events, next_id + cfg.batch)
                now_ms = int(time.time() * 1000)
                for index in range(next_id, end):
                    event_id = event_id_at(index, cfg.events, cfg.partitions)
                    while True:
                        try:
                            producer.produce(
                                cfg.topic,
                                event_json(event_id, now_ms),
                                key=str(event_id).encode(),
                                on_delivery=self._on_delivery,
                            )
                            break
                        except BufferError:
                            producer.poll(0.1)
                self.produced = end
                next_id = end
                producer.poll(0)
                # pace: event n is due at started_at + n / rate
                due = self.started_at + next_id / cfg.rate_per_s
                self.stopping.wait(max(0.0, due - time.monotonic()))
            left = producer.flush(60)
            if left:
                raise KafkaOperationError(f"{left} event(s) were not delivered to {cfg.topic} within 60s")
        finally:
            self.finished_at = time.monotonic()
