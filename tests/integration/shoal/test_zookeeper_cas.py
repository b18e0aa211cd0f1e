"""kazoo compare-and-swap against the real ZooKeeper."""

from __future__ import annotations

import threading

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError

pytestmark = pytest.mark.integration


def test_stale_version_is_refused(zk: KazooClient) -> None:
    zk.create("/counter", b"0")
    _, stat = zk.get("/counter")
    zk.set("/counter", b"1", version=stat.version)
    with pytest.raises(BadVersionError):
        zk.set("/counter", b"2", version=stat.version)
    value, stat2 = zk.get("/counter")
    assert value == b"1"
    assert stat2.version == stat.version + 1


def _cas_increment(client: KazooClient, path: str, times: int, conflicts: list[int]) -> None:
    for _ in range(times):
        while True:
            value, stat = client.get(path)
            try:
                client.set(path, str(int(value) + 1).encode(), version=stat.version)
                break
            except BadVersionError:
                conflicts.append(1)


def test_concurrent_increments_from_two_clients_lose_no_update(zk: KazooClient, zk_hosts: str) -> None:
    zk.create("/counter", b"0")
    clients = [KazooClient(hosts=zk_hosts, timeout=10) for _ in range(2)]
    for c in clients:
        c.start(timeout=30)
    conflicts: list[int] = []
    try:
        threads = [threading.Thread(target=_cas_increment, args=(c, "/counter", 100, conflicts)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        for c in clients:
            c.stop()
            c.close()
    value, stat = zk.get("/counter")
    assert int(value) == 200
    assert stat.version == 200  # one successful CAS per increment, none lost, none doubled


def test_chroot_isolates_tests(zk: KazooClient, zk_hosts: str) -> None:
    assert "/shoal-test/" in zk_hosts
    zk.create("/only-here", b"x")
    assert zk.get_children("/") == ["only-here"]
