"""The four LinDB indexes of a WAL channel, read from Kafka (DESIGN.md section 3).

- **Append index**: the channel's log end offset (the next record's offset).
- **Tail index**: the channel's log start offset (moves with ``delete_records``).
- **Consume (Replica) index** of a reader: its consumer position; a leader's own replay position.
- **Ack index** of a replica: its consumer group's committed offset on the channel.

Invariant (checked by :meth:`ChannelIndexes.check`): Tail <= Ack <= Append.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from shoal.errors import KafkaOperationError


@dataclass(frozen=True)
class ChannelIndexes:
    topic: str
    tail: int
    append: int
    acks: tuple[tuple[str, int | None], ...] = ()
    """(group id, committed offset or None) per replica group asked for."""

    def check(self) -> list[str]:
        """Violations of Tail <= Ack <= Append (an empty list if none)."""
        problems = []
        for group, ack in self.acks:
            if ack is not None and not self.tail <= ack <= self.append:
                problems.append(f"{group}: ack {ack} outside [{self.tail}, {self.append}]")
        return problems


def channel_indexes(
    bootstrap_servers: str, topic: str, groups: tuple[str, ...] = (), *, timeout_s: float = 10.0
) -> ChannelIndexes:
    """Read Tail and Append of ``topic`` and the Ack index of each consumer group in ``groups``."""
    tp = TopicPartition(topic, 0)
    probe = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "shoal-indexes", "enable.auto.commit": False})
    try:
        low, high = probe.get_watermark_offsets(tp, timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaOperationError(f"cannot read offsets of {topic}: {exc}") from exc
    finally:
        probe.close()
    acks: list[tuple[str, int | None]] = []
    for group in groups:
        c = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group, "enable.auto.commit": False})
        try:
            committed = c.committed([tp], timeout=timeout_s)[0].offset
        except KafkaException as exc:
            raise KafkaOperationError(f"cannot read the committed offset of {group} on {topic}: {exc}") from exc
        finally:
            c.close()
        acks.append((group, committed if committed >= 0 else None))
    return ChannelIndexes(topic, int(low), int(high), tuple(acks))
