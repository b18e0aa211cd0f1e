from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers_metadata import new_file
from kazoo.retry import KazooRetry

from metadata.errors import MetadataDecodeError, MetadataFileNotFoundError
from metadata.security import ZkSecurity
from metadata.store import KafkaStoreConfig, MemoryFileStore
from metadata.zk_client import cas_retry, retrying
from metadata.zk_layout import EpochRecord, TableHead, ZkLayout
from shoal.errors import ConfigError, InvalidIdError, MetadataConflictError, StaleEpochError
from shoal_app.cli.table import table_group


def test_cas_retry_bounded_by_attempts_and_deadline() -> None:
    sleeps: list[float] = []
    calls: list[int] = []

    def conflict() -> None:
        calls.append(1)
        raise MetadataConflictError(f"conflict {len(calls)}")

    pol = KazooRetry(max_tries=5, delay=1.0, max_delay=4.0, sleep_func=sleeps.append)
    with pytest.raises(MetadataConflictError, match="conflict 5"):
        retrying(pol, conflict)
    assert len(calls) == 5 and len(sleeps) == 4 and all(0 <= s <= 4.0 * 1.4 for s in sleeps)
    # the policy is copied per call: a second loop gets the full bounds again
    calls.clear()
    with pytest.raises(MetadataConflictError, match="conflict 5"):
        retrying(pol, conflict)
    # the deadline stops a long loop (real sleeps of 10 ms, 20 ms, ...)
    calls.clear()
    with pytest.raises(MetadataConflictError):
        retrying(cas_retry(max_tries=1000, deadline=0.05), conflict)
    assert len(calls) <= 5
    # anything but the retried error ends the loop at once
    calls.clear()

    def stale() -> None:
        calls.append(1)
        raise StaleEpochError("fenced")

    with pytest.raises(StaleEpochError):
        retrying(pol, stale)
    assert calls == [1]
    assert retrying(pol, lambda: 7) == 7
    with pytest.raises(ConfigError):
        cas_retry(max_tries=0)


def test_security_acls() -> None:
    assert ZkSecurity().acls() is None and ZkSecurity().auth_data() == []
    sec = ZkSecurity("shoal", "s3cret")
    (acl,) = sec.acls() or []
    assert acl.id.scheme == "digest" and acl.id.id.startswith("shoal:")
    assert sec.auth_data() == [("digest", "shoal:s3cret")]
    assert "s3cret" not in repr(sec)
    assert len(ZkSecurity("shoal", "x", world_readable=True).acls() or []) == 2
    with pytest.raises(ConfigError):
        ZkSecurity("shoal", None)
    with pytest.raises(ConfigError):
        ZkSecurity("bad user", "x")


def test_layout_and_hostile_names() -> None:
    lay = ZkLayout("/shoal")
    assert lay.table("events") == "/shoal/tables/events"
    for bad in ("../x", "a/b", "", "x" * 200):
        with pytest.raises(InvalidIdError):
            lay.table(bad)
    with pytest.raises(InvalidIdError):
        lay.epoch("../../zookeeper")
    for bad_root in ("shoal", "/", "/a/../b", "/a b"):
        with pytest.raises(ConfigError):
            ZkLayout(bad_root)


def test_table_head_codec() -> None:
    f = new_file()
    head = TableHead("events", f.txnid, 1, ("node-1", "node-2"))
    assert TableHead.decode("events", head.encode(), 4) == TableHead("events", f.txnid, 1, ("node-1", "node-2"), 4)
    for bad in (
        b"",
        b"[]",
        b"\xff",
        json.dumps({"metadata_txnid": "x", "metadata_sequence": 1, "metadata_servers": []}).encode(),
        json.dumps({"metadata_txnid": f.txnid, "metadata_sequence": 0, "metadata_servers": []}).encode(),
    ):
        with pytest.raises(MetadataDecodeError):
            TableHead.decode("events", bad, 0)
    assert EpochRecord.decode("0" * 32, b"", 0).epoch == 0
    rec = EpochRecord("0" * 32, 3, "node-1", 7)
    assert EpochRecord.decode("0" * 32, rec.encode(), 1).epoch == 3
    with pytest.raises(MetadataDecodeError):
        EpochRecord.decode("0" * 32, b'{"epoch": -1}', 0)


def test_memory_store_tombstones_and_versions() -> None:
    store = MemoryFileStore()
    f = new_file()
    store.put(f)
    assert store.get("events", f.txnid) == f
    store.tombstone("events", f.txnid)
    with pytest.raises(MetadataFileNotFoundError, match="aborted"):
        store.get("events", f.txnid)
    assert store.versions("events") == []
    store.put_raw("events", "a" * 40, b"garbage")
    with pytest.raises(MetadataDecodeError):
        store.get("events", "a" * 40)
    with pytest.raises(MetadataFileNotFoundError):
        store.get("events", "b" * 40)
    # a record stored under another key than its content is refused
    store.put_raw("events", "c" * 40, f.encode())
    with pytest.raises(MetadataDecodeError):
        store.get("events", "c" * 40)


def test_kafka_store_config_validation() -> None:
    assert KafkaStoreConfig("h:1", "pfx").topic == "pfx.metadata"
    with pytest.raises(ConfigError):
        KafkaStoreConfig("")
    with pytest.raises(ConfigError):
        KafkaStoreConfig("h:1", "bad..prefix")


def test_cli_rejects_bad_definitions_before_connecting() -> None:
    runner = CliRunner()
    res = runner.invoke(table_group, ["create", "t", "--column", "k:decimal", "--primary-key", "k", "--server", "n1"])
    assert res.exit_code != 0 and "unknown column type" in res.output
    res = runner.invoke(
        table_group, ["create", "1t", "--column", "k:uint64:not_null", "--primary-key", "k", "--server", "n1"]
    )
    assert res.exit_code != 0 and "table name" in res.output
    res = runner.invoke(
        table_group,
        [
            "create",
            "t",
            "--column",
            "k:uint64:not_null",
            "--primary-key",
            "k",
            "--server",
            "n1",
            "--split-point",
            "abc",
        ],
    )
    assert res.exit_code != 0 and "UINT64" in res.output
    res = runner.invoke(table_group, ["describe", "--help"])
    assert res.exit_code == 0 and "--output" in res.output
