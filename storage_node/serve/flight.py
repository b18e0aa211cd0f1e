"""The scan server: one Arrow Flight server per node, one ``do_get`` per scan (client: shoal.scan).

A ticket is the JSON of a :class:`ScanRequest`; the answer is the newest version of every key the
node's replicas hold (segments + memtable), tombstones hidden, as Arrow record batches. Nothing in
the ticket becomes a path: the table name and partition id are validated and only select among
the replicas the node already holds.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from shoal import jsonio
from shoal.errors import ConfigError, ShoalError, WireFormatError
from shoal.ids import validate_table_name
from shoal.kafka.settings import ScanSettings, Secret
from shoal.scan import DESCRIBE_ACTION, ScanRequest
from shoal.worker import Worker
from storage_node.replica import KeyFilter, PartitionReplica

log = logging.getLogger(__name__)

Resolver = Callable[[str, str | None], Sequence[PartitionReplica]]
"""(table, partition_id or None) -> the replicas to scan."""
Describer = Callable[[str], list[dict[str, Any]]]
"""table -> one JSON-able description per replica of it on this node."""


class _NoHandshake(flight.ServerAuthHandler):
    """Flight's handshake is answered by :class:`BasicAuthMiddleware` through headers."""

    def authenticate(self, outgoing: Any, incoming: Any) -> None:
        pass

    def is_valid(self, token: bytes) -> str:
        return ""


class BasicAuthMiddleware(flight.ServerMiddlewareFactory):
    """Flight basic authentication: a call with ``Basic user:password`` (the client's
    ``authenticate_basic_token`` handshake) gets a random bearer token back; every other call must
    carry a token this server issued. Anything else is refused with ``FlightUnauthenticatedError``."""

    def __init__(self, username: str, password: Secret) -> None:
        self._username = username.encode()
        self._password = password
        self._tokens: set[str] = set()
        self._lock = threading.Lock()

    def start_call(self, info: Any, headers: dict[str, list[str]]) -> _Token | None:
        values = headers.get("authorization") or headers.get("Authorization") or []
        value = values[0] if values else ""
        scheme, _, credential = value.partition(" ")
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(credential).partition(b":")
            except ValueError:
                user, password = b"", b""
            if hmac.compare_digest(user, self._username) and hmac.compare_digest(
                password, self._password.reveal().encode()
            ):
                token = secrets.token_urlsafe(32)
                with self._lock:
                    self._tokens.add(token)
                return _Token(token)
        elif scheme.lower() == "bearer":
            with self._lock:
                if credential in self._tokens:
                    return None
        raise flight.FlightUnauthenticatedError("scan server: authentication required (wrong or missing credentials)")


class _Token(flight.ServerMiddleware):
    def __init__(self, token: str) -> None:
        self._token = token

    def sending_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._token}"}


def server_options(scan: ScanSettings) -> dict[str, Any]:
    """``FlightServerBase`` keyword arguments securing a scan server as ``scan`` says (none when open)."""
    out: dict[str, Any] = {}
    if scan.tls_cert_location is not None and scan.tls_key_location is not None:
        try:
            cert = Path(scan.tls_cert_location).read_bytes()
            key = Path(scan.tls_key_location).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read the scan server's certificate or key: {exc}") from None
        out["tls_certificates"] = [(cert, key)]
    if scan.username is not None and scan.password is not None:
        out["auth_handler"] = _NoHandshake()
        out["middleware"] = {"auth": BasicAuthMiddleware(scan.username, scan.password)}
    return out


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
            body = jsonio.loads_checked(action.body.to_pybytes())
            if not isinstance(body, dict) or set(body) != {"table"}:
                raise WireFormatError('describe body must be {"table": NAME}')
            table = validate_table_name(body["table"])
            out = self._describe(table)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise flight.FlightServerError(f"malformed describe request: {exc!s:.200}") from exc
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
            parts = [r.scan(where, include_system=req.system, include_deleted=req.deleted) for r in replicas]
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
