"""Durable storage of METADATA file versions: the compacted ``<prefix>.metadata`` Kafka topic.

This replaces the source's "store the file on N metadata servers": a file version is produced
with ``acks=all`` by an idempotent producer under the key ``<table>/<txnid>`` and is durable once
the delivery report arrives, which is before the coordinator's compare-and-swap can make it
current. A change that loses the CAS produces a tombstone (null value) for its key, so compaction
removes the aborted file; committed versions keep distinct keys and so survive compaction.

Readers index the topic from the beginning (one Kafka partition, so one total order) and catch up
to the high watermark whenever they are asked for a version they have not seen; since a version
is acknowledged before it can be current, reading up to the watermark always finds it.

:class:`MemoryFileStore` has the same interface for unit tests and tools.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from metadata.errors import MetadataDecodeError, MetadataFileNotFoundError, MetadataStoreError
from metadata.metadata_file import MetadataFile, parse_store_key, store_key
from shoal.errors import ConfigError, KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.admin import create_topic
from shoal.kafka.settings import KafkaSettings
from shoal.topics import TopicNames

log = logging.getLogger(__name__)


class FileStore(Protocol):
    """Where METADATA file versions live, keyed by (table, txnid)."""

    def put(self, file: MetadataFile) -> None: ...

    def tombstone(self, table: str, txnid: str) -> None: ...

    def get(self, table: str, txnid: str) -> MetadataFile: ...

    def versions(self, table: str) -> list[MetadataFile]: ...

    def tables(self) -> set[str]:
        """Every table with a stored, not tombstoned version."""
        ...

    def close(self) -> None: ...


class _Index:
    """(table, txnid) -> encoded file, or None after a tombstone. Decoded files are cached."""

    def __init__(self) -> None:
        self.raw: dict[tuple[str, str], bytes | None] = {}
        self.decoded: dict[tuple[str, str], MetadataFile] = {}
        self.bad: dict[tuple[str, str], str] = {}

    def add(self, table: str, txnid: str, value: bytes | None) -> None:
        key = (table, txnid)
        self.raw[key] = value
        self.decoded.pop(key, None)
        self.bad.pop(key, None)

    def lookup(self, table: str, txnid: str) -> MetadataFile | None:
        key = (table, txnid)
        if key not in self.raw:
            return None
        value = self.raw[key]
        if value is None:
            raise MetadataFileNotFoundError(f"METADATA file {table}/{txnid} was aborted (tombstone)")
        if key not in self.decoded:
            file = MetadataFile.decode(value)
            if file.table.name != table or file.txnid != txnid:
                raise MetadataDecodeError(
                    f"record keyed {table}/{txnid} holds METADATA file {file.table.name}/{file.txnid}"
                )
            self.decoded[key] = file
        return self.decoded[key]

    def versions(self, table: str) -> list[MetadataFile]:
        out = []
        for (t, txnid), value in list(self.raw.items()):
            if t != table or value is None:
                continue
            try:
                file = self.lookup(t, txnid)
            except MetadataDecodeError as exc:
                log.warning("skipping undecodable METADATA record %s/%s: %s", t, txnid, exc)
                continue
            if file is not None:
                out.append(file)
        return sorted(out, key=lambda f: (f.sequence, f.created_at_ms))

    def tables(self) -> set[str]:
        return {t for (t, _), v in self.raw.items() if v is not None}


class MemoryFileStore:
    """In-process FileStore (tests, tools). ``put_raw`` lets tests store arbitrary bytes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._index = _Index()
        self.log: list[tuple[str, str, bytes | None]] = []

    def put(self, file: MetadataFile) -> None:
        self.put_raw(file.table.name, file.txnid, file.encode())

    def put_raw(self, table: str, txnid: str, value: bytes | None) -> None:
        store_key(table, txnid)
        with self._lock:
            self.log.append((table, txnid, value))
            self._index.add(table, txnid, value)

    def tombstone(self, table: str, txnid: str) -> None:
        self.put_raw(table, txnid, None)

    def get(self, table: str, txnid: str) -> MetadataFile:
        with self._lock:
            file = self._index.lookup(table, txnid)
        if file is None:
            raise MetadataFileNotFoundError(f"no METADATA file {table}/{txnid} is stored")
        return file

    def versions(self, table: str) -> list[MetadataFile]:
        with self._lock:
            return self._index.versions(table)

    def tables(self) -> set[str]:
        with self._lock:
            return self._index.tables()

    def close(self) -> None:
        pass

    def __enter__(self) -> MemoryFileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class KafkaStoreConfig:
    kafka: KafkaSettings
    """How to reach Kafka (a bare ``host:port`` list is accepted too)."""
    topic_prefix: str = "shoal"
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.kafka, str):
            try:
                object.__setattr__(self, "kafka", KafkaSettings(self.kafka))
            except ConfigError as exc:
                raise ConfigError(f"metadata store: {exc}") from exc
        TopicNames(self.topic_prefix)  # validates the prefix
        if self.timeout_s <= 0:
            raise ConfigError(f"metadata store timeout_s must be > 0, got {self.timeout_s}")

    @property
    def topic(self) -> str:
        return TopicNames(self.topic_prefix).metadata


class _Waiting:
    """Progress of a read that waits for the metadata topic (a new partition leader after a broker
    loss): a warning on the log (stderr for the CLI) at most every few seconds."""

    EVERY_S = 3.0

    def __init__(self, topic: str, timeout_s: float) -> None:
        self.topic, self.timeout_s = topic, timeout_s
        self.started = time.monotonic()
        self.last = self.started

    def report(self, reason: object) -> None:
        now = time.monotonic()
        if now - self.last >= self.EVERY_S:
            self.last = now
            log.warning(
                "waiting for metadata topic %s (%.0fs of %.0fs; a new partition leader is elected after a "
                "broker loss): %s",
                self.topic,
                now - self.started,
                self.timeout_s,
                reason,
            )


class KafkaFileStore:
    """FileStore on the compacted metadata topic. Clients are created lazily; close() releases them."""

    def __init__(self, config: KafkaStoreConfig) -> None:
        self.config = config
        self.topic = config.topic
        self._lock = threading.RLock()
        self._producer: Any = None
        self._consumer: Any = None
        self._topic_ready = False
        self._index = _Index()
        self._position = 0
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> KafkaFileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._producer is not None:
                self._producer.flush(self.config.timeout_s)
                self._producer = None
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def ensure_topic(self) -> None:
        """Create the compacted topic (1 partition, replicated by the topic policy of ``kafka``) if it
        is missing; refuse one that is not compacted."""
        if self._topic_ready:
            return
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import ConfigResource

        admin = clients.admin(self.config.kafka)
        cfg = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}
        try:
            create_topic(
                admin, self.topic, policy=self.config.kafka.topics, config=cfg, timeout_s=self.config.timeout_s
            )
        except KafkaOperationError as exc:
            raise MetadataStoreError(
                f"metadata topic {self.topic} is not available (no partition leader within "
                f"{self.config.timeout_s}s: are its brokers down?): {exc}"
            ) from exc
        deadline = time.monotonic() + self.config.timeout_s
        while True:  # a topic just created may take a moment to have a leader and configs
            try:
                res = ConfigResource(ConfigResource.Type.TOPIC, self.topic)
                configs = admin.describe_configs([res])[res].result(self.config.timeout_s)
                meta = admin.list_topics(self.topic, timeout=self.config.timeout_s)
                tmeta = meta.topics.get(self.topic)
                leaders_ok = tmeta is not None and all(p.leader >= 0 for p in tmeta.partitions.values())
                if tmeta is not None and tmeta.error is None and tmeta.partitions and leaders_ok:
                    break
            except (KafkaException, TimeoutError) as exc:  # a future's result(timeout) raises TimeoutError
                if time.monotonic() > deadline:
                    raise MetadataStoreError(
                        f"cannot describe metadata topic {self.topic}: {exc or 'no answer in time'}"
                    ) from exc
            if time.monotonic() > deadline:
                raise MetadataStoreError(f"metadata topic {self.topic} has no leader after {self.config.timeout_s}s")
            time.sleep(0.1)
        policy = configs["cleanup.policy"].value if "cleanup.policy" in configs else ""
        if "compact" not in (policy or ""):
            raise MetadataStoreError(f"metadata topic {self.topic} has cleanup.policy={policy!r}, expected compact")
        if len(tmeta.partitions) != 1:
            raise MetadataStoreError(f"metadata topic {self.topic} must have exactly one partition")
        self._topic_ready = True

    def _get_producer(self) -> Any:
        if self._closed:
            raise MetadataStoreError("metadata store is closed")
        if self._producer is None:
            self.ensure_topic()
            tuning: dict[str, Any] = {"linger.ms": 0, "message.timeout.ms": int(self.config.timeout_s * 1000)}
            self._producer = clients.producer(self.config.kafka, **tuning)
        return self._producer

    def _get_consumer(self) -> Any:
        if self._closed:
            raise MetadataStoreError("metadata store is closed")
        if self._consumer is None:
            from confluent_kafka import OFFSET_BEGINNING, TopicPartition

            self.ensure_topic()
            reading: dict[str, Any] = {"enable.partition.eof": False, "auto.offset.reset": "earliest"}
            self._consumer = clients.consumer(
                self.config.kafka, group_id=f"shoal-metadata-reader-{uuid.uuid4().hex}", **reading
            )
            self._consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        return self._consumer

    # -- writes ---------------------------------------------------------------------------------

    def _produce(self, key: bytes, value: bytes | None) -> None:
        from confluent_kafka import KafkaException

        outcome: dict[str, Any] = {}

        def on_delivery(err: Any, msg: Any) -> None:
            outcome["err"] = err
            outcome["offset"] = None if msg is None else msg.offset()

        with self._lock:
            producer = self._get_producer()
            try:
                producer.produce(self.topic, key=key, value=value, partition=0, on_delivery=on_delivery)
                remaining = producer.flush(self.config.timeout_s)
            except (KafkaException, BufferError) as exc:
                raise MetadataStoreError(f"cannot write {key!r} to {self.topic}: {exc}") from exc
        if remaining or "err" not in outcome:
            raise MetadataStoreError(f"no delivery report for {key!r} on {self.topic} within {self.config.timeout_s}s")
        if outcome["err"] is not None:
            raise MetadataStoreError(f"writing {key!r} to {self.topic} failed: {outcome['err']}")

    def put(self, file: MetadataFile) -> None:
        """Store a version durably (acks=all); returns once Kafka has acknowledged it."""
        self._produce(store_key(file.table.name, file.txnid), file.encode())

    def tombstone(self, table: str, txnid: str) -> None:
        """Mark an aborted version: compaction removes it, readers never return it."""
        self._produce(store_key(table, txnid), None)

    # -- reads ----------------------------------------------------------------------------------

    def catch_up(self) -> int:
        """Read the topic up to its current high watermark; returns the new position."""
        from confluent_kafka import KafkaException, TopicPartition

        with self._lock:
            consumer = self._get_consumer()
            tp = TopicPartition(self.topic, 0)
            deadline = time.monotonic() + self.config.timeout_s
            waiting = _Waiting(self.topic, self.config.timeout_s)
            while True:
                try:
                    _, high = consumer.get_watermark_offsets(tp, timeout=min(5.0, self.config.timeout_s), cached=False)
                    break
                except KafkaException as exc:
                    if time.monotonic() > deadline:
                        raise MetadataStoreError(
                            f"cannot read watermarks of {self.topic} within {self.config.timeout_s}s "
                            f"(no partition leader: are its brokers down?): {exc}"
                        ) from exc
                    waiting.report(exc)
                    time.sleep(0.2)
            while self._position < high:
                if time.monotonic() > deadline:
                    raise MetadataStoreError(
                        f"could not read {self.topic} up to offset {high} within {self.config.timeout_s}s "
                        f"(at {self._position})"
                    )
                msg = consumer.poll(0.2)
                if msg is None:
                    pos = consumer.position([tp])[0].offset
                    if pos is not None and pos > self._position:
                        self._position = pos
                    continue
                if msg.error():
                    if msg.error().retriable() or not msg.error().fatal():
                        waiting.report(msg.error())  # e.g. a leader change: the consumer follows the new one
                        continue
                    raise MetadataStoreError(f"reading {self.topic} failed: {msg.error()}")
                self._position = msg.offset() + 1
                try:
                    table, txnid = parse_store_key(msg.key())
                except MetadataDecodeError as exc:
                    log.warning("ignoring foreign record at %s@%d: %s", self.topic, msg.offset(), exc)
                    continue
                self._index.add(table, txnid, msg.value())
            return self._position

    def get(self, table: str, txnid: str) -> MetadataFile:
        store_key(table, txnid)
        with self._lock:
            file = self._index.lookup(table, txnid)
            if file is None:
                self.catch_up()
                file = self._index.lookup(table, txnid)
        if file is None:
            raise MetadataFileNotFoundError(f"no METADATA file {table}/{txnid} in {self.topic}")
        return file

    def versions(self, table: str) -> list[MetadataFile]:
        """Every stored, not tombstoned version of ``table`` (committed or not), by sequence."""
        with self._lock:
            self.catch_up()
            return self._index.versions(table)

    def tables(self) -> set[str]:
        """Every table with a stored, not tombstoned version (read up to the end first)."""
        with self._lock:
            self.catch_up()
            return self._index.tables()

    def raw_records(self, table: str) -> dict[str, bytes | None]:
        """txnid -> stored value (None = tombstone) for ``table``, as read so far (for tests/tools)."""
        with self._lock:
            self.catch_up()
            return {txnid: v for (t, txnid), v in self._index.raw.items() if t == table}
