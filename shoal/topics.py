"""Kafka topic names (DESIGN.md section 3). One channel = one topic with one Kafka partition."""

from __future__ import annotations

import re
from dataclasses import dataclass

from shoal.errors import ConfigError
from shoal.ids import validate_partition_id, validate_placement_id

_PREFIX = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}$")
_QUERY = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


@dataclass(frozen=True)
class TopicNames:
    """Derives every topic name from a validated prefix and validated ids."""

    prefix: str = "shoal"

    def __post_init__(self) -> None:
        if not _PREFIX.fullmatch(self.prefix) or ".." in self.prefix:
            raise ConfigError(
                f"topic prefix must be 1-100 chars of letters, digits, '.', '_', '-' and not contain '..', "
                f"got {self.prefix!r:.120}"
            )

    def ingest(self, partition_id: str) -> str:
        return f"{self.prefix}.ingest.{validate_partition_id(partition_id)}"

    def wal(self, partition_id: str, placement_id: int) -> str:
        return f"{self.prefix}.wal.{validate_partition_id(partition_id)}.{validate_placement_id(placement_id)}"

    def segments(self, partition_id: str, placement_id: int) -> str:
        return f"{self.prefix}.segments.{validate_partition_id(partition_id)}.{validate_placement_id(placement_id)}"

    def leader_group(self, partition_id: str) -> str:
        """Consumer group of a partition's leader on its ingest topic: its committed offset is the
        accepted-by-leader index that ``Producer.sync()`` waits for."""
        return f"{self.prefix}.leader.{validate_partition_id(partition_id)}"

    def replica_group(self, partition_id: str, placement_id: int) -> str:
        """Consumer group of one replica (placement) on the other placements' channels: its committed
        offsets are that replica's Ack indexes. Derived from the placement id, so a re-assigned
        replica starts with no acks (EventQL's ABA case solved by construction)."""
        return f"{self.prefix}.replica.{validate_partition_id(partition_id)}.{validate_placement_id(placement_id)}"

    def consume_group(self, partition_id: str, placement_id: int) -> str:
        """Consumer group where a follower records its WAL overlay position on the leader's channel:
        its committed offset is that replica's Consume (Replica) index, for monitoring only (the Ack
        index stays ``replica_group``'s, committed only for what durable segments cover)."""
        return f"{self.prefix}.consume.{validate_partition_id(partition_id)}.{validate_placement_id(placement_id)}"

    def compaction(self, partition_id: str) -> str:
        """Where the Spark compaction job publishes a computed major segment (manifest + chunks) for
        the partition's leader to commit, fenced by its epoch."""
        return f"{self.prefix}.compaction.{validate_partition_id(partition_id)}"

    def spark_group(self, query_name: str) -> str:
        """Consumer group mirroring a Spark ingest query's source offsets, so offset monitoring (and
        kafka-consumer-groups) can see its lag. ``query_name``: 1-100 letters, digits, '_', '-'."""
        if not _QUERY.fullmatch(query_name or ""):
            raise ConfigError(f"query name must be 1-100 letters, digits, '_' or '-', got {query_name!r:.120}")
        return f"{self.prefix}.spark.{query_name}"

    @property
    def metadata(self) -> str:
        return f"{self.prefix}.metadata"

    @property
    def deadletter(self) -> str:
        return f"{self.prefix}.deadletter"

    @property
    def refusals_group(self) -> str:
        """The group id a producer's deadletter reader carries (``producer.refusals``): a label, it
        assigns its partition and never commits."""
        return f"{self.prefix}.deadletter.producer"
