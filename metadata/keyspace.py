"""Keyspaces and key ranges (EventQL table partitioning, section 2).

A table's keyspace is the range of all valid partition key values: ``[0, 2**64 - 1]`` for
``UINT64`` keys, all strings for ``STRING`` keys. Keys are kept in the METADATA file as bytes whose
plain byte order is the key order (8-byte big-endian for UINT64, UTF-8 for STRING), so one
comparison works for both keyspaces.

The source's rule for empty positions: an empty ``begin`` is the lowest permissible value and an
empty ``end`` is the highest (unbounded). A partition covers ``[begin, end)`` where ``end`` is the
next partition's ``begin``; the last partition has an empty end and so includes the highest key.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from metadata.errors import InvalidKeyError

UINT64_MAX = 2**64 - 1
MAX_BOUNDARY_BYTES = 1024
"""Longest split point accepted for STRING keyspaces (boundaries live in every METADATA file)."""

UNBOUNDED = b""
"""An empty begin is the lowest key, an empty end the highest (the source's rule)."""


class Keyspace(enum.Enum):
    UINT64 = "UINT64"
    STRING = "STRING"

    def encode(self, value: object) -> bytes:
        """The order-preserving byte form of a key value; raise InvalidKeyError if it is not one."""
        if self is Keyspace.UINT64:
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidKeyError(f"a UINT64 key must be an int, got {type(value).__name__} {value!r:.80}")
            if not 0 <= value <= UINT64_MAX:
                raise InvalidKeyError(f"a UINT64 key must be in [0, 2**64-1], got {value}")
            return struct.pack(">Q", value)
        if not isinstance(value, str):
            raise InvalidKeyError(f"a STRING key must be a str, got {type(value).__name__} {value!r:.80}")
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:  # lone surrogates
            raise InvalidKeyError(f"a STRING key must be valid Unicode text: {exc}") from exc

    def decode(self, data: bytes) -> int | str:
        """The key value of an encoded key; raise InvalidKeyError for bytes that are not one."""
        if self is Keyspace.UINT64:
            if len(data) != 8:
                raise InvalidKeyError(f"a UINT64 key is 8 bytes, got {len(data)}")
            return int(struct.unpack(">Q", data)[0])
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidKeyError(f"a STRING key must be UTF-8: {exc}") from exc

    def parse_text(self, text: str) -> bytes:
        """Encode a key typed by a user (CLI): decimal digits for UINT64, the text itself for STRING."""
        if self is Keyspace.UINT64:
            stripped = text.strip()
            if not stripped.isdigit() or not stripped.isascii():
                raise InvalidKeyError(f"a UINT64 key must be a non-negative decimal integer, got {text!r:.80}")
            if len(stripped.lstrip("0")) > 20:  # above 2**64 - 1 (20 digits); int() refuses > 4300 digits
                raise InvalidKeyError(
                    f"a UINT64 key must be below 2**64, got {stripped:.40}... ({len(stripped)} digits)"
                )
            return self.encode(int(stripped))
        return self.encode(text)

    def lowest(self) -> bytes:
        """The encoded lowest key: 0 for UINT64 (8 zero bytes), the empty string for STRING. No split
        point may be at or below it: the partition below it could hold no key."""
        return self.encode(0) if self is Keyspace.UINT64 else self.encode("")

    def validate_split_point(self, data: bytes) -> bytes:
        """A valid boundary above the lowest key (:meth:`lowest`)."""
        self.validate_boundary(data, "split point")
        if data <= self.lowest():
            raise InvalidKeyError(
                f"the lowest key ({self.format_key(self.lowest())}) cannot be a split point: "
                "the partition below it could hold no key"
            )
        return data

    def validate_boundary(self, data: bytes, what: str = "boundary") -> bytes:
        """Check a stored begin/split point: empty (unbounded) or a valid key of this keyspace."""
        if data == UNBOUNDED:
            return data
        if len(data) > MAX_BOUNDARY_BYTES:
            raise InvalidKeyError(f"{what} is {len(data)} bytes, more than {MAX_BOUNDARY_BYTES}")
        self.decode(data)
        return data

    def format_key(self, data: bytes, *, end: bool = False) -> str:
        """Human form of a boundary: ``-inf`` / ``+inf`` for the unbounded positions."""
        if data == UNBOUNDED:
            return "+inf" if end else "-inf"
        try:
            return repr(self.decode(data)) if self is Keyspace.STRING else str(self.decode(data))
        except InvalidKeyError:
            return "0x" + data.hex()

    def to_json(self, data: bytes) -> int | str | None:
        """JSON form of a boundary: None for unbounded, else the key value."""
        if data == UNBOUNDED:
            return None
        return self.decode(data)


@dataclass(frozen=True)
class KeyRange:
    """``[begin, end)`` in encoded form; empty begin = lowest, empty end = highest (inclusive)."""

    begin: bytes
    end: bytes

    def __post_init__(self) -> None:
        if self.begin and self.end and self.begin >= self.end:
            raise InvalidKeyError(f"empty key range: begin {self.begin!r} is not below end {self.end!r}")

    def contains(self, key: bytes) -> bool:
        return key >= self.begin and (self.end == UNBOUNDED or key < self.end)

    def strictly_inside(self, point: bytes) -> bool:
        """True if ``point`` splits this range into two non-empty ranges."""
        return point != UNBOUNDED and point > self.begin and (self.end == UNBOUNDED or point < self.end)

    def overlaps(self, other: KeyRange) -> bool:
        lo = max(self.begin, other.begin)
        hi_candidates = [e for e in (self.end, other.end) if e != UNBOUNDED]
        hi = min(hi_candidates) if hi_candidates else UNBOUNDED
        return hi == UNBOUNDED or lo < hi

    def intersection(self, other: KeyRange) -> KeyRange | None:
        if not self.overlaps(other):
            return None
        ends = [e for e in (self.end, other.end) if e != UNBOUNDED]
        return KeyRange(max(self.begin, other.begin), min(ends) if ends else UNBOUNDED)

    def describe(self, keyspace: Keyspace) -> str:
        return f"[{keyspace.format_key(self.begin)}, {keyspace.format_key(self.end, end=True)})"


FULL_RANGE = KeyRange(UNBOUNDED, UNBOUNDED)
