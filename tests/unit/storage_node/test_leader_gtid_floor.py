"""The leader's GTID floor (DESIGN.md section 7): read from the segments' footers, never stamped below."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metadata.table import Column, ColumnType, TableDefinition
from shoal.errors import StaleEpochError
from shoal.ids import new_partition_id
from shoal.segments.gtids import footer_gtid_bound, rows_gtid_range
from shoal.wire.ingest import ingest_schema
from shoal.wire.records import Gtid
from storage_node.replica import PartitionReplica, versioned_rows
from storage_node.roles.leader.recovery import (
    GtidRegressionError,
    chain_high_gtid,
    check_above,
    first_seq,
    highest,
)

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)


def ingest(keys: list[int]) -> pa.Table:
    return pa.table(
        {"k": pa.array(keys, pa.uint64()), "v": [f"v{k}" for k in keys], "_shoal_deleted": [False] * len(keys)},
        schema=ingest_schema(TABLE.arrow_schema()),
    )


def test_the_chain_floor_comes_from_segment_footers_and_survives_a_truncated_wal(tmp_path: Path) -> None:
    pid = new_partition_id()
    replica = PartitionReplica(TABLE, pid, 1, tmp_path)
    assert chain_high_gtid(replica) is None
    replica.append(versioned_rows(ingest([1, 2, 3]), Gtid(4, 10)), 0)  # GTIDs 4:10..4:12
    assert replica.flush(4) is not None
    replica.append(versioned_rows(ingest([5]), Gtid(4, 13)), 1)
    assert replica.flush(4) is not None
    replica.close()
    # a new role on the same disk: the WAL record before the covered end may be gone; the footers say 4:13
    reopened = PartitionReplica(TABLE, pid, 1, tmp_path)
    assert chain_high_gtid(reopened) == Gtid(4, 13)


def test_footer_bound_is_exact_for_one_epoch_and_an_upper_bound_across_epochs(tmp_path: Path) -> None:
    rows = versioned_rows(ingest([1, 2]), Gtid(7, 5))
    pq.write_table(rows, tmp_path / "a.parquet")
    assert footer_gtid_bound(pq.read_metadata(tmp_path / "a.parquet")) == Gtid(7, 6)
    mixed = pa.concat_tables([rows, versioned_rows(ingest([3]), Gtid(6, 50))])
    pq.write_table(mixed, tmp_path / "b.parquet")
    bound = footer_gtid_bound(pq.read_metadata(tmp_path / "b.parquet"))
    assert bound is not None and rows_gtid_range(mixed) == (Gtid(6, 50), Gtid(7, 6)) and bound >= Gtid(7, 6)
    assert bound.epoch == 7
    pq.write_table(rows, tmp_path / "c.parquet", write_statistics=False)
    with pytest.raises(ValueError):
        footer_gtid_bound(pq.read_metadata(tmp_path / "c.parquet"))


def test_a_role_starts_above_its_floor_and_refuses_to_stamp_at_or_below_it() -> None:
    # the bug this prevents: a role resumed with the same epoch after a WAL truncation restarted at seq 0
    assert first_seq("r", 5, Gtid(5, 41)) == 42
    assert first_seq("r", 6, Gtid(5, 41)) == 0
    assert first_seq("r", 1, None) == 0
    with pytest.raises(StaleEpochError):
        first_seq("r", 4, Gtid(5, 41))
    check_above("r", Gtid(5, 42), Gtid(5, 41))
    check_above("r", Gtid(1, 0), None)
    with pytest.raises(GtidRegressionError) as err:
        check_above("r", Gtid(5, 0), Gtid(5, 41))
    assert (err.value.replica, err.value.gtid, err.value.highest) == ("r", Gtid(5, 0), Gtid(5, 41))
    assert highest(None, Gtid(2, 1), Gtid(1, 9)) == Gtid(2, 1) and highest(None) is None
