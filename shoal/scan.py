"""The scan client side of a storage node's Arrow Flight service (DESIGN.md section 1: reads).

A ticket is the JSON of a :class:`ScanRequest`; the answer is the newest version of every key the
node's replicas hold (segments + memtable), tombstones hidden unless asked for, as Arrow record batches. The
``describe_replicas`` action returns each replica's chain, row count and content hash (``shoal
verify``). Clients (``shoal scan``, ``shoal verify``, the Spark reader, the demo) use this module;
the server is ``storage_node.serve.flight``. Nothing in a ticket becomes a path: the table name and
partition id are validated and only select among the replicas a node already holds.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from shoal import jsonio
from shoal.errors import ConfigError, SchemaError, ShoalError, WireFormatError
from shoal.ids import validate_partition_id, validate_table_name
from shoal.kafka.settings import ScanSettings

DESCRIBE_ACTION = "describe_replicas"
_TICKET_FIELDS = {"table", "partition_id", "key", "low", "high", "system", "deleted"}


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
    system: bool = False
    """Also return the GTID columns (``_shoal_epoch``, ``_shoal_seq``, ``_shoal_deleted``): ``shoal verify``."""
    deleted: bool = False
    """Also return tombstones (a key whose newest version is a delete, with its GTID); needs ``system``."""

    def __post_init__(self) -> None:
        validate_table_name(self.table)
        if self.partition_id is not None:
            validate_partition_id(self.partition_id)
        for name in ("key", "low", "high"):
            _key(getattr(self, name), name)
        for name in ("system", "deleted"):
            if not isinstance(getattr(self, name), bool):
                raise SchemaError(f"{name} must be true or false, got {getattr(self, name)!r:.80}")
        if self.deleted and not self.system:
            raise SchemaError("a scan returns tombstones only with the GTID columns (system)")
        if self.key is not None and (self.low is not None or self.high is not None):
            raise SchemaError("a scan takes either a key or a range, not both")

    def to_ticket(self) -> bytes:
        fields = asdict(self)
        if not self.deleted:  # a node from before ``deleted`` refuses unknown fields: only sent when asked for
            del fields["deleted"]
        return json.dumps(fields).encode()

    @classmethod
    def from_ticket(cls, data: bytes) -> ScanRequest:
        try:
            obj = jsonio.loads_checked(data)
            if not isinstance(obj, dict) or set(obj) - _TICKET_FIELDS:
                raise ValueError("unexpected fields")
            return cls(**obj)
        except (ValueError, TypeError, UnicodeDecodeError, RecursionError) as exc:
            raise WireFormatError(f"malformed scan ticket: {exc}") from exc


OPEN_SCAN = ScanSettings()
"""A scan server without TLS or authentication."""


_ALIGNED = pa.ipc.IpcReadOptions(ensure_alignment=pa.ipc.Alignment.DataTypeSpecific)
"""Flight hands over gRPC's buffers as they land, often not aligned to their type; pyarrow's Acero
(``Table.join``, ``group_by``) then warns on stderr about every one. Scans copy those few into aligned
memory instead."""


def connect(
    location: str, scan: ScanSettings, timeout_s: float
) -> tuple[flight.FlightClient, flight.FlightCallOptions]:
    """A Flight client of the scan server at ``location`` and the call options of its calls: TLS
    trusting ``scan.tls_ca_location``, and, with ``scan.username``, Flight's basic authentication
    handshake whose bearer token every call then carries (DESIGN.md section 1)."""
    tls_root = None
    if scan.tls_ca_location is not None:
        try:
            tls_root = Path(scan.tls_ca_location).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read the scan CA {scan.tls_ca_location}: {exc.strerror}") from None
    client = flight.FlightClient(location, tls_root_certs=tls_root)
    headers: list[tuple[bytes, bytes]] = []
    if scan.username is not None and scan.password is not None:
        try:
            token = client.authenticate_basic_token(
                scan.username, scan.password.reveal(), flight.FlightCallOptions(timeout=timeout_s)
            )
        except flight.FlightError as exc:
            client.close()
            raise ShoalError(f"scan server {location} refused {scan.username}: {_first_line(exc)}") from None
        headers.append(token)
    return client, flight.FlightCallOptions(timeout=timeout_s, headers=headers, read_options=_ALIGNED)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def scan_remote(
    location: str, request: ScanRequest, *, timeout_s: float = 60.0, scan: ScanSettings = OPEN_SCAN
) -> pa.Table:
    """Run one scan against the node at ``location`` (``grpc://host:port`` or ``grpc+tls://``)."""
    client, options = connect(location, scan, timeout_s)
    try:
        return client.do_get(flight.Ticket(request.to_ticket()), options).read_all()
    except flight.FlightError as exc:
        raise ShoalError(f"scan on {location} failed: {exc}") from exc
    finally:
        client.close()


def describe_remote(
    location: str, table: str, *, timeout_s: float = 60.0, scan: ScanSettings = OPEN_SCAN
) -> list[dict[str, Any]]:
    """``describe replica`` for every replica of ``table`` on the node at ``location``."""
    client, options = connect(location, scan, timeout_s)
    try:
        body = json.dumps({"table": validate_table_name(table)}).encode()
        results = list(client.do_action(flight.Action(DESCRIBE_ACTION, body), options))
        out: list[dict[str, Any]] = jsonio.loads_checked(results[0].body.to_pybytes()) if results else []
        return out
    except flight.FlightError as exc:
        raise ShoalError(f"describe on {location} failed: {exc}") from exc
    finally:
        client.close()
