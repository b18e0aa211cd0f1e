"""Avro control records, framed with Avro's single-object encoding.

Every control record shoal puts on Kafka (segment manifests, WAL record envelopes, METADATA file
versions) is encoded as ``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint of the
writer schema + the Avro binary body (the Avro specification's "single object encoding").
The fingerprint lets a reader refuse a record written with another schema, or garbage, with a
typed :class:`~shoal.errors.WireFormatError` instead of decoding nonsense.

Schemas live as ``.avsc`` files next to this module and are parsed once per process.
"""

from __future__ import annotations

import io
import json
import struct
from functools import cache
from importlib import resources
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from shoal.errors import WireFormatError

MAGIC = b"\xc3\x01"
HEADER_LEN = len(MAGIC) + 8
MAX_RECORD_BYTES = 64 * 1024 * 1024
"""Upper bound on one control record; larger input is refused before decoding."""


class AvroCodec:
    """Encoder/decoder for one named schema (``schemas/<name>.avsc``)."""

    def __init__(self, name: str, schema: dict[str, Any]) -> None:
        self.name = name
        self.schema = fastavro.parse_schema(schema)
        canonical = to_parsing_canonical_form(self.schema)
        self.fingerprint = bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))
        self._header = MAGIC + self.fingerprint[::-1]  # spec: little-endian

    def encode(self, record: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        buf.write(self._header)
        try:
            fastavro.schemaless_writer(buf, self.schema, record, strict=True)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise WireFormatError(f"cannot encode {self.name} record: {exc}") from exc
        return buf.getvalue()

    def decode(self, data: bytes | bytearray | memoryview | None) -> dict[str, Any]:
        if data is None:
            raise WireFormatError(f"{self.name}: record has no value (a tombstone or an empty message)")
        data = bytes(data)
        if len(data) > MAX_RECORD_BYTES:
            raise WireFormatError(f"{self.name}: record of {len(data)} bytes exceeds {MAX_RECORD_BYTES}")
        if len(data) < HEADER_LEN or data[:2] != MAGIC:
            raise WireFormatError(
                f"{self.name}: not an Avro single-object record (missing C3 01 header; got {data[:10]!r})"
            )
        if data[2:HEADER_LEN] != self._header[2:]:
            raise WireFormatError(
                f"{self.name}: schema fingerprint {data[2:HEADER_LEN][::-1].hex()} does not match "
                f"{self.fingerprint.hex()} (a record of another type or schema version)"
            )
        buf = io.BytesIO(data)
        buf.seek(HEADER_LEN)
        try:
            record = fastavro.schemaless_reader(buf, self.schema, None)
        except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError, UnicodeDecodeError, ...
            raise WireFormatError(f"{self.name}: malformed or truncated Avro body: {exc!r}") from exc
        if buf.tell() != len(data):
            raise WireFormatError(
                f"{self.name}: {len(data) - buf.tell()} trailing bytes after the record (corrupt or foreign)"
            )
        if not isinstance(record, dict):
            raise WireFormatError(f"{self.name}: decoded a {type(record).__name__}, expected a record")
        return record


@cache
def codec(name: str) -> AvroCodec:
    """The codec for ``schemas/<name>.avsc``, parsed once per process."""
    if not name.replace("_", "").isalnum():
        raise WireFormatError(f"invalid schema name {name!r}")
    try:
        text = resources.files("shoal.wire").joinpath("schemas", f"{name}.avsc").read_text("utf-8")
    except FileNotFoundError as exc:
        raise WireFormatError(f"no Avro schema named {name!r}") from exc
    return AvroCodec(name, json.loads(text))


def header_of(data: bytes) -> bytes | None:
    """The 8-byte fingerprint (big-endian hex order) of a framed record, or None if unframed."""
    if len(data) < HEADER_LEN or data[:2] != MAGIC:
        return None
    return struct.pack(">Q", struct.unpack("<Q", data[2:HEADER_LEN])[0])
