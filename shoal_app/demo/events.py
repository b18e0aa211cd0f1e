"""The demo's events: the table they go into, their JSON form, and the check that shoal holds them intact.

Every field of an event is a pure function of its ``event_id``, so the final check needs no copy of
what was sent: it recomputes the expected columns for the ids a scan returned (pyarrow compute, no
per-row loop) and compares. The partition key is ``event_id`` (uint64 keyspace); the split points
cut ``[0, events)`` into equal ranges, so every partition gets its share (EventQL partitioning,
seed 002), and the generator interleaves the ranges (:func:`event_id_at`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from metadata.table import Column, ColumnType, TableDefinition
from shoal.errors import ConfigError

KINDS = ("view", "click", "cart", "order", "refund")
USERS = 97
EVENT_COLUMNS = ("event_id", "user", "kind", "amount", "ts")


def table_definition(name: str, replication_factor: int) -> TableDefinition:
    return TableDefinition(
        name,
        (
            Column("event_id", ColumnType.UINT64, False),
            Column("user", ColumnType.STRING, False),
            Column("kind", ColumnType.STRING, False),
            Column("amount", ColumnType.FLOAT64, False),
            Column("ts", ColumnType.INT64, False),
        ),
        ("event_id",),
        "event_id",
        replication_factor,
    )


def split_points(events: int, partitions: int) -> list[int]:
    """``partitions - 1`` ascending event ids that cut ``[0, events)`` into equal ranges."""
    if partitions < 1 or events < partitions:
        raise ConfigError(f"need at least one event per partition (events={events}, partitions={partitions})")
    return [events * i // partitions for i in range(1, partitions)]


def event_id_at(index: int, events: int, partitions: int) -> int:
    """The id of the ``index``-th event: consecutive events go round-robin over the partitions' ranges.

    A bijection of ``[0, events)``, so every partition receives a steady share of the stream all along
    (and its leader flushes several segments while the demo runs) instead of one range after the other.
    """
    base = events // partitions
    if index >= base * partitions:
        return index
    return (index % partitions) * base + index // partitions


def _user(event_id: int) -> str:
    return f"user-{event_id % USERS:02d}"


def _kind(event_id: int) -> str:
    return KINDS[event_id % len(KINDS)]


def _amount(event_id: int) -> float:
    return (event_id * 7919 % 100_000) / 100


def event_json(event_id: int, ts_ms: int) -> bytes:
    """The JSON value of one event (what the generator writes to the source topic)."""
    return json.dumps(
        {
            "event_id": event_id,
            "user": _user(event_id),
            "kind": _kind(event_id),
            "amount": _amount(event_id),
            "ts": ts_ms,
        }
    ).encode()


@dataclass(frozen=True)
class ContentCheck:
    """How the rows shoal returned compare with the acknowledged events."""

    acknowledged: int
    rows: int
    distinct_ids: int
    missing: int
    unexpected: int
    wrong_content: int
    missing_sample: tuple[int, ...]

    @property
    def ok(self) -> bool:
        return (
            self.rows == self.acknowledged == self.distinct_ids
            and self.missing == 0
            and self.unexpected == 0
            and self.wrong_content == 0
        )

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "missing_sample": list(self.missing_sample), "ok": self.ok}


def check_content(rows: pa.Table, acknowledged_ids: Sequence[int] | pa.Array) -> ContentCheck:
    """Every acknowledged event is present exactly once with its own content, and nothing else is."""
    acked = pa.array(acknowledged_ids, pa.uint64()) if not isinstance(acknowledged_ids, pa.Array) else acknowledged_ids
    acked = acked.cast(pa.uint64())
    ids = rows.column("event_id").combine_chunks().cast(pa.uint64()) if rows.num_rows else pa.array([], pa.uint64())
    distinct = pc.unique(ids)
    missing_mask = pc.invert(pc.is_in(acked, value_set=ids))
    missing = pc.filter(acked, missing_mask)
    unexpected = int(pc.sum(pc.invert(pc.is_in(ids, value_set=acked))).as_py() or 0) if len(ids) else 0
    wrong = 0
    if rows.num_rows:
        i64 = ids.cast(pa.int64())
        user_n = pc.binary_join_element_wise(
            pa.scalar("user-"), pc.utf8_lpad(pc.cast(pc.remainder(i64, USERS), pa.string()), 2, "0"), ""
        )
        kind_n = pc.take(pa.array(KINDS), pc.remainder(i64, len(KINDS)))
        amount_n = pc.divide(pc.cast(pc.remainder(pc.multiply(i64, 7919), 100_000), pa.float64()), 100.0)
        good = pc.and_(
            pc.and_(pc.equal(rows.column("user"), user_n), pc.equal(rows.column("kind"), kind_n)),
            pc.less(pc.abs(pc.subtract(rows.column("amount"), amount_n)), 1e-9),
        )
        wrong = int(pc.sum(pc.invert(pc.fill_null(good, False))).as_py() or 0)
    return ContentCheck(
        acknowledged=len(acked),
        rows=rows.num_rows,
        distinct_ids=len(distinct),
        missing=len(missing),
        unexpected=unexpected,
        wrong_content=wrong,
        missing_sample=tuple(int(v) for v in missing.slice(0, 10).to_pylist()),
    )
