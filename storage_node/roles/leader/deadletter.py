"""Deadletter production (DESIGN.md section 4): an ingest message the leader refuses.

The message goes to the deadletter topic in the leader's transaction (so it is committed together
with the ingest offsets), with headers naming the reason, the source topic, partition and offset,
the partition and the table. A payload over ``max_payload_bytes`` is dropped; its size is a header.
"""

from __future__ import annotations

import logging

from confluent_kafka import Message

from shoal.kafka.transaction import Transaction
from storage_node.replica import Rejected

log = logging.getLogger(__name__)

Headers = list[tuple[str, str | bytes | None]]


def deadletter_headers(msg: Message, why: Rejected, *, source_topic: str, partition_id: str, table: str) -> Headers:
    return [
        ("shoal.reason", why.reason.encode()),
        ("shoal.detail", why.detail[:2000].encode("utf-8", "replace")),
        ("shoal.source.topic", source_topic.encode()),
        ("shoal.source.partition", str(msg.partition()).encode()),
        ("shoal.source.offset", str(msg.offset()).encode()),
        ("shoal.partition_id", partition_id.encode()),
        ("shoal.table", table.encode()),
    ]


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
