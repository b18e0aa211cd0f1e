"""``shoal up --secure`` end to end: SASL_SSL (SCRAM-SHA-512) Kafka with least-privilege ACLs,
digest-authenticated ZooKeeper; a writer principal writes, two nodes (running as the node
principal) replicate; every door refuses an unauthenticated client or a wrong password quickly and
names itself; no secret reaches a log. One secured cluster for the whole module."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from metadata.client import MetadataClient, MetadataConfig
from metadata.node_registry import lookup_node
from shoal.cluster_file import ClusterInfo
from shoal.errors import ShoalError
from shoal.jvm import jars
from shoal.kafka import clients
from shoal.kafka.settings import ConnectionSettings, ScanSettings, Secret, read_secrets_file
from shoal.scan import describe_remote
from shoal.topics import TopicNames
from shoal_app.cli.main import cli
from shoal_app.runtime import launcher, secure
from shoal_app.testing.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def run(data: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data), *args], env=env or {}, input=stdin)


def rows(first: int, n: int) -> str:
    return "".join(json.dumps({"k": k, "v": f"v{k}"}) + "\n" for k in range(first, first + n))


def create_table(data: Path, servers: list[str], replication_factor: int) -> None:
    placement = [arg for server in servers for arg in ("--server", server)]
    created = run(
        data,
        *("table", "create", "ev", "--column", "k:uint64:not_null", "--column", "v:string"),
        *("--primary-key", "k", "--partition-key", "k", "--replication-factor", str(replication_factor)),
        *placement,
    )
    assert created.exit_code == 0, created.output


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ClusterInfo, secure.SecureCluster]]:
    import os

    data = tmp_path_factory.mktemp("secured")
    config = launcher.LocalClusterConfig(
        data_dir=data, cache_dir=jars.cache_dir_from(os.environ), brokers=1, nodes=2, secure=True
    )
    info = launcher.up(config)
    try:
        yield data, info, secure.prepare(data / "security")
    finally:
        launcher.down(config.cluster_file)


def _role_env(sec: secure.SecureCluster, role: str) -> dict[str, str]:
    return {"SHOAL_KAFKA_SASL_USERNAME": role, "SHOAL_SECRETS_FILE": str(sec.secrets_file(role))}


def _connection(info: ClusterInfo, sec: secure.SecureCluster, role: str, **more: str) -> ConnectionSettings:
    return sec.connection(info.bootstrap_servers, info.zk_connect, role, **more)


def test_writer_writes_and_nodes_replicate(secured: tuple[Path, ClusterInfo, secure.SecureCluster]) -> None:
    data, _info, sec = secured
    create_table(data, ["node-1", "node-2"], 2)
    written = run(data, "write", "ev", "--sync", "--timeout", "60", env=_role_env(sec, "writer"), stdin=rows(0, 50))
    assert written.exit_code == 0, written.output

    def agreed() -> bool:
        result = run(data, "verify", "ev", "--output", "json")
        if result.exit_code != 0:
            return False
        report = json.loads(result.stdout)
        replicas = report["partitions"][0]["replicas"]
        return bool(report["ok"]) and len(replicas) == 2 and all(r.get("row_count") == 50 for r in replicas)

    assert wait_until(agreed, 60)


def test_wrong_password_and_no_credentials_are_refused_quickly(
    secured: tuple[Path, ClusterInfo, secure.SecureCluster],
) -> None:
    data, info, sec = secured
    wrong = _connection(info, sec, "writer", sasl_password="not-the-password")
    began = time.monotonic()
    with pytest.raises(clients.KafkaAccessError, match=r"(?i)Kafka at .* as writer: .*authentication") as refused:
        clients.check_access(wrong.kafka, timeout_s=10)
    assert refused.value.door == "kafka" and "not-the-password" not in str(refused.value)
    assert time.monotonic() - began < 15
    plain = ConnectionSettings.plain(info.bootstrap_servers, info.zk_connect).kafka
    with pytest.raises(clients.KafkaAccessError):
        clients.check_access(plain, timeout_s=5)
    result = run(
        data, "table", "describe", "ev", env={"SHOAL_KAFKA_SASL_USERNAME": "writer", "SHOAL_ZK_PASSWORD": "nope"}
    )
    assert result.exit_code != 0 and "ZooKeeper" in result.output

    with MetadataClient(MetadataConfig(connection=secure.connection_of(info))) as meta:
        location = lookup_node(meta.zk, meta.layout, "node-1")
    assert location.startswith("grpc+tls://")
    anonymous = ScanSettings(tls_ca_location=str(sec.ca.cert))
    with pytest.raises(ShoalError, match=r"(?i)authentication required"):
        describe_remote(location, "ev", scan=anonymous, timeout_s=10)
    with pytest.raises(ShoalError, match=r"refused shoal-scan"):
        describe_remote(location, "ev", scan=replace(anonymous, username="shoal-scan", password=Secret("x")))

    zk = KazooClient(hosts=info.zk_connect, timeout=10)
    zk.start(timeout=10)
    try:
        with pytest.raises(NoAuthError):
            zk.get_children("/shoal/tables") if zk.exists("/shoal/tables") else zk.get_children("/shoal")
        with pytest.raises(NoAuthError):
            zk.create("/shoal/intruder", b"x")
    finally:
        zk.stop()
        zk.close()


def test_writer_cannot_read_wal_nor_commit_a_replica_group_and_monitor_cannot_write(
    secured: tuple[Path, ClusterInfo, secure.SecureCluster],
) -> None:
    _data, info, sec = secured
    admin_conn = secure.connection_of(info)
    with MetadataClient(MetadataConfig(connection=admin_conn)) as meta:
        partition = meta.coordinator.current("ev").partitions[0]
    placement = partition.servers[0].placement_id
    names = TopicNames(info.topic_prefix)
    wal = names.wal(partition.partition_id, placement)

    writer = _connection(info, sec, "writer").kafka
    consumer = clients.consumer(writer, group_id=names.replica_group(partition.partition_id, placement))
    try:
        consumer.assign([TopicPartition(wal, 0, 0)])
        msg = consumer.poll(10)
        assert msg is not None
        error = msg.error()
        assert error is not None and "AUTHORIZATION" in error.name()
    finally:
        consumer.close()
    group = names.replica_group(partition.partition_id, placement)
    as_writer = clients.admin(writer)
    [attempt] = as_writer.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(wal, 0, 1)])], request_timeout=15
    ).values()
    with pytest.raises(KafkaException, match=r"(?i)authoriz"):  # an offset commit of a replica's Ack group
        attempt.result(20)
    admin = clients.admin(admin_conn.kafka)
    [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    committed = {(tp.topic, tp.offset) for tp in future.result(20).topic_partitions}
    assert (wal, 1) not in committed

    monitor = _connection(info, sec, "monitor").kafka
    errors: list[str] = []
    producer = clients.producer(monitor, error_cb=lambda err: errors.append(err.str()))
    try:  # the idempotent producer is refused its id: a fatal error (raised by flush), nothing delivered
        producer.produce(names.ingest(partition.partition_id), b"x")
        producer.flush(20)
    except KafkaException as exc:
        errors.append(str(exc))
    assert errors and "authorization" in errors[0].lower()


def test_no_secret_in_any_log(secured: tuple[Path, ClusterInfo, secure.SecureCluster]) -> None:
    data, _info, sec = secured
    secrets = {v for role in sec.passwords for v in read_secrets_file(sec.secrets_file(role)).values()}
    secrets.add(sec.keystore_password.reveal())
    assert all(len(s) >= 16 for s in secrets)
    logs = [p for p in data.rglob("*") if p.is_file() and (p.suffix == ".log" or "log" in p.name)]
    assert logs
    for path in logs:
        text = path.read_text(encoding="utf-8", errors="replace")
        leaked = [s[:3] + "..." for s in secrets if s in text]
        assert not leaked, f"{path} holds a secret"
