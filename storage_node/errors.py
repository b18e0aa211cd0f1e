"""The storage node's errors, in one module: subclasses of :class:`shoal.errors.ShoalError`.

Each carries the data a caller tests (the channel, the call, the segment) as attributes; the
message is built from them.
"""

from __future__ import annotations

from shoal.errors import KafkaOperationError, ShoalError
from shoal.kafka.errors import WedgedCallError


class StorageNodeError(ShoalError):
    """Base of the errors raised by the storage node's roles and procedures."""


class FencedError(StorageNodeError):
    """A transactional channel was taken over: Kafka fenced this producer (DESIGN.md section 4).

    ``channel`` is the topic (and ``transactional.id``) the producer wrote; ``reason`` is Kafka's
    error text. The role holding it commits nothing more.
    """

    def __init__(self, channel: str, reason: str) -> None:
        super().__init__(f"{channel}: {reason}")
        self.channel = channel
        self.reason = reason


class WedgedProducerError(WedgedCallError):
    """A transactional call of a leader did not return within its bound: the producer is abandoned.

    librdkafka's ``send_offsets_to_transaction`` can ignore its own timeout after a broker restart
    (confluentinc/librdkafka#5456, #5511) and block forever. The leader role then ends as FAILED; the
    node resigns the election and the next leader of this channel (usually this node again) opens
    a new producer whose ``init_transactions`` fences the stuck one. ``channel`` is the WAL topic.
    """

    def __init__(self, channel: str, detail: str) -> None:
        super().__init__(f"{channel}: {detail}")
        self.channel = channel


class NotLeadingError(StorageNodeError):
    """The leader role is ending, or the election no longer lets this replica write (``replica``)."""

    def __init__(self, replica: str, reason: str) -> None:
        super().__init__(reason)
        self.replica = replica
        self.reason = reason


class ChunkError(StorageNodeError):
    """The chunks after a segment manifest are missing, out of order or do not belong to it."""

    def __init__(self, segment_id: str, index: int, reason: str) -> None:
        super().__init__(reason)
        self.segment_id = segment_id
        self.index = index
        """The chunk index that was expected."""


class LocalSegmentMismatchError(KafkaOperationError):
    """A segment file on local disk does not match its record (size or sha256): it is not published."""

    def __init__(self, segment_id: str, reason: str) -> None:
        super().__init__(f"segment {segment_id}: {reason}")
        self.segment_id = segment_id


class IntakeRejected(StorageNodeError):
    """A compaction record on the compaction topic cannot be used (``segment_id``, reason in the message)."""

    def __init__(self, segment_id: str, reason: str) -> None:
        super().__init__(reason)
        self.segment_id = segment_id


class MetricsError(StorageNodeError, ValueError):
    """The node's metrics exporter was given something it cannot serve (``what`` names it)."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(reason)
        self.what = what
