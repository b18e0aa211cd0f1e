"""Scans over Arrow Flight: one server per node, one ``do_get`` per scan.

A ticket is the JSON of a :class:`ScanRequest`; the answer is the newest version of every key the
node's replicas hold (segments + memtable), tombstones hidden, as Arrow record batches. Nothing in
the ticket becomes a path: the table name and partition id are validated and only select among
the replicas the node already holds.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from shoal.errors import SchemaError, ShoalError, WireFormatError
from shoal.ids import validate_partition_id, validate_table_name
from storage_node.partition.replica import KeyFilter, PartitionReplica

log = logging.getLogger(__name__)

Resolver = Callable[[str, str | None], Sequence[PartitionReplica]]
"""(table, partition_id or None) -> the replicas to scan."""
Describer = Callable[[str], list[dict[str, Any]]]
"""table -> one JSON-able description per replica of it on this node."""
DESCRIBE_ACTION = "describe_replicas"


def _key(value: object, what: str) -> int | str | None:
    if value is None or (isinstance(value, int | str) and not isinstance(value, bool)):
        return value
    raise SchemaError(f"{what} must be an integer or a string, got {value!r:.80}")


@dataclass(frozen=True)
class ScanRequest:
    table: str
    partition_id: str | None = None
    key: int | str | None = None
    low: int | str | None = None
    high: int | str | None = None

    def __post_init__(self) -> None:
        validate_table_name(self.table)
        if self.partition_id is not None:
            validate_partition_id(self.partition_id)
        for name in ("key", "low", "high"):
            _key(getattr(self, name), name)
        if self.key is not None and (self.low is not None or self.high is not None):
            raise SchemaError("a scan takes either a key or a range, not both")

    @property
    def where(self) -> KeyFilter:
        return KeyFilter(self.key, self.low, self.high)

    def to_ticket(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_ticket(cls, data: bytes) -> ScanRequest:
        try:
            obj = json.loads(data.decode("utf-8"))
            if not isinstance(obj, dict) or set(obj) - {"table", "partition_id", "key", "low", "high"}:
                raise ValueError("unexpected fields")
            return cls(**obj)
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise WireFormatError(f"malformed scan ticket: {exc}") from exc


class ScanServer(flight.FlightServerBase):
    """Serves :class:`ScanRequest` tickets from the replicas ``resolve`` returns."""

    def __init__(self, location: str, resolve: Resolver, *, describe: Describer | None = None, **kwargs: Any) -> None:
        super().__init__(location, **kwargs)
        self._resolve = resolve
        self._describe = describe

    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        return [(DESCRIBE_ACTION, "JSON list describing every replica of a table on this node: body {table}")]

    def do_action(self, context: Any, action: flight.Action) -> Iterator[flight.Result]:
        if action.type != DESCRIBE_ACTION or self._describe is None:
            raise flight.FlightServerError(f"unknown action {action.type!r:.80}")
        try:
            body = json.loads(action.body.to_pybytes().decode("utf-8"))
            if not isinstance(body, dict) or set(body) != {"table"}:
                raise WireFormatError('describe body must be {"table": NAME}')
            table = validate_table_name(body["table"])
            out = self._describe(table)
        except (ValueError, UnicodeDecodeError) as exc:
            raise flight.FlightServerError(f"malformed describe request: {exc}") from exc
        except ShoalError as exc:
            raise flight.FlightServerError(f"{type(exc).__name__}: {exc}") from exc
        yield flight.Result(json.dumps(out).encode())

    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.RecordBatchStream:
        try:
            req = ScanRequest.from_ticket(ticket.ticket)
            replicas = self._resolve(req.table, req.partition_id)
            if not replicas:
                what = f"partition {req.partition_id} of " if req.partition_id else ""
                raise flight.FlightServerError(f"this node holds no replica of {what}table {req.table}")
            parts = [r.scan(req.where) for r in replicas]
            table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        except ShoalError as exc:
            raise flight.FlightServerError(f"{type(exc).__name__}: {exc}") from exc
        return flight.RecordBatchStream(table)


def scan_remote(location: str, request: ScanRequest, *, timeout_s: float = 60.0) -> pa.Table:
    """Run one scan against the node at ``location`` (``grpc://host:port``)."""
    client = flight.FlightClient(location)
    try:
        options = flight.FlightCallOptions(timeout=timeout_s)
        return client.do_get(flight.Ticket(request.to_ticket()), options).read_all()
    except flight.FlightError as exc:
        raise ShoalError(f"scan on {location} failed: {exc}") from exc
    finally:
        client.close()


def describe_remote(location: str, table: str, *, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """``describe replica`` for every replica of ``table`` on the node at ``location``."""
    client = flight.FlightClient(location)
    try:
        options = flight.FlightCallOptions(timeout=timeout_s)
        body = json.dumps({"table": validate_table_name(table)}).encode()
        results = list(client.do_action(flight.Action(DESCRIBE_ACTION, body), options))
        out: list[dict[str, Any]] = json.loads(results[0].body.to_pybytes()) if results else []
        return out
    except flight.FlightError as exc:
        raise ShoalError(f"describe on {location} failed: {exc}") from exc
    finally:
        client.close()
