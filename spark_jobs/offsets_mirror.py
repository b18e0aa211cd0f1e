"""Mirror a streaming query's Kafka source offsets into a consumer group, for offset monitoring.

Spark's Kafka source keeps its offsets in the checkpoint, invisible to Kafka tooling. After every
completed micro-batch, :class:`OffsetsMirror` (a StreamingQueryListener on the driver) commits the
batch's end offsets of each Kafka source to ``TopicNames.spark_group(query_name)``, so
``kafka-consumer-groups`` and shoal's offset monitoring show the query's lag. The group is never
used to consume: the checkpoint stays the source of truth on restart.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from shoal.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)


def parse_end_offsets(end_offset: object) -> dict[tuple[str, int], int]:
    """Spark's Kafka source offset JSON ``{"topic": {"0": 42}}`` -> {(topic, partition): next offset}."""
    if isinstance(end_offset, str):
        try:
            end_offset = json.loads(end_offset)
        except ValueError:
            return {}
    if not isinstance(end_offset, Mapping):
        return {}
    out: dict[tuple[str, int], int] = {}
    for topic, parts in end_offset.items():
        if not isinstance(parts, Mapping):
            return {}
        for partition, offset in parts.items():
            try:
                p, o = int(partition), int(offset)
            except (TypeError, ValueError):
                return {}
            if o >= 0:
                out[(str(topic), p)] = o
    return out


def _field(obj: Any, name: str) -> Any:
    """A field of a progress report, whether PySpark hands over an object or a dict."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


class OffsetsMirror(StreamingQueryListener):
    """Commits the Kafka end offsets of the query named ``query_name`` to ``group`` after each batch."""

    def __init__(
        self, query_name: str, group: str, kafka: KafkaSettings | str, *, kafka_config: Mapping[str, Any] | None = None
    ) -> None:
        self.query_name = query_name
        self.group = group
        self.kafka = KafkaSettings(kafka) if isinstance(kafka, str) else kafka
        self.kafka_config = dict(kafka_config or {})
        self._consumer: Any = None
        self._lock = threading.Lock()
        self.committed: dict[tuple[str, int], int] = {}
        self.batches = 0
        self.last_error: str | None = None

    def _client(self) -> Any:
        if self._consumer is None:
            from shoal.kafka import clients

            self._consumer = clients.consumer(self.kafka, group_id=self.group, **self.kafka_config)
        return self._consumer

    def mirror(self, offsets: dict[tuple[str, int], int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        if not offsets:
            return
        with self._lock:
            try:
                self._client().commit(
                    offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())], asynchronous=False
                )
            except KafkaException as exc:
                self.last_error = str(exc)
                log.warning("could not mirror offsets of query %s to group %s: %s", self.query_name, self.group, exc)
                return
            self.committed.update(offsets)

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        if _field(event.progress, "name") == self.query_name:
            self.batches += 1
            self.mirror_progress(event.progress)

    def mirror_progress(self, progress: Any) -> None:
        """Mirror the Kafka end offsets of one progress report (an event's, or ``query.lastProgress``)."""
        if progress is None:
            return
        offsets: dict[tuple[str, int], int] = {}
        for source in _field(progress, "sources") or ():
            if "kafka" in str(_field(source, "description")).lower():
                offsets.update(parse_end_offsets(_field(source, "endOffset")))
        self.mirror(offsets)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception:
            log.error("query %s failed: %s", self.query_name, str(event.exception)[:2000])

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
