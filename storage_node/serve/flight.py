"""The scan server: one Arrow Flight server per node, one ``do_get`` per scan (client: shoal.scan).

A ticket is the JSON of a :class:`ScanRequest`; the answer is the newest version of every key the
node's replicas hold (segments + memtable), tombstones hidden, as Arrow record batches. Nothing in
the ticket becomes a path: the table name and partition id are validated and only select among
the replicas the node already holds.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from shoal.errors import ShoalError, WireFormatError
from shoal.ids import validate_table_name
from shoal.scan import DESCRIBE_ACTION, ScanRequest
from shoal.worker import Worker
from storage_node.replica import KeyFilter, PartitionReplica

log = logging.getLogger(__name__)

Resolver = Callable[[str, str | None], Sequence[PartitionReplica]]
"""(table, partition_id or None) -> the replicas to scan."""
Describer = Callable[[str], list[dict[str, Any]]]
"""table -> one JSON-able description per replica of it on this node."""


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
            where = KeyFilter(req.key, req.low, req.high)
            parts = [r.scan(where) for r in replicas]
            table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        except ShoalError as exc:
            raise flight.FlightServerError(f"{type(exc).__name__}: {exc}") from exc
        return flight.RecordBatchStream(table)


class FlightServing(Worker):
    """A :class:`ScanServer` answering on the :class:`~shoal.worker.Worker` thread ``flight``.

    ``serve()`` blocks that thread while gRPC's own pool answers the calls; :meth:`stop` shuts
    the server down (waiting for the calls in progress), which ends ``serve()``.
    """

    def __init__(self, server: ScanServer) -> None:
        super().__init__("flight")
        self.server = server

    def start(self) -> FlightServing:
        super().start()
        return self

    def run(self) -> None:
        self.server.serve()

    def stop(self, timeout: float = 30.0) -> bool:
        self.request_stop()
        self.server.shutdown()
        return self.join(timeout)
