"""Segment garbage collection on three real storage nodes (DESIGN.md section 5; seed 000 section 3.5).

A major is committed through the leader's ``replica.commit_major`` (computed in process, without
Spark). Followers delete the minors it folds as soon as the major is durable on them; the leader
deletes them only once every follower acked the major on its segments channel (a stopped follower
holds them back); reads are unchanged and ``verify`` agrees; the segments channel is truncated to
the major's manifest, the latest major every replica acked. A file that a scan is reading is
unlinked only when that scan ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from node_it_support import make_table, produce_rows, rows

from metadata.client import MetadataClient, MetadataConfig
from shoal.ids import new_segment_id
from shoal.kafka.indexes import channel_indexes
from shoal.kafka.settings import KafkaSettings
from shoal.segments import SegmentRecord, lww_merge, read_segment, write_segment
from shoal.segments.compaction import compaction_entry, segments_to_compact
from shoal.segments.parquet_io import segment_path
from shoal.topics import TopicNames
from shoal_app.cli.verify import verify_table
from shoal_app.testing.wait import wait_until
from storage_node.config import FlushPolicy, NodeConfig
from storage_node.node import HeldPartition, StorageNode

pytestmark = pytest.mark.integration

NODES = ("node-1", "node-2", "node-3")


def _start(meta: MetadataConfig, server_id: str, base: Path) -> StorageNode:
    config = NodeConfig(
        server_id, base / server_id, meta.connection, flush=FlushPolicy(max_rows=20, max_age_s=1.0), table_poll_s=0.2
    )
    node = StorageNode(config, metadata=meta)
    thread = threading.Thread(target=node.run, daemon=True, name=f"node-{server_id}")
    thread.start()
    node._test_thread = thread  # type: ignore[attr-defined]
    assert node.ready.wait(60)
    return node


def _stop(node: StorageNode) -> None:
    node.stop()
    node._test_thread.join(60)  # type: ignore[attr-defined]


@contextmanager
def _nodes(meta: MetadataConfig, base: Path) -> Iterator[dict[str, StorageNode]]:
    nodes: dict[str, StorageNode] = {}
    try:
        for n in NODES:
            nodes[n] = _start(meta, n, base)
        yield nodes
    finally:
        for node in nodes.values():
            node.stop()
        for node in nodes.values():
            node._test_thread.join(60)  # type: ignore[attr-defined]


def _held(nodes: dict[str, StorageNode], pid: str) -> dict[str, HeldPartition]:
    return {n: node.partitions()[pid] for n, node in nodes.items() if pid in node.partitions()}


def _leader(nodes: dict[str, StorageNode], pid: str) -> tuple[str, HeldPartition] | None:
    for n, h in _held(nodes, pid).items():
        if h.leader is not None and h.leader.ready.is_set() and not h.leader.stopped.is_set():
            return n, h
    return None


def _compact(held: HeldPartition) -> tuple[str, list[str]]:
    """Fold the leader's chain into a major and commit it through ``replica.commit_major``."""
    replica = held.replica
    assert held.election is not None
    epoch = held.election.check_writable().epoch
    chain = replica.chain
    folded = [e.segment_id for e in segments_to_compact(chain)]
    assert len(folded) >= 3, folded
    parts = [read_segment(replica.directory, s).replace_schema_metadata(None) for s in folded]
    merged = lww_merge(parts, replica.key_columns)
    sid = new_segment_id()
    written = write_segment(replica.directory, sid, merged, key_columns=replica.key_columns)
    entry = compaction_entry(chain, sid, placement_id=replica.placement_id, epoch=epoch)
    record = SegmentRecord(
        entry=entry, sha256=written.sha256, row_count=written.row_count, size_bytes=written.size_bytes
    )
    replica.commit_major(record, leader_epoch=epoch)
    assert held.leader is not None and held.leader.publisher is not None
    held.leader.publisher.wake()
    return sid, folded


def _chain_at_least(nodes: dict[str, StorageNode], pid: str, n: int) -> bool:
    lead = _leader(nodes, pid)
    return lead is not None and len(lead[1].replica.chain.since_latest_major()) >= n


def _summary(nodes: dict[str, StorageNode], pid: str) -> list[object]:
    out: list[object] = []
    for n, h in _held(nodes, pid).items():
        role = None if h.leader is None else (h.leader.role_state.value, h.leader.stats)
        follow = None if h.follower is None else (h.follower.leader_placement_id, h.follower.stats, h.follower.error)
        out.append((n, role, follow, h.replica.chain.root, len(h.replica.chain), h.replica.memtable.rows))
    return out


def _gone(held: HeldPartition, ids: list[str]) -> bool:
    chain = held.replica.chain
    return all(s not in chain and not segment_path(held.replica.directory, s).exists() for s in ids)


def _present(held: HeldPartition, ids: list[str]) -> bool:
    chain = held.replica.chain
    return all(s in chain and segment_path(held.replica.directory, s).exists() for s in ids)


def test_folded_minors_are_deleted_after_replication_and_the_segments_channel_is_truncated(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    table = make_table(replication_factor=3)
    topics = TopicNames(topic_prefix)
    with MetadataClient(meta) as client, _nodes(meta, tmp_path) as nodes:
        pid = client.coordinator.create_table(table, list(NODES), []).partitions[0].partition_id
        assert wait_until(lambda: _leader(nodes, pid) is not None, 90)
        for batch in range(4):  # four segments (flush every 20 rows); batch 3 overwrites keys 0..24
            keys = list(range(batch * 25, batch * 25 + 25)) if batch < 3 else list(range(25))
            produce_rows(bs, topics.ingest(pid), rows(table, keys, [f"v{batch}-{k}" for k in keys]))
            # one segment per batch (the leader would fold batches consumed together into one)
            assert wait_until(partial(_chain_at_least, nodes, pid, batch + 1), 60), _summary(nodes, pid)

        def settled() -> bool:
            lead = _leader(nodes, pid)
            if lead is None or lead[1].replica.memtable.rows:
                return False
            held = _held(nodes, pid)
            roots = {h.replica.chain.root for h in held.values()}
            return len(held) == 3 and len(roots) == 1 and len(lead[1].replica.chain.since_latest_major()) >= 4

        assert wait_until(settled, 120), _summary(nodes, pid)
        lead = _leader(nodes, pid)
        assert lead is not None
        leader_id, leader = lead
        before = {n: h.replica.scan().sort_by("k").to_pylist() for n, h in _held(nodes, pid).items()}
        assert all(len(v) == 75 for v in before.values())

        # one follower is down: the leader must keep the folded files until it acked the major
        late_id = next(n for n in NODES if n != leader_id)
        other_id = next(n for n in NODES if n not in (leader_id, late_id))
        _stop(nodes.pop(late_id))
        major, folded = _compact(leader)
        other = _held(nodes, pid)[other_id]
        assert wait_until(lambda: other.replica.chain.root == major and _gone(other, folded), 60)
        assert other.replica.scan().sort_by("k").to_pylist() == before[other_id]
        # the leader keeps them while a follower has not acked the major: several GC rounds pass (5 s each)
        publisher = leader.leader.publisher if leader.leader is not None else None
        assert publisher is not None
        time.sleep(12)
        assert _present(leader, folded), "the leader deleted folded segments before every follower acked the major"
        assert publisher.stats.deleted == 0

        # a scan pins the files it reads: deletion of a pinned file waits until the scan ends
        pinned = folded[1]
        with leader.replica.reading([pinned]):
            nodes[late_id] = _start(meta, late_id, tmp_path)
            assert wait_until(lambda: pinned not in leader.replica.chain, 90), "the leader never deleted the minors"
            assert segment_path(leader.replica.directory, pinned).exists()
        assert not segment_path(leader.replica.directory, pinned).exists()

        held = _held(nodes, pid)
        assert wait_until(lambda: all(h.replica.chain.root == major and _gone(h, folded) for h in held.values()), 90)
        # the publisher counts them once delete_segments returned: its chain entries go first, then
        # the files, so the chain above may show them gone a moment before the count does
        assert wait_until(lambda: publisher.stats.deleted == len(folded), 30), publisher.stats
        for n, h in _held(nodes, pid).items():
            assert h.replica.scan().sort_by("k").to_pylist() == before[n]
        report = verify_table(client, "events")
        assert report["ok"], report
        assert all(p["agree"] and p["chains_equal"] for p in report["partitions"]), report

        # the segments channel is truncated to the major's manifest: the latest major every replica acked
        seg_topic = topics.segments(pid, leader.placement_id)
        major_offset = publisher.manifest_offsets[major]
        assert major_offset > 0
        assert wait_until(lambda: channel_indexes(KafkaSettings(bs), seg_topic).tail == major_offset, 60), (
            channel_indexes(KafkaSettings(bs), seg_topic),
            major_offset,
        )
