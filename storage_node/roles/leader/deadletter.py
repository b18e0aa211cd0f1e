"""Deadletter production (DESIGN.md section 4): an ingest message the leader refuses.

The message goes to the deadletter topic in the leader's transaction (so it is committed together
with the ingest offsets), with headers naming the reason, the source topic, partition and offset,
the partition and the table, and the sending producer's id (``shoal.producer``) when the message
has a well-formed one, so that the producer's ``sync()`` reports the refusal (:mod:`producer.refusals`
reads these headers). A payload over ``max_payload_bytes`` is dropped; its size is a header.
"""

from __future__ import annotations

import logging

from confluent_kafka import Message

from shoal.kafka.transaction import Transaction
from shoal.wire.ingest import PRODUCER_HEADER, PRODUCER_ID_PATTERN
from storage_node.replica import Rejected

log = logging.getLogger(__name__)

Headers = list[tuple[str, str | bytes | None]]


def deadletter_headers(msg: Message, why: Rejected, *, source_topic: str, partition_id: str, table: str) -> Headers:
    out: Headers = [
        ("shoal.reason", why.reason.encode()),
        ("shoal.detail", why.detail[:2000].encode("utf-8", "replace")),
        ("shoal.source.topic", source_topic.encode()),
        ("shoal.source.partition", str(msg.partition()).encode()),
        ("shoal.source.offset", str(msg.offset()).encode()),
        ("shoal.partition_id", partition_id.encode()),
        ("shoal.table", table.encode()),
    ]
    producer = _producer_id(msg.headers())
    if producer is not None:
        out.append((PRODUCER_HEADER, producer))
    return out


def _producer_id(headers: object) -> bytes | None:
    """The message's ``shoal.producer`` header if it is one well-formed id (anything can write to an ingest topic)."""
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or ())  # type: ignore[call-overload]
    ids = [value for name, value in pairs if name == PRODUCER_HEADER]
    if len(ids) != 1:
        return None
    value = ids[0].encode() if isinstance(ids[0], str) else ids[0]
    if not isinstance(value, bytes) or not PRODUCER_ID_PATTERN.fullmatch(value.decode("ascii", "replace")):
        return None
    return value


def produce_deadletter(
    txn: Transaction,
    deadletter_topic: str,
    msg: Message,
    why: Rejected,
    *,
    source_topic: str,
    partition_id: str,
    table: str,
    max_payload_bytes: int,
    replica_name: str,
) -> None:
    """Produce ``msg`` refused for ``why`` to ``deadletter_topic`` in the leader's transaction ``txn``."""
    value = msg.value()
    headers = deadletter_headers(msg, why, source_topic=source_topic, partition_id=partition_id, table=table)
    if value is not None and len(value) > max_payload_bytes:
        headers.append(("shoal.payload_dropped_bytes", str(len(value)).encode()))
        value = None
    txn.produce(deadletter_topic, value, headers=headers)
    log.warning("%s: ingest offset %d -> deadletter: %s: %s", replica_name, msg.offset(), why.reason, why.detail[:200])
