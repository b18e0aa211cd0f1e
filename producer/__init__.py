"""The shoal producer: validates rows, routes them by key, batches them as Arrow IPC and produces
them to the partitions' ingest topics (DESIGN.md section 4, step 1)."""

from producer.config import ProducerConfig, SyncPolicy
from producer.errors import (
    DeliveryError,
    ProducerClosedError,
    ProducerError,
    RoutingError,
    RowValidationError,
    SendError,
    SyncTimeoutError,
)
from producer.producer import DeliveryReport, Producer, WriteResult

__all__ = [
    "DeliveryError",
    "DeliveryReport",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerError",
    "RoutingError",
    "RowValidationError",
    "SendError",
    "SyncPolicy",
    "SyncTimeoutError",
    "WriteResult",
]
