"""The compaction service against real Spark, Kafka, ZooKeeper and a storage node (the leader).

Minors published by the leader on its segments channel are folded by Spark into a major that the
leader's intake commits: root becomes the major (base = newest folded minor, included ids), reads
are unchanged, the backlog is 0. A major computed before a leader epoch change is refused by the
new term's intake: nothing is committed and its file is deleted; a recomputed one then commits.
With two replicas, the committed major reaches the follower by fast-forward and both read the same.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from spark_it_support import SparkCluster, spark_cluster

from producer import Producer, ProducerConfig
from shoal.ids import new_segment_id
from shoal.kafka.readers import read_manifests
from shoal.kafka.settings import KafkaSettings
from shoal.segments import read_segment
from shoal.segments.channel import chunk_count
from shoal.segments.parquet_io import segment_path
from shoal.topics import TopicNames
from shoal_app.cli.spark import spark_group
from shoal_app.schemas import validate
from shoal_app.testing.wait import wait_until
from spark_jobs.compaction.compute import write_major
from spark_jobs.compaction.policy import CompactionPolicy
from spark_jobs.compaction.publish import CHUNK_BYTES, publish_major
from spark_jobs.compaction.service import CompactionConfig, CompactionService
from storage_node.config import FlushPolicy
from storage_node.node import HeldPartition
from storage_node.replica import minor_backlog

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _held(sc: SparkCluster) -> HeldPartition:
    return next(iter(sc.nodes["node-1"].partitions().values()))


def _published(sc: SparkCluster) -> bool:
    """The leader's segments channel holds every segment of its chain (the publisher caught up)."""
    held = _held(sc)
    topic = TopicNames(sc.meta.topic_prefix).segments(held.partition_id, held.placement_id)
    try:
        seen = {
            cm.manifest.segment_id
            for cm in read_manifests(KafkaSettings(sc.meta.bootstrap_servers), topic, timeout_s=10)
        }
    except Exception:
        return False
    return {e.segment_id for e in held.replica.chain.since_latest_major()} <= seen


def _leader_epoch(sc: SparkCluster) -> int:
    """The epoch of the node's current, ready leader term (-1 between terms)."""
    held = _held(sc)
    if held.leader is None or not held.leader.ready.is_set() or held.election is None:
        return -1
    try:
        return held.election.check_writable().epoch
    except Exception:
        return -1


def _write_rounds(sc: SparkCluster, rounds: range, *, delete: list[int] | None = None) -> None:
    config = ProducerConfig(sc.meta.connection)
    with Producer(config) as p:
        for i in rounds:
            before = len(_held(sc).replica.chain.since_latest_major())
            p.write(sc.table.name, [{"k": k, "v": f"r{i}", "n": i} for k in range(i * 5, i * 5 + 10)])
            p.sync(60)
            assert wait_until(lambda b=before: len(_held(sc).replica.chain.since_latest_major()) > b, 60)
        if delete:
            before = len(_held(sc).replica.chain.since_latest_major())
            p.delete(sc.table.name, [{"k": k} for k in delete])
            p.sync(60)
            assert wait_until(lambda: len(_held(sc).replica.chain.since_latest_major()) > before, 60)
    assert wait_until(lambda: _published(sc), 60)


def test_compaction_commits_a_major_and_refuses_a_stale_one(
    spark: Any, cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    flush = FlushPolicy(max_rows=100_000, max_age_s=0.3)
    with spark_cluster(cluster.bootstrap_servers, zk_hosts, topic_prefix, tmp_path, splits=(), flush=flush) as sc:
        _write_rounds(sc, range(4), delete=[3, 7])
        held = _held(sc)
        chain = held.replica.chain
        folded = [e.segment_id for e in chain.since_latest_major()]
        assert minor_backlog(held.replica) == len(folded) - 1 >= 4
        before = sc.scan()
        assert 3 not in before.column("k").to_pylist() and before.num_rows == 23

        args = ["compact", "--once", "--table", sc.table.name, "--min-minors", "3", "-o", "json"]
        res = CliRunner().invoke(spark_group, args, env=sc.env)  # `shoal spark compact --once`, in this session
        assert res.exit_code == 0, res.output
        outcomes = json.loads(res.output[res.output.index("[") :])
        validate("cli-spark-compact", outcomes)
        assert [o["committed"] for o in outcomes] == [True], outcomes
        assert outcomes[0]["folded"] == len(folded) and outcomes[0]["base_segment_id"] == folded[-1]
        # local_max_bytes=0: this test computes its major with a Spark job; the next one takes the local path
        config = CompactionConfig(sc.meta, CompactionPolicy(min_minors=3), table=sc.table.name, local_max_bytes=0)
        with CompactionService(spark, config) as service:
            major = held.replica.chain.get(outcomes[0]["segment_id"])
            assert major is not None and major.is_major and held.replica.chain.root == major.segment_id
            assert (
                major.base_segment_id == folded[-1] and list(major.included_segment_ids[: len(folded)]) == folded[::-1]
            )
            assert major.epoch == outcomes[0]["epoch"]
            assert minor_backlog(held.replica) == 0
            assert sc.scan() == before
            rows = read_segment(held.replica.directory, major.segment_id)
            assert rows.num_rows == 25  # one version per key, tombstones kept (not a full compaction)
            assert sorted(rows.filter(pc.field("_shoal_deleted")).column("k").to_pylist()) == [3, 7]
            assert service.run_once() == []  # nothing left to compact

            # a major computed in epoch E, then the leader changes (epoch E+1): refused, nothing committed
            _write_rounds(sc, range(4, 7))
            service.refresh()
            stale = service.prepare(held.partition_id, force=True)
            assert stale is not None
            old_epoch = stale.manifest.epoch
            assert held.election is not None
            held.election.resign()
            assert wait_until(lambda: _leader_epoch(sc) > old_epoch, 90)
            new = _held(sc)
            assert new.intake is not None and new.intake.ready.wait(30)
            root = new.replica.chain.root
            service.publish(stale)
            assert wait_until(lambda: new.intake is not None and new.intake.stats.conflicts == 1, 60)
            assert new.replica.chain.root == root and stale.manifest.segment_id not in new.replica.chain
            assert not segment_path(new.replica.directory, stale.manifest.segment_id).exists()
            assert new.intake.stats.committed == 0

            # recomputed in the new epoch, it commits
            assert wait_until(lambda: _published(sc), 60)
            service.refresh()
            fresh = service.prepare(new.partition_id, force=True)
            assert fresh is not None and fresh.manifest.epoch > old_epoch
            outcome = service.publish(fresh)
            assert service.wait_committed(new.partition_id, outcome.segment_id, 60)
            assert new.replica.chain.root == outcome.segment_id
            assert sc.scan().num_rows == 38

            # bytes that do not match the manifest never become a segment
            forged = dataclasses.replace(
                fresh.manifest, segment_id=new_segment_id(), base_segment_id=outcome.segment_id
            )
            junk = tmp_path / "junk.parquet"
            junk.write_bytes(b"x" * forged.size_bytes)
            publish_major(sc.meta.kafka, TopicNames(sc.meta.topic_prefix), forged, junk)
            assert wait_until(lambda: new.intake is not None and new.intake.stats.rejected == 1, 60)
            assert "sha256" in str(new.intake.stats.last_error) and new.replica.chain.root == outcome.segment_id
            assert not segment_path(new.replica.directory, forged.segment_id).exists()

            # a major whose rows are not the merge of what it replaces (one row lost: its bytes match
            # its manifest) is refused, and nothing changes
            lost = read_segment(new.replica.directory, outcome.segment_id).replace_schema_metadata(None).slice(1)
            written = write_major(tmp_path, new_segment_id(), lost, sc.table)
            short = dataclasses.replace(
                fresh.manifest,
                segment_id=written.segment_id,
                base_segment_id=outcome.segment_id,
                checksum=written.sha256,
                size_bytes=written.size_bytes,
                row_count=written.row_count,
                chunk_count=chunk_count(written.size_bytes, CHUNK_BYTES),
            )
            publish_major(sc.meta.kafka, TopicNames(sc.meta.topic_prefix), short, written.path)
            assert wait_until(lambda: new.intake is not None and new.intake.stats.wrong_content == 1, 60)
            assert new.intake.stats.rejected == 2 and new.intake.stats.committed == 1
            assert "1 version(s) missing" in str(new.intake.stats.last_error)
            assert new.replica.chain.root == outcome.segment_id and sc.scan().num_rows == 38
            assert not segment_path(new.replica.directory, short.segment_id).exists()

            # the same major with the leader's file of a segment it replaces gone: the leader reads that
            # file again from its segments channel and checks (refuses) the major, never commits it unchecked
            assert wait_until(lambda: _published(sc), 60)
            replaced_file = segment_path(new.replica.directory, outcome.segment_id)
            kept = replaced_file.read_bytes()
            replaced_file.unlink()
            again = dataclasses.replace(short, segment_id=new_segment_id())
            publish_major(sc.meta.kafka, TopicNames(sc.meta.topic_prefix), again, written.path)
            assert wait_until(lambda: new.intake is not None and new.intake.stats.wrong_content == 2, 60)
            assert new.intake.stats.restored == 1 and new.intake.stats.committed == 1
            assert replaced_file.read_bytes() == kept and new.replica.chain.root == outcome.segment_id
            assert sc.scan().num_rows == 38


def test_a_committed_major_reaches_the_follower_by_fast_forward(
    spark: Any, cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    from metadata.table import Column, ColumnType, TableDefinition

    table = TableDefinition(
        "events",
        (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING), Column("n", ColumnType.INT64)),
        ("k",),
        "k",
        2,
    )
    flush = FlushPolicy(max_rows=100_000, max_age_s=0.3)
    with spark_cluster(
        cluster.bootstrap_servers,
        zk_hosts,
        topic_prefix,
        tmp_path,
        splits=(),
        flush=flush,
        nodes=("node-1", "node-2"),
        table=table,
    ) as sc:

        def roles() -> tuple[HeldPartition, HeldPartition]:
            helds = [next(iter(n.partitions().values())) for n in sc.nodes.values()]
            lead = [h for h in helds if h.leader is not None and h.leader.ready.is_set()]
            return lead[0], next(h for h in helds if h is not lead[0])

        leader, follower = roles()
        config = ProducerConfig(sc.meta.connection)
        with Producer(config) as p:
            for i in range(4):
                before = len(leader.replica.chain.since_latest_major())
                p.write(sc.table.name, [{"k": k, "v": f"r{i}", "n": i} for k in range(i * 5, i * 5 + 10)])
                p.sync(60)
                assert wait_until(lambda b=before: len(leader.replica.chain.since_latest_major()) > b, 60)
        root = leader.replica.chain.root
        assert wait_until(lambda: follower.replica.chain.root == root, 90), "the follower never caught up"
        config2 = CompactionConfig(sc.meta, CompactionPolicy(min_minors=2), table=sc.table.name)
        with CompactionService(spark, config2) as service:
            outcomes = service.run_once()
        assert [o.committed for o in outcomes] == [True], outcomes
        major = outcomes[0].segment_id
        assert wait_until(lambda: follower.replica.chain.root == major, 90), "the major never reached the follower"
        assert follower.replica.chain.get(major).is_major  # type: ignore[union-attr]
        assert follower.replica.scan().sort_by("k") == leader.replica.scan().sort_by("k")
