"""The monitor's leaders per node (DESIGN.md section 7): alive leaders counted, every server listed."""

from __future__ import annotations

from metadata.keyspace import Keyspace
from metadata.metadata_file import Placement
from metadata.operations import create_file
from metadata.table import Column, ColumnType, TableDefinition
from monitor.collector import leader_spread
from monitor.topology import partition_topology
from shoal.topics import TopicNames


def test_leaders_per_node_and_partitions_on_their_preferred_leader() -> None:
    table = TableDefinition("t", (Column("k", ColumnType.UINT64, False),), ("k",), "k", 2)
    ids = iter(range(1, 100))
    same = [(Placement("node-1", next(ids)), Placement("node-2", next(ids))) for _ in range(3)]
    file = create_file(table, same, [Keyspace.UINT64.encode(10), Keyspace.UINT64.encode(20)])
    leads = [("node-1", True), ("node-1", True), ("node-2", False)]
    parts = []
    for entry, (server, alive) in zip(file.partitions, leads, strict=True):
        placement = next(p.placement_id for p in entry.servers if p.server_id == server)
        parts.append(
            partition_topology(
                TopicNames("x"),
                "t",
                entry,
                epoch=1,
                leader_server_id=server,
                leader_placement_id=placement,
                leader_alive=alive,
            )
        )
    assert [p.preferred_server_id for p in parts] == ["node-1", "node-2", "node-1"]
    assert leader_spread(parts) == {"leaders_per_node": {"node-1": 2, "node-2": 0}, "on_preferred_leader": 1}
