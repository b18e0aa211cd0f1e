"""Publishing a computed major on ``TopicNames.compaction(partition_id)`` for the leader's intake.

One Kafka transaction holds the Avro manifest (header ``shoal.kind: manifest``) and the file's
chunks (``shoal.kind: chunk``), so the intake (``read_committed``) sees all of it or nothing. The
transactional id is per partition: a second compaction service publishing for the same partition
fences the first.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from shoal.kafka import clients
from shoal.kafka.admin import create_topic
from shoal.kafka.settings import KafkaSettings
from shoal.kafka.transaction import TransactionalChannel
from shoal.topics import TopicNames
from shoal.wire.records import ManifestRecord as WireManifest
from shoal.wire.records import SegmentChunk

log = logging.getLogger(__name__)

KIND_HEADER = "shoal.kind"
CHUNK_BYTES = 512 * 1024
TOPIC_CONFIG = {"max.message.bytes": str(2 * 1024 * 1024)}


def publish_major(
    kafka: KafkaSettings,
    topics: TopicNames,
    manifest: WireManifest,
    path: Path,
    *,
    chunk_bytes: int = CHUNK_BYTES,
    kafka_config: dict[str, Any] | None = None,
) -> None:
    """Produce ``manifest`` and the chunks of the file at ``path`` in one transaction (blocking).

    KafkaOperationError (ProducerFencedError when another service publishes for the partition)
    if the transaction does not commit; it is aborted then.
    """
    topic = topics.compaction(manifest.partition_id)
    create_topic(clients.admin(kafka), topic, policy=kafka.topics, config=TOPIC_CONFIG)
    tuning: dict[str, Any] = {"message.max.bytes": 2 * 1024 * 1024, **(kafka_config or {})}
    with TransactionalChannel(kafka, f"{topic}.spark", **tuning) as channel, channel.transaction() as txn:
        txn.produce(topic, manifest.to_bytes(), partition=0, headers=[(KIND_HEADER, b"manifest")])
        with open(path, "rb") as f:
            for index in range(manifest.chunk_count):
                data = f.read(chunk_bytes)
                chunk = SegmentChunk(manifest.segment_id, index, manifest.chunk_count, data)
                while True:
                    try:
                        txn.produce(topic, chunk.to_bytes(), partition=0, headers=[(KIND_HEADER, b"chunk")])
                        break
                    except BufferError:
                        channel.producer.poll(0.5)
    log.info(
        "published major %s (%d bytes, %d chunks) on %s",
        manifest.segment_id,
        manifest.size_bytes,
        manifest.chunk_count,
        topic,
    )
