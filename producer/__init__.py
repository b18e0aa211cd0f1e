"""The shoal producer: validates rows, routes them by key, batches them as Arrow IPC and produces
them to the partitions' ingest topics (DESIGN.md section 4, step 1)."""

from producer.config import ProducerConfig, SyncPolicy
from producer.errors import (
    DeliveryError,
    MessagesRefusedError,
    ProducerClosedError,
    ProducerError,
    RefusalsLostError,
    RoutingError,
    RowValidationError,
    SendError,
    SyncTimeoutError,
)
from producer.producer import DeliveryReport, Producer, WriteResult
from producer.refusals import Refusal

__all__ = [
    "DeliveryError",
    "DeliveryReport",
    "MessagesRefusedError",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerError",
    "Refusal",
    "RefusalsLostError",
    "RoutingError",
    "RowValidationError",
    "SendError",
    "SyncPolicy",
    "SyncTimeoutError",
    "WriteResult",
]
