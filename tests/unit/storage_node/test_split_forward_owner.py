"""Who forwards a retired split parent's stragglers: the leader of the partition holding its lowest key."""

from __future__ import annotations

from metadata.keyspace import UNBOUNDED, Keyspace
from metadata.metadata_file import MetadataFile, Placement, retired_partitions
from metadata.operations import FinalizeSplit, SplitPartition, apply_change, create_file
from metadata.table import Column, ColumnType, TableDefinition
from storage_node.roles.forward import forwarding_owner

TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)
U = Keyspace.UINT64.encode


def _split(file: MetadataFile, pid: str, at: int, low: int, high: int) -> list[MetadataFile]:
    splitting = apply_change(file, SplitPartition(pid, U(at), (Placement("n1", low),), (Placement("n2", high),)))
    done = apply_change(splitting, FinalizeSplit(pid, through=None, acked={low: None, high: None}))
    return [splitting, done]


def test_the_low_end_of_a_retired_parent_owns_its_forwarding_across_two_splits() -> None:
    created = create_file(TABLE, [(Placement("n1", 1),)])
    p = created.partitions[0].partition_id
    history = [created, *_split(created, p, 100, 2, 3)]
    assert retired_partitions(history[:2]) == []  # splitting: still listed, its leader accepts
    (parent,) = retired_partitions(history)
    a, b = (e.partition_id for e in history[-1].partitions)
    assert (parent.partition_id, parent.low, parent.high, parent.split_point) == (p, a, b, U(100))
    assert parent.key_range.begin == UNBOUNDED and parent.key_range.end == UNBOUNDED
    assert forwarding_owner(history[-1], parent) == a

    # the low child splits too: both retired parents are forwarded by the new lowest partition,
    # the first into the second (a retired partition), the second into its children
    history += _split(history[-1], a, 50, 4, 5)
    a1, a2, b_again = (e.partition_id for e in history[-1].partitions)
    assert b_again == b
    parents = {r.partition_id: r for r in retired_partitions(history)}
    assert set(parents) == {p, a}
    assert (parents[a].low, parents[a].high) == (a1, a2) and parents[a].key_range.end == U(100)
    assert {forwarding_owner(history[-1], r) for r in parents.values()} == {a1}

    # the high child splits: its forwarding belongs to its own low child
    history += _split(history[-1], b, 200, 6, 7)
    b1 = history[-1].partitions[2].partition_id
    parents = {r.partition_id: r for r in retired_partitions(history)}
    assert forwarding_owner(history[-1], parents[b]) == b1
