"""Forwarding a split parent's stragglers to its children, after SPLIT_FINALIZE (DESIGN.md section 8).

Rows that reach a split parent's ingest topic after its leader froze (producers whose map still
routes to the parent, writes made during the freeze) were never accepted by the parent. A
:class:`StragglerForwarder` (thread ``forward-<parent pid8>``) consumes that topic from the parent
leader group's committed offset (the accepted index), validates each message as the parent's
leader would, splits it by the split point (:func:`~storage_node.replication.split.route_valid_message`)
and produces the pieces to the children's ingest topics in ONE Kafka transaction with the parent
group's offsets (``send_offsets_to_transaction``): exactly once, so no loss and no duplicate. After
each transaction (and at start, below the committed offset) the forwarder deletes the parent's
records it forwarded (``delete_records``, the Tail the parent's leader kept): a forwarder that finds
no committed offset after Kafka expired it never forwards an old row a second time. A
message the parent's leader would refuse goes to the deadletter topic in that transaction, with the
leader's headers (the producer's id, the parent's topic and offset). A producer's ``sync()`` of
those rows returns once that transaction committed (it reads the parent group's commit, then the
deadletter topic, so it reports the refusal); the children's leaders accept them from their own
ingest topics.

Who forwards: the node leading the listed partition that holds the parent's lowest key (its low
child, or that child's own low child after further splits), for as long as it leads it
(:func:`metadata.metadata_file.retired_partitions`, :func:`forwarding_owner`). Forwarding so
follows leadership: a node that stops or loses the leadership stops its forwarders, the next
leader starts them, and the shared
transactional id (``<parent ingest topic>.forward``) fences a forwarder that has not noticed yet. A
parent whose low end splits again forwards into a retired partition, whose own forwarder (on the
same owner) forwards on. Any error starts the forwarding again from the committed offset; a fenced
forwarder (another owner took over) stops.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from metadata.metadata_file import MetadataFile, RetiredPartition
from metadata.partition_map import PartitionMap
from metadata.table import TableDefinition
from shoal.errors import KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.admin import delete_records
from shoal.kafka.settings import KafkaSettings
from shoal.kafka.transaction import TransactionalChannel
from shoal.topics import TopicNames
from shoal.worker import Worker
from storage_node.config import LeaderConfig, consumer_overrides
from storage_node.replica.validate import IngestValidator, Rejected
from storage_node.replication.split import route_valid_message
from storage_node.roles.leader.deadletter import produce_deadletter
from storage_node.roles.leader.recovery import committed_offset

log = logging.getLogger(__name__)


def forwarding_owner(file: MetadataFile, parent: RetiredPartition) -> str:
    """The listed partition whose leader forwards ``parent``'s stragglers: the one holding its lowest key."""
    return PartitionMap(file).lookup_encoded(parent.key_range.begin).partition_id


@dataclass
class ForwardStats:
    forwarded_messages: int = 0
    refused_messages: int = 0
    """Of ``forwarded_messages``, those the parent's leader would refuse: produced to the deadletter
    topic (not to a child) in the same transaction."""
    transactions: int = 0
    restarts: int = 0
    truncations: int = 0
    """``delete_records`` calls on the parent's ingest topic below what was forwarded."""


class StragglerForwarder(Worker):
    """Forwards one retired split parent's ingest topic to its children (see the module doc)."""

    def __init__(
        self,
        *,
        kafka: KafkaSettings,
        topics: TopicNames,
        table: TableDefinition,
        parent: RetiredPartition,
        max_ingest_bytes: int,
        max_deadletter_payload_bytes: int = LeaderConfig.max_deadletter_payload_bytes,
        poll_s: float = 0.3,
        restart_pause_s: float = 1.0,
    ) -> None:
        super().__init__(f"forward-{parent.partition_id[:8]}")
        self.kafka, self.topics, self.table, self.parent = kafka, topics, table, parent
        self.max_ingest_bytes = max_ingest_bytes
        self.max_deadletter_payload_bytes = max_deadletter_payload_bytes
        self.poll_s, self.restart_pause_s = poll_s, restart_pause_s
        self.stats = ForwardStats()
        # the parent leader's own validation: a message it would refuse goes to the deadletter topic
        self.validator = IngestValidator(table, parent.key_range, max_ingest_bytes)

    def start(self) -> StragglerForwarder:
        super().start()
        return self

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self._forward()
            except KafkaOperationError as exc:
                if exc.fatal:  # fenced: a forwarder of a newer owner took over
                    log.warning("%s: forwarding fenced (%s); another node forwards now", self.name, exc)
                    return
                self._pause(exc)
            except Exception as exc:
                self._pause(exc)

    def _pause(self, exc: Exception) -> None:
        self.stats.restarts += 1
        log.warning("%s: forwarding stopped (%s: %s); starting again", self.name, type(exc).__name__, exc)
        self.stopping.wait(self.restart_pause_s)

    def _forward(self) -> None:
        parent_topic = self.topics.ingest(self.parent.partition_id)
        # librdkafka's own limit (1,000,000 bytes by default) would refuse a straggler the parent's
        # ingest topic took (up to max_ingest_bytes), and the forwarder would retry it for ever
        channel = TransactionalChannel(
            self.kafka,
            f"{parent_topic}.forward",
            call_timeout_s=60,
            **{"message.max.bytes": max(self.max_ingest_bytes + 1024 * 1024, 1_000_000)},
        )
        channel.open()
        consumer = clients.consumer(
            self.kafka,
            group_id=self.topics.leader_group(self.parent.partition_id),
            **consumer_overrides(self.max_ingest_bytes + 1024 * 1024),
        )
        admin = clients.admin(self.kafka)
        try:
            tp = TopicPartition(parent_topic, 0)
            committed = committed_offset(consumer, tp)
            consumer.assign([TopicPartition(parent_topic, 0, committed if committed >= 0 else OFFSET_BEGINNING)])
            log.info("%s: forwarding stragglers of %s from offset %s", self.name, parent_topic, committed)
            # what is still to delete below (accepted or forwarded): tried again until it succeeds, not
            # only after the next forwarding; that may never come, and once the group's offset expired a
            # forwarder would start below it (OFFSET_BEGINNING) and forward those rows a second time
            pending = committed if committed > 0 else None
            next_try = 0.0
            while not self.stopping.is_set():
                if pending is not None and time.monotonic() >= next_try:
                    if self._truncate(admin, parent_topic, pending):
                        pending = None
                    else:
                        next_try = time.monotonic() + 10 * self.restart_pause_s
                msgs = consumer.consume(200, self.poll_s)
                data = [m for m in msgs if m.error() is None]
                for m in msgs:
                    err = m.error()
                    if err is not None and err.code() != KafkaError._PARTITION_EOF:
                        log.warning("%s: consumer: %s", self.name, err)
                if not data:
                    continue
                refused = 0
                try:
                    with channel.transaction() as txn:
                        for m in data:
                            headers = m.headers()
                            rows = self.validator.validate(m.value(), headers)
                            routed = (
                                None
                                if isinstance(rows, Rejected)
                                else route_valid_message(
                                    m.value(),
                                    rows,
                                    self.validator,
                                    self.parent.split_point,
                                    self.parent.low,
                                    self.parent.high,
                                )
                            )
                            if routed is None:
                                # refused here, in the transaction that moves the parent's group past it:
                                # a producer's sync() reads the deadletter once that group is past its
                                # message, so it reports the refusal (forwarded to the low child, whose
                                # leader refused it later, that sync() had returned success); also a
                                # message with a row no message to a child can hold alone
                                why = (
                                    rows
                                    if isinstance(rows, Rejected)
                                    else Rejected("oversized", "a row does not fit a message to a child alone")
                                )
                                produce_deadletter(
                                    txn,
                                    self.topics.deadletter,
                                    m,
                                    why,
                                    source_topic=parent_topic,
                                    partition_id=self.parent.partition_id,
                                    table=self.table.name,
                                    max_payload_bytes=self.max_deadletter_payload_bytes,
                                    replica_name=self.name,
                                )
                                refused += 1
                                continue
                            for child, payload in routed:
                                txn.produce(self.topics.ingest(child), payload, partition=0, headers=_headers(headers))
                        if txn.flush(30):
                            raise KafkaOperationError("forwarded records not delivered")
                        last = int(data[-1].offset() or 0)
                        txn.send_offsets(
                            [TopicPartition(parent_topic, 0, last + 1)], consumer.consumer_group_metadata()
                        )
                except KafkaOperationError as exc:
                    if exc.fatal:
                        raise
                    log.warning("%s: forwarding failed, retrying: %s", self.name, exc)
                    consumer.seek(TopicPartition(parent_topic, 0, int(data[0].offset() or 0)))
                    self.stopping.wait(self.restart_pause_s)
                    continue
                self.stats.forwarded_messages += len(data)
                self.stats.refused_messages += refused
                self.stats.transactions += 1
                log.info("%s: forwarded %d straggler message(s) to the children", self.name, len(data))
                pending = None if self._truncate(admin, parent_topic, last + 1) else last + 1
                next_try = time.monotonic() + 10 * self.restart_pause_s
        finally:
            with contextlib.suppress(KafkaException, RuntimeError):
                consumer.close()
            channel.close()

    def _truncate(self, admin: AdminClient, parent_topic: str, below: int) -> bool:
        """Delete the parent's records below ``below`` (forwarded, or accepted by its leader: the Tail
        the parent's leader kept). With them gone, a forwarder that finds no committed offset (Kafka
        expires a memberless group's offsets after ``offsets.retention.minutes``) starts at the log
        start and forwards nothing a second time: forwarded again, an old row would be accepted with
        a new GTID, over every newer write of its key. False when it failed (logged): the caller tries
        again while it runs."""
        try:
            delete_records(admin, [TopicPartition(parent_topic, 0, below)], parent_topic)
        except KafkaOperationError as exc:
            log.warning("%s: cannot delete the forwarded records below %d: %s", self.name, below, exc)
            return False
        self.stats.truncations += 1
        return True


def _headers(
    raw: dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None,
) -> list[tuple[str, str | bytes | None]] | None:
    if raw is None:
        return None
    return list(raw.items()) if isinstance(raw, dict) else list(raw)
