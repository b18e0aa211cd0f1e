"""Rows of one partition -> Arrow IPC messages of bounded size (shoal.wire.ingest contract).

The row count per message is first estimated from the in-memory size of the rows (an upper bound
on the compressed size), then any encoded message that is still too big is split in half until it
fits. A single row that cannot fit is an error (validation bounds row sizes so this does not happen).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from producer.errors import RowValidationError
from shoal.wire.arrow_ipc import DEFAULT_COMPRESSION, encode_batch

_HEADROOM = 0.9  # share of max_bytes the estimate aims for (schema message and framing take the rest)


@dataclass(frozen=True)
class Message:
    rows: pa.Table
    payload: bytes

    @property
    def num_rows(self) -> int:
        return self.rows.num_rows


def _encode(rows: pa.Table, compression: str | None) -> bytes:
    return encode_batch(rows, compression=compression, max_bytes=2**62)


def split_messages(
    table_name: str,
    rows: pa.Table,
    *,
    max_bytes: int,
    max_rows: int,
    compression: str | None = DEFAULT_COMPRESSION,
) -> list[Message]:
    """Encode ``rows`` as one or more messages, each at most ``max_bytes`` and ``max_rows`` rows."""
    n = rows.num_rows
    if n == 0:
        return []
    per_row = max(1.0, rows.nbytes / n)
    chunk = max(1, min(max_rows, int(max_bytes * _HEADROOM / per_row)))
    out: list[Message] = []
    pending = [rows.slice(start, chunk) for start in range(0, n, chunk)]
    pending.reverse()
    while pending:
        part = pending.pop()
        payload = _encode(part, compression)
        if len(payload) <= max_bytes:
            out.append(Message(part.combine_chunks(), payload))
            continue
        if part.num_rows == 1:
            raise RowValidationError(
                table_name, f"one row encodes to {len(payload)} bytes, more than the message limit of {max_bytes}"
            )
        half = part.num_rows // 2
        pending.append(part.slice(half))
        pending.append(part.slice(0, half))
    return out
