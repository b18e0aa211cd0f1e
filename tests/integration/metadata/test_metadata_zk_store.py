"""Tables, the commit, placements, security, notification and catch-up on real ZooKeeper + Kafka."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer
from kazoo.exceptions import NoAuthError
from metadata_it_support import close_client, make_store, make_table, new_client

from metadata.coordinator import MetadataCoordinator
from metadata.discovery import HeldReplica, ReplicaState
from metadata.errors import (
    MetadataDecodeError,
    MetadataFileNotFoundError,
    MetadataNotCaughtUpError,
    TableExistsError,
    UnknownTableError,
)
from metadata.keyspace import UNBOUNDED, KeyRange, Keyspace
from metadata.metadata_file import MetadataFile, PartitionEntry, new_txnid, store_key
from metadata.metadata_servers import MetadataServer
from metadata.notify import TableWatcher, discovery_listener
from metadata.partition_map import CachedPartitionMap
from metadata.placements import PlacementAllocator
from metadata.security import ZkSecurity
from metadata.zk_layout import TableHead, ZkLayout
from shoal.errors import InvalidIdError, SchemaError
from shoal_app.cli.table import table_group
from shoal_app.schemas import validate
from shoal_app.testing.wait import wait_until


def _no_rows_acked(entry: PartitionEntry) -> dict[int, tuple[int, int] | None]:
    """SPLIT_FINALIZE evidence for a parent that accepted no row: every child placement, nothing to ack."""
    return {p.placement_id: None for p in entry.split_servers_low + entry.split_servers_high}


pytestmark = pytest.mark.integration
U = Keyspace.UINT64.encode


def test_create_describe_list_history_and_bad_input(cluster: Any, zk: Any, zk_hosts: str, topic_prefix: str) -> None:
    with make_store(cluster, topic_prefix) as store:
        coord = MetadataCoordinator(zk, store)
        f = coord.create_table(make_table("orders", rf=2), ["node-1", "node-2", "node-3"], [U(100), U(200)])
        assert f.sequence == 1 and len(f.partitions) == 3
        head = coord.head("orders")
        assert head.metadata_txnid == f.txnid and head.metadata_sequence == 1
        assert 1 <= len(head.metadata_servers) <= 3
        assert coord.current("orders") == f
        assert coord.list_tables() == ["orders"]
        with pytest.raises(TableExistsError):
            coord.create_table(make_table("orders", rf=1), ["node-1"])
        with pytest.raises(UnknownTableError):
            coord.current("nope")
        with pytest.raises(UnknownTableError):
            coord.join("nope", f.partitions[0].partition_id, "node-4")
        with pytest.raises(InvalidIdError):
            coord.head("../etc")
        pid = f.partitions[1].partition_id
        coord.split("orders", pid, U(150), ["node-1", "node-2"], ["node-2", "node-3"])
        coord.finalize_split("orders", pid, acked=_no_rows_acked(coord.current("orders").partition(pid)))
        assert [f.change.value for f in coord.history("orders")] == [
            "CREATE_TABLE",
            "SPLIT_PARTITION",
            "FINALIZE_SPLIT",
        ]

    conn = ["--zk", zk_hosts, "--bootstrap-servers", cluster.bootstrap_servers, "--topic-prefix", topic_prefix]
    runner = CliRunner()
    res = runner.invoke(table_group, ["describe", "orders", "--output", "json", *conn])
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    validate("cli-table-describe", info)
    assert info["metadata_sequence"] == 3 and len(info["partitions"]) == 4
    assert [p["begin"] for p in info["partitions"]] == [None, 100, 150, 200]
    assert all(p["epoch"] == 0 and p["leader"] is None for p in info["partitions"])
    assert all(s["placement_id"] > 0 for p in info["partitions"] for s in p["servers"])
    res = runner.invoke(table_group, ["describe", "orders", *conn])
    assert res.exit_code == 0 and "metadata txnid" in res.output
    res = runner.invoke(table_group, ["list", *conn])
    assert res.exit_code == 0 and res.output.startswith("orders")
    res = runner.invoke(table_group, ["history", "orders", "--output", "json", *conn])
    assert [r["sequence"] for r in json.loads(res.output)] == [1, 2, 3]
    validate("cli-table-history", json.loads(res.output))
    res = runner.invoke(table_group, ["describe", "missing", *conn])
    assert res.exit_code != 0 and "UnknownTableError" in res.output
    res = runner.invoke(
        table_group,
        [
            "create",
            "cli_t",
            "--column",
            "id:string:not_null",
            "--column",
            "x:int64",
            "--primary-key",
            "id",
            "--replication-factor",
            "1",
            "--server",
            "node-1",
            "--split-point",
            "m",
            "--output",
            "json",
            *conn,
        ],
    )
    assert res.exit_code == 0, res.output
    created = json.loads(res.output)  # the new table, as `table describe -o json` prints it
    validate("cli-table-describe", created)
    assert created["table"]["name"] == "cli_t" and [p["begin"] for p in created["partitions"]] == [None, "m"]
    res = runner.invoke(
        table_group,
        [
            "create",
            "cli_t",
            "--column",
            "id:string:not_null",
            "--primary-key",
            "id",
            "--replication-factor",
            "1",
            "--server",
            "node-1",
            *conn,
        ],
    )
    assert res.exit_code != 0 and "TableExistsError" in res.output
    with pytest.raises(SchemaError):
        make_table("bad", rf=0)


def test_a_lost_placement_counter_starts_above_every_stored_placement(cluster: Any, zk: Any, topic_prefix: str) -> None:
    """ZooKeeper lost the counter (and the table znodes) while the METADATA files in Kafka were kept:
    the counter is recreated above the highest stored id, so no placement id is handed out twice."""
    with make_store(cluster, topic_prefix) as store:
        coord = MetadataCoordinator(zk, store)
        coord.create_table(make_table("counted", rf=2), ["node-1", "node-2"])
        coord.join("counted", coord.current("counted").partitions[0].partition_id, "node-3")
        used = max(coord.current("counted").placement_ids())
        assert used >= 3
        zk.delete(coord.layout.placements)
        zk.delete(coord.layout.table("counted"))
        assert coord.list_tables() == []
        again = MetadataCoordinator(zk, store)
        assert again.placements.allocate_one() == used + 1


def test_undecodable_metadata_file_is_a_clear_error(cluster: Any, zk: Any, topic_prefix: str) -> None:
    with make_store(cluster, topic_prefix) as store:
        coord = MetadataCoordinator(zk, store)
        coord.create_table(make_table("broken", rf=1), ["node-1"])
        head = coord.head("broken")
        bad_txnid = new_txnid()
        prod = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        prod.produce(store.topic, key=store_key("broken", bad_txnid), value=b"\xc3\x01not avro", partition=0)
        assert prod.flush(30) == 0
        # point the znode at the garbage (as a buggy or hostile writer could)
        zk.set(coord.layout.table("broken"), TableHead("broken", bad_txnid, 2, head.metadata_servers).encode())
        with pytest.raises(MetadataDecodeError):
            coord.current("broken")
        # a txnid with no stored file at all
        zk.set(coord.layout.table("broken"), TableHead("broken", new_txnid(), 2, head.metadata_servers).encode())
        with pytest.raises(MetadataFileNotFoundError):
            coord.current("broken")
        zk.set(coord.layout.table("broken"), b"{not json")
        with pytest.raises(MetadataDecodeError):
            coord.head("broken")


def test_placement_ids_unique_under_contention(zk: Any, zk_hosts: str) -> None:
    results: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        client = new_client(zk_hosts)
        try:
            alloc = PlacementAllocator(client)
            got = [i for _ in range(20) for i in alloc.allocate(3)]
            with lock:
                results.extend(got)
        finally:
            close_client(client)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 6 * 20 * 3
    assert sorted(results) == list(range(1, len(results) + 1))
    assert PlacementAllocator(zk).allocate_one() == len(results) + 1


def test_digest_acls_on_everything_created(cluster: Any, zk: Any, zk_hosts: str, topic_prefix: str) -> None:
    sec = ZkSecurity("shoal", "pa55word")
    secured = new_client(zk_hosts, auth_data=sec.auth_data(), default_acl=sec.acls())
    try:
        with make_store(cluster, topic_prefix) as store:
            coord = MetadataCoordinator(secured, store, security=sec)
            f = coord.create_table(make_table("secure", rf=1), ["node-1"])
            coord.join("secure", f.partitions[0].partition_id, "node-2")
        lay = coord.layout
        for path in (lay.root, lay.tables, lay.table("secure"), lay.placements):
            acls, _ = secured.get_acls(path)
            assert [a.id.scheme for a in acls] == ["digest"], path
        # an unauthenticated client (the plain fixture) can neither read nor write
        with pytest.raises(NoAuthError):
            zk.get(lay.table("secure"))
        with pytest.raises(NoAuthError):
            zk.set(lay.table("secure"), b"x")
    finally:
        # the fixture's unauthenticated client could not remove digest-protected znodes
        secured.delete(ZkLayout().root, recursive=True)
        close_client(secured)


def test_watcher_and_discovery_catch_up_after_downtime(cluster: Any, zk: Any, topic_prefix: str) -> None:
    with make_store(cluster, topic_prefix) as store:
        coord = MetadataCoordinator(zk, store)
        f1 = coord.create_table(make_table("catch", rf=1), ["node-1"])
        pid = f1.partitions[0].partition_id
        p1 = f1.partitions[0].servers[0]

        seen: list[MetadataFile] = []
        w = TableWatcher(zk, store, "catch", seen.append).start()
        assert w.wait_for_sequence(1, 30)
        w.stop()  # the node goes down

        coord.force_join("catch", pid, "node-2")  # 2 (a join still in LOAD would refuse the split)
        f3 = coord.split("catch", pid, U(500), ["node-1"], ["node-2"])  # 3
        f4 = coord.finalize_split("catch", pid, acked=_no_rows_acked(f3.partition(pid)))  # 4
        assert f4.sequence == 4

        # node-1 comes back: it learns of every missed commit, in order, and discovers its states
        discoveries: dict[int, list] = {}
        held = [HeldReplica(pid, p1.placement_id, KeyRange(UNBOUNDED, UNBOUNDED))]
        listener = discovery_listener("node-1", lambda: held, lambda f, d: discoveries.__setitem__(f.sequence, d))
        seen2: list[MetadataFile] = []

        def on_change(f: MetadataFile) -> None:
            seen2.append(f)
            listener(f)

        w2 = TableWatcher(zk, store, "catch", on_change, since_sequence=w.last_sequence).start()
        try:
            assert w2.wait_for_sequence(4, 30)
            assert [f.sequence for f in seen2] == [2, 3, 4]
            d2 = {d.partition_id: d.state for d in discoveries[2]}
            assert d2 == {pid: ReplicaState.LIVE}
            d3 = {d.partition_id: d.state for d in discoveries[3]}
            low_id = f3.partitions[0].split_partition_id_low
            high_id = f3.partitions[0].split_partition_id_high
            assert d3 == {pid: ReplicaState.LIVE, low_id: ReplicaState.LOAD}
            d4 = {d.partition_id: d.state for d in discoveries[4]}
            assert d4 == {pid: ReplicaState.UNLOAD, low_id: ReplicaState.LIVE}
            parent = next(d for d in discoveries[4] if d.partition_id == pid)
            assert {t.partition_id for t in parent.targets} == {low_id, high_id}
            # later commits keep arriving; a partition map fed by the watcher follows them
            cache = CachedPartitionMap(lambda: coord.current("catch"))
            w3 = TableWatcher(zk, store, "catch", cache.update).start()
            try:
                assert cache.lookup(600).partition_id == high_id
                coord.join("catch", high_id, "node-3")
                assert wait_until(lambda: cache.get().sequence == 5)
            finally:
                w3.stop()
        finally:
            w2.stop()
        assert not w2.errors


def test_metadata_server_join_leave_and_not_caught_up(cluster: Any, zk: Any, tmp_path: Any, topic_prefix: str) -> None:
    with make_store(cluster, topic_prefix) as store:
        coord = MetadataCoordinator(zk, store)
        f1 = coord.create_table(make_table("msrv", rf=1), ["node-1"], metadata_servers=["node-1"])
        pid = f1.partitions[0].partition_id
        ms = MetadataServer("node-9", coord, data_dir=tmp_path)
        head = ms.join("msrv")
        assert "node-9" in head.metadata_servers
        assert ms.serve("msrv").txnid == f1.txnid
        # three commits while node-9 is not watching
        for s in ("node-2", "node-3", "node-4"):
            coord.join("msrv", pid, s)
        with pytest.raises(MetadataNotCaughtUpError):
            ms.serve("msrv")
        with pytest.raises(MetadataNotCaughtUpError):
            ms.discover("msrv", "node-2", [])
        assert ms.catch_up("msrv").sequence == 4
        assert ms.serve("msrv").sequence == 4
        # restart from its data dir; the background watcher keeps it current
        ms2 = MetadataServer("node-9", coord, data_dir=tmp_path)
        assert ms2.local("msrv") is not None and ms2.local("msrv").sequence == 4  # type: ignore[union-attr]
        ms2.watch("msrv")
        try:
            coord.join("msrv", pid, "node-5")
            assert wait_until(lambda: ms2.local("msrv").sequence == 5)  # type: ignore[union-attr]
            states = {d.placement_id: d.state for d in ms2.discover("msrv", "node-5", [])}
            assert list(states.values()) == [ReplicaState.LOAD]
        finally:
            ms2.close()
        head = ms.leave("msrv")
        assert "node-9" not in head.metadata_servers
        with pytest.raises(Exception, match="not a metadata server"):
            ms.serve("msrv")
