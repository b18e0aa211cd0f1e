"""A partition leader on real Kafka: exactly-once ingest -> WAL, GTIDs, segments, scans, deadletter,
and the producer's ``sync()`` reporting the messages the leader refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from node_it_support import LeaderFixture, committed, produce, produce_rows, read_all, rows

from metadata.metadata_file import Placement
from metadata.operations import create_file
from producer import MessagesRefusedError, Producer, ProducerConfig
from shoal.kafka.settings import ConnectionSettings, KafkaSettings
from shoal.wire.arrow_ipc import encode_batch
from shoal.wire.records import GENESIS_HASH, WalRecord, verify_chain
from shoal_app.testing.wait import wait_until
from storage_node.config import LeaderConfig
from storage_node.replica import KeyFilter, PartitionReplica
from storage_node.roles.leader import PartitionLeader

pytestmark = pytest.mark.integration


def test_leader_writes_wal_in_transactions_and_scans(cluster: Any, topic_prefix: str, tmp_path: Path) -> None:
    f = LeaderFixture(cluster.bootstrap_servers, topic_prefix, tmp_path, max_rows=5)
    leader = f.start(epoch=3)
    try:
        t = f.table
        produce_rows(
            cluster.bootstrap_servers,
            f.ingest,
            rows(t, [1, 2, 3], ["a", "b", "c"]),
            rows(t, [2, 4], ["b2", "d"]),  # upsert of 2
            rows(t, [3], [None], deleted=True),  # delete of 3
        )
        assert wait_until(lambda: leader.stats.rows == 6, 30), leader.stats
        scan = leader.replica.scan().sort_by("k").to_pylist()
        assert scan == [{"k": 1, "v": "a"}, {"k": 2, "v": "b2"}, {"k": 4, "v": "d"}]
        assert leader.replica.scan(KeyFilter(key=2)).to_pylist() == [{"k": 2, "v": "b2"}]
        assert leader.replica.scan(KeyFilter(low=2, high=4)).column("k").to_pylist() == [2]
        # the memtable passed max_rows=5: a segment exists, and reads still give the same answer
        assert wait_until(lambda: leader.stats.segments >= 1, 10)
        assert leader.replica.chain.root is not None
        assert leader.replica.scan().sort_by("k").to_pylist() == scan
        # WAL: one record per accepted ingest message, consecutive seq per row, unbroken hash chain
        wal = [WalRecord.from_bytes(m.value()) for m in read_all(cluster.bootstrap_servers, f.wal())]
        assert [(r.gtid.epoch, r.gtid.seq, r.row_count) for r in wal] == [(3, 0, 3), (3, 3, 2), (3, 5, 1)]
        verify_chain(wal, prev_hash=GENESIS_HASH)
        # ingest offsets committed in the same transactions
        assert wait_until(
            lambda: committed(cluster.bootstrap_servers, f.topics.leader_group(f.partition_id), f.ingest) == 3, 10
        )
    finally:
        leader.stop()


def test_bad_records_go_to_deadletter_and_the_partition_keeps_going(
    cluster: Any, topic_prefix: str, tmp_path: Path
) -> None:
    f = LeaderFixture(cluster.bootstrap_servers, topic_prefix, tmp_path)
    leader = f.start(max_ingest_bytes=64 * 1024)
    try:
        import pyarrow as pa

        t = f.table
        wrong = pa.table({"k": pa.array([9], pa.int32()), "v": ["x"], "_shoal_deleted": [False]})
        big = rows(t, list(range(20_000)), ["y" * 20] * 20_000)
        produce(
            cluster.bootstrap_servers,
            f.ingest,
            [
                encode_batch(rows(t, [1], ["ok1"])),
                b"\x00garbage\xff",
                encode_batch(wrong),
                encode_batch(big, compression=None),
                None,
                encode_batch(rows(t, [2], ["ok2"])),
            ],
        )
        assert wait_until(lambda: leader.stats.rows == 2 and leader.stats.deadlettered == 4, 30), leader.stats
        assert leader.replica.scan().sort_by("k").to_pylist() == [{"k": 1, "v": "ok1"}, {"k": 2, "v": "ok2"}]
        dead = read_all(cluster.bootstrap_servers, f.topics.deadletter)
        reasons = [dict(m.headers())["shoal.reason"].decode() for m in dead]
        assert reasons == ["undecodable", "schema_mismatch", "oversized", "undecodable"]
        offsets = [int(dict(m.headers())["shoal.source.offset"]) for m in dead]
        assert offsets == [1, 2, 3, 4]
        assert {dict(m.headers())["shoal.source.topic"].decode() for m in dead} == {f.ingest}
        assert leader.role_state.value == "LEADING"
    finally:
        leader.stop()


def test_sync_reports_the_messages_the_leader_refused(cluster: Any, topic_prefix: str, tmp_path: Path) -> None:
    """A leader that takes smaller messages than the producer sends refuses one to deadletter, in the
    transaction that moves the committed offset past it: sync() must say so, not count it accepted."""
    import secrets

    f = LeaderFixture(cluster.bootstrap_servers, topic_prefix, tmp_path)
    file = create_file(f.table, [(Placement("node-1", 1),)])
    f.partition_id = file.partitions[0].partition_id
    leader = f.start(max_ingest_bytes=64 * 1024)
    config = ProducerConfig(
        ConnectionSettings.plain(cluster.bootstrap_servers, "127.0.0.1:1", topic_prefix=topic_prefix),
        watch_metadata=False,
    )
    # about 300 KB of hex digits: about 150 KB once compressed, above the leader's 64 KiB, below the producer's 1 MB
    big = [{"k": 1000 + i, "v": secrets.token_hex(100)} for i in range(1500)]
    try:
        with Producer(config, map_loader=lambda _t: file) as p, Producer(config, map_loader=lambda _t: file) as other:
            p.write("events", [{"k": 1, "v": "ok1"}])
            p.sync(60)  # nothing refused
            other.write("events", big)  # another producer's refusal is not this one's
            p.write("events", [{"k": 2, "v": "ok2"}])
            refused = p.write("events", big).futures[0].result(60).offset
            p.write("events", [{"k": 3, "v": "ok3"}])
            with pytest.raises(MessagesRefusedError) as info:
                p.sync(60)
            (refusal,) = info.value.refusals
            assert (refusal.table, refusal.partition_id, refusal.topic, refusal.offset, refusal.reason) == (
                "events",
                f.partition_id,
                f.ingest,
                refused,
                "oversized",
            ), refusal
            p.sync(60)  # each refusal is reported once
            with pytest.raises(MessagesRefusedError) as theirs:
                other.sync(60)
            assert [r.reason for r in theirs.value.refusals] == ["oversized"]
        assert leader.stats.deadlettered == 2
        assert sorted(leader.replica.scan().column("k").to_pylist()) == [1, 2, 3]
    finally:
        leader.stop()


def test_a_partition_metadata_no_longer_lists_is_led_with_ingest_paused(
    cluster: Any, topic_prefix: str, tmp_path: Path
) -> None:
    """A split parent whose leadership is granted again after SPLIT_FINALIZE (its node's METADATA not
    updated yet) must not accept rows: no child would ever get them. The straggler forwarder takes
    them from the ingest topic instead; the leader's group offset stays where it was."""
    f = LeaderFixture(cluster.bootstrap_servers, topic_prefix, tmp_path)
    asked: list[bool] = []

    def listed() -> bool:
        asked.append(False)
        return False

    first = f.start()
    produce_rows(cluster.bootstrap_servers, f.ingest, rows(f.table, [1], ["before"]))
    assert wait_until(lambda: first.stats.rows == 1, 30)
    first.stop()
    replica = PartitionReplica(f.table, f.partition_id, 1, f.data_dir)
    leader = PartitionLeader(
        replica, LeaderConfig(KafkaSettings(f.bootstrap), f.topics, f.flush), lambda: 2, listed=listed
    ).start()
    try:
        leader.wait_ready(60)
        produce_rows(cluster.bootstrap_servers, f.ingest, rows(f.table, [2], ["after"]))
        assert wait_until(leader.ingest_quiesced.is_set, 30)
        assert not wait_until(lambda: leader.stats.rows > 0, 3)
        assert asked and leader.ingest_paused.is_set()
        assert committed(cluster.bootstrap_servers, f.topics.leader_group(f.partition_id), f.ingest) == 1
        assert replica.scan().column("k").to_pylist() == [1]
    finally:
        leader.stop()
