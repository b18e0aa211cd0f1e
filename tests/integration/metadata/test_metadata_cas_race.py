"""Many clients race METADATA changes on one table through the real ZooKeeper + Kafka."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from metadata_it_support import close_client, make_store, make_table, new_client

from metadata.coordinator import MetadataCoordinator
from metadata.errors import StaleTxnidError
from metadata.metadata_file import Placement
from metadata.operations import JoinServer
from metadata.zk_client import cas_retry
from shoal.errors import MetadataConflictError

pytestmark = pytest.mark.integration

N_CLIENTS = 8
ATTEMPTS = 6


def test_racing_clients_commit_each_sequence_once(cluster: Any, zk: Any, zk_hosts: str, topic_prefix: str) -> None:
    with make_store(cluster, topic_prefix) as store:
        coord = MetadataCoordinator(zk, store)
        created = coord.create_table(make_table("race", rf=1), ["node-1"])
        pid = created.partitions[0].partition_id

    wins: list[tuple[int, str, str]] = []  # (sequence, txnid, joined server)
    losses: list[Exception] = []
    other_errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(N_CLIENTS)

    def worker(n: int) -> None:
        client = new_client(zk_hosts)
        try:
            with make_store(cluster, topic_prefix) as st:
                c = MetadataCoordinator(client, st, retry=cas_retry(max_tries=1))
                barrier.wait(timeout=60)
                for i in range(ATTEMPTS):
                    base = c.current("race")
                    server = f"w{n}-{i}"
                    placement = Placement(server, c.placements.allocate_one())
                    try:
                        new = c.commit("race", JoinServer(pid, placement), base.txnid)
                    except MetadataConflictError as exc:
                        with lock:
                            losses.append(exc)
                        continue
                    with lock:
                        wins.append((new.sequence, new.txnid, server))
        except BaseException as exc:
            with lock:
                other_errors.append(exc)
        finally:
            close_client(client)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(N_CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not other_errors, other_errors
    assert len(wins) + len(losses) == N_CLIENTS * ATTEMPTS
    assert len(losses) > 0, "the race should produce conflicts"

    # each sequence committed exactly once, no gaps
    seqs = sorted(s for s, _, _ in wins)
    assert seqs == list(range(2, 2 + len(wins)))

    with make_store(cluster, topic_prefix) as store:
        coord = MetadataCoordinator(zk, store)
        chain = coord.history("race")
        assert [f.sequence for f in chain] == list(range(1, 2 + len(wins)))
        assert {(f.sequence, f.txnid) for f in chain[1:]} == {(s, t) for s, t, _ in wins}
        # no committed change is lost: every winner's server is in the current file
        current = coord.current("race")
        joined = {p.server_id for p in current.partitions[0].servers_joining}
        assert joined == {srv for _, _, srv in wins}
        # every stored file that is not in the chain was aborted and tombstoned; none is current
        committed = {f.txnid for f in chain}
        records = store.raw_records("race")
        aborted = set(records) - committed
        cas_losers = [e for e in losses if not isinstance(e, StaleTxnidError)]
        assert len(aborted) == len(cas_losers)
        assert all(records[t] is None for t in aborted)
        assert all(records[t] is not None for t in committed)
        assert coord.head("race").metadata_txnid in committed


def test_stale_txnid_is_refused_and_stores_nothing(cluster: Any, zk: Any, topic_prefix: str) -> None:
    with make_store(cluster, topic_prefix) as store:
        coord = MetadataCoordinator(zk, store)
        f1 = coord.create_table(make_table("stale", rf=1), ["node-1"])
        pid = f1.partitions[0].partition_id
        f2 = coord.join("stale", pid, "node-2")
        assert f2.sequence == 2
        before = dict(store.raw_records("stale"))
        with pytest.raises(StaleTxnidError):
            coord.commit("stale", JoinServer(pid, Placement("node-3", 10_000)), f1.txnid)
        assert store.raw_records("stale") == before
        assert coord.head("stale").metadata_txnid == f2.txnid
