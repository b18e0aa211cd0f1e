"""Helpers for the metadata integration tests (real ZooKeeper and Kafka from tests/conftest.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from metadata.coordinator import MetadataCoordinator
from metadata.store import KafkaFileStore, KafkaStoreConfig
from metadata.table import Column, ColumnType, TableDefinition


def make_store(cluster: Any, prefix: str) -> KafkaFileStore:
    return KafkaFileStore(KafkaStoreConfig(cluster.bootstrap_servers, topic_prefix=prefix))


def make_table(name: str = "events", rf: int = 1, keyspace: str = "uint64") -> TableDefinition:
    ktype = ColumnType.UINT64 if keyspace == "uint64" else ColumnType.STRING
    return TableDefinition(name, (Column("k", ktype, False), Column("v", ColumnType.STRING)), ("k",), "k", rf)


def new_client(zk_hosts: str, **kwargs: Any) -> KazooClient:
    client = KazooClient(hosts=zk_hosts, timeout=10.0, **kwargs)
    client.start(timeout=15)
    return client


def close_client(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()


def expire_session(client: KazooClient, zk_hosts: str, timeout: float = 60.0) -> None:
    """Really expire ``client``'s session on the server: attach a second client to the session and
    close it (the ZooKeeper FAQ / Curator KillSession technique); repeat until ``client`` sees LOST."""
    lost = threading.Event()

    def listener(state: str) -> bool:
        if state == KazooState.LOST:
            lost.set()
            return True
        return False

    client.add_listener(listener)
    deadline = time.monotonic() + timeout
    while not lost.is_set() and time.monotonic() < deadline:
        session_id, password = client.client_id
        other = KazooClient(hosts=zk_hosts, client_id=(session_id, password), timeout=10.0)
        other.start(timeout=15)
        other.stop()
        other.close()
        lost.wait(5)
    if not lost.is_set():
        raise AssertionError("could not expire the ZooKeeper session")


def coordinator(zk: Any, store: KafkaFileStore, **kwargs: Any) -> MetadataCoordinator:
    return MetadataCoordinator(zk, store, **kwargs)
