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

from confluent_kafka import KafkaException, Producer

from shoal.errors import KafkaOperationError
from shoal.kafka_admin import admin_client, create_topic
from shoal.topics import TopicNames
from shoal.wire.records import SegmentChunk
from shoal.wire.records import SegmentManifest as WireManifest

log = logging.getLogger(__name__)

KIND_HEADER = "shoal.kind"
CHUNK_BYTES = 512 * 1024
TOPIC_CONFIG = {"max.message.bytes": str(2 * 1024 * 1024)}


def publish_major(
    bootstrap_servers: str,
    topics: TopicNames,
    manifest: WireManifest,
    path: Path,
    *,
    chunk_bytes: int = CHUNK_BYTES,
    kafka_config: dict[str, Any] | None = None,
) -> None:
    """Produce ``manifest`` and the chunks of the file at ``path`` in one transaction (blocking)."""
    topic = topics.compaction(manifest.partition_id)
    create_topic(admin_client(bootstrap_servers), topic, config=TOPIC_CONFIG)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "transactional.id": f"{topic}.spark",
            "enable.idempotence": True,
            "acks": "all",
            "message.max.bytes": 2 * 1024 * 1024,
            **(kafka_config or {}),
        }
    )
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, manifest.to_bytes(), partition=0, headers=[(KIND_HEADER, b"manifest")])
        with open(path, "rb") as f:
            for index in range(manifest.chunk_count):
                data = f.read(chunk_bytes)
                chunk = SegmentChunk(manifest.segment_id, index, manifest.chunk_count, data)
                while True:
                    try:
                        producer.produce(topic, chunk.to_bytes(), partition=0, headers=[(KIND_HEADER, b"chunk")])
                        break
                    except BufferError:
                        producer.poll(0.5)
        producer.commit_transaction(60)
    except KafkaException as exc:
        raise KafkaOperationError(f"cannot publish major {manifest.segment_id} on {topic}: {exc}") from exc
    finally:
        producer.flush(10)
    log.info("published major %s (%d bytes, %d chunks) on %s", manifest.segment_id, manifest.size_bytes,
             manifest.chunk_count, topic)  # fmt: skip
