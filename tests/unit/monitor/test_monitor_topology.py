"""Channels and groups derived from a METADATA partition entry (DESIGN.md section 3)."""

from __future__ import annotations

from metadata.metadata_file import PartitionEntry, Placement
from monitor.topology import partition_topology
from shoal.topics import TopicNames

PID = "0123456789abcdef0123456789abcdef"


def test_every_placement_has_a_wal_and_segments_channel_read_by_the_others() -> None:
    topics = TopicNames("pfx")
    entry = PartitionEntry(
        b"", PID, servers=(Placement("node-1", 11), Placement("node-2", 12)), servers_joining=(Placement("node-3", 13),)
    )
    t = partition_topology(
        topics, "events", entry, epoch=4, leader_server_id="node-1", leader_placement_id=11, leader_alive=True
    )
    assert t.ingest.topic == f"pfx.ingest.{PID}"
    assert [r.ack_group for r in t.ingest.readers] == [f"pfx.leader.{PID}"]
    assert [c.topic for c in t.wal] == [f"pfx.wal.{PID}.{p}" for p in (11, 12, 13)]
    wal11 = t.wal[0]
    assert [(r.replica.placement_id, r.ack_group, r.consume_group) for r in wal11.readers] == [
        (12, f"pfx.replica.{PID}.12", f"pfx.consume.{PID}.12"),
        (13, f"pfx.replica.{PID}.13", f"pfx.consume.{PID}.13"),
    ]
    seg13 = t.segments[2]
    assert seg13.topic == f"pfx.segments.{PID}.13"
    assert [r.ack_group for r in seg13.readers] == [f"pfx.replica.{PID}.11", f"pfx.replica.{PID}.12"]
    assert [r.replica.role for r in seg13.readers] == ["servers", "servers"]
    assert len(t.channels()) == 7
