"""``shoal up --secure`` end to end: SASL_SSL (SCRAM-SHA-512) Kafka with least-privilege ACLs,
digest-authenticated ZooKeeper; a writer principal writes, two nodes (running as the node
principal) replicate; every door refuses an unauthenticated client or a wrong password quickly and
names itself; no secret reaches a log. One secured cluster for the whole module."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from metadata.client import MetadataClient, MetadataConfig
from metadata.election import read_epoch
from metadata.node_registry import lookup_node
from producer import Producer, ProducerConfig
from shoal import cluster_file
from shoal.cluster_file import ClusterInfo
from shoal.errors import ShoalError
from shoal.jvm import jars
from shoal.kafka import clients
from shoal.kafka.admin import create_topic, log_start_and_end
from shoal.kafka.readers import read_wal_channel
from shoal.kafka.settings import ConnectionSettings, ScanSettings, Secret, TopicPolicy, read_secrets_file
from shoal.scan import ScanRequest, describe_remote, scan_remote
from shoal.security.acls import cluster_plan
from shoal.topics import TopicNames
from shoal_app.cli.main import cli
from shoal_app.cli.verify import verify_table
from shoal_app.runtime import launcher, process, restart, secure
from shoal_app.testing.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def run(data: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data), *args], env=env or {}, input=stdin)


def rows(first: int, n: int) -> str:
    return "".join(json.dumps({"k": k, "v": f"v{k}"}) + "\n" for k in range(first, first + n))


def create_table(data: Path, servers: list[str], replication_factor: int, name: str = "ev") -> None:
    placement = [arg for server in servers for arg in ("--server", server)]
    created = run(
        data,
        *("table", "create", name, "--column", "k:uint64:not_null", "--column", "v:string"),
        *("--primary-key", "k", "--partition-key", "k", "--replication-factor", str(replication_factor)),
        *placement,
    )
    assert created.exit_code == 0, created.output


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ClusterInfo, secure.SecureCluster]]:
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
    # a CLI command checks Kafka first: the writer's name with the admin's password (the cluster file's)
    result = run(data, "table", "describe", "ev", env={"SHOAL_KAFKA_SASL_USERNAME": "writer"})
    assert result.exit_code != 0 and "Kafka at" in result.output and "as writer" in result.output
    result = run(data, "table", "describe", "ev", env={**_role_env(sec, "writer"), "SHOAL_ZK_PASSWORD": "nope"})
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


class _Writer(threading.Thread):
    """Writes batches of unique keys to ``table`` as the writer principal; a key is acknowledged once
    ``sync()`` returned after its batch (as the replication fault tests count them)."""

    def __init__(self, connection: ConnectionSettings, table: str) -> None:
        super().__init__(daemon=True, name="secured-writer")
        self.config, self.table = ProducerConfig(connection), table
        self.acked: set[int] = set()
        self.sent: set[int] = set()
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Producer(self.config) as producer:
                next_key, pending = 0, []
                while not self.halt.is_set():
                    keys = list(range(next_key, next_key + 20))
                    next_key += 20
                    producer.write(self.table, [{"k": k, "v": f"v{k}"} for k in keys])
                    self.sent.update(keys)
                    pending += keys
                    try:
                        producer.sync(timeout=60)
                    except Exception:  # not acknowledged (e.g. during the failover): sent again later
                        continue
                    self.acked.update(pending)
                    pending = []
                    self.halt.wait(0.1)
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self.halt.set()
        self.join(120)
        assert not self.is_alive() and self.error is None, self.error


class _Partition:
    """The one partition of a secured test table: its leader epoch record and each node's keys."""

    def __init__(self, meta: MetadataClient, table: str, scan: ScanSettings) -> None:
        self.meta, self.table, self.scan = meta, table, scan
        self.pid = meta.coordinator.current(table).partitions[0].partition_id

    def leader(self) -> tuple[int, str | None, int | None]:
        record = read_epoch(self.meta.zk, self.meta.layout, self.pid)
        return record.epoch, record.server_id, record.placement_id

    def keys_on(self, server: str) -> set[int]:
        location = lookup_node(self.meta.zk, self.meta.layout, server)
        keys = scan_remote(location, ScanRequest(self.table, self.pid), scan=self.scan).column("k").to_pylist()
        assert len(keys) == len(set(keys)), f"{server} holds a key twice"
        return set(keys)


def test_kill_leader_under_writes_loses_no_acknowledged_write(
    secured: tuple[Path, ClusterInfo, secure.SecureCluster],
) -> None:
    data, info, sec = secured
    create_table(data, ["node-1", "node-2"], 2, name="ft")
    admin_conn = secure.connection_of(info)
    writer_conn = _connection(
        info, sec, "writer", topic_prefix=info.topic_prefix, zk_root=str(info.extra.get("zk_root", "/shoal"))
    )
    with MetadataClient(MetadataConfig(connection=admin_conn)) as meta:
        part = _Partition(meta, "ft", admin_conn.scan)
        leader, keys_on = part.leader, part.keys_on

        assert wait_until(lambda: leader()[1] is not None, 60)
        w = _Writer(writer_conn, "ft")
        w.start()
        try:
            assert wait_until(lambda: len(w.acked) >= 60, 60), (len(w.acked), w.error)
            epoch0, victim, _ = leader()
            assert victim is not None
            survivor = "node-2" if victim == "node-1" else "node-1"
            before = len(w.acked)
            record = info.process(victim)
            assert record is not None
            process.kill(record)  # kill -9 the leader under writes
            assert wait_until(lambda: leader()[0] > epoch0 and leader()[1] == survivor, 60)
            assert wait_until(lambda: len(w.acked) >= before + 40, 60), "writes did not resume after failover"
        finally:
            w.stop()
        acked, sent = set(w.acked), set(w.sent)

        def survived() -> bool:
            try:
                keys = keys_on(survivor)
            except ShoalError:
                return False
            return acked <= keys and keys <= sent

        assert wait_until(survived, 60), "an acknowledged write is missing on the remaining replica"
        restart.restart_process(info, victim, cache_dir=jars.cache_dir_from(os.environ))

        def agreed() -> bool:
            report = verify_table(meta, "ft")
            replicas = report["partitions"][0]["replicas"]
            return bool(report["ok"]) and len(replicas) == 2 and keys_on(victim) == keys_on(survivor)

        assert wait_until(agreed, 60), verify_table(meta, "ft")


def test_a_paused_leader_is_fenced_and_writes_go_on(secured: tuple[Path, ClusterInfo, secure.SecureCluster]) -> None:
    """SIGSTOP the leader past its ZooKeeper session under writes, then SIGCONT: the other node leads
    with a higher epoch, the paused one commits nothing more on its WAL channel (its transactional
    producer is fenced, as the node principal), every acknowledged write is on both replicas and
    ``shoal verify`` agrees (tests/faults/test_replication_faults.py, on the secured cluster)."""
    data, info, sec = secured
    create_table(data, ["node-1", "node-2"], 2, name="fz")
    admin_conn = secure.connection_of(info)
    writer_conn = _connection(
        info, sec, "writer", topic_prefix=info.topic_prefix, zk_root=str(info.extra.get("zk_root", "/shoal"))
    )
    topics = TopicNames(info.topic_prefix)
    with MetadataClient(MetadataConfig(connection=admin_conn)) as meta:
        part = _Partition(meta, "fz", admin_conn.scan)
        leader, keys_on, pid = part.leader, part.keys_on, part.pid

        assert wait_until(lambda: leader()[1] is not None, 60)
        w = _Writer(writer_conn, "fz")
        w.start()
        try:
            assert wait_until(lambda: len(w.acked) >= 60, 60), (len(w.acked), w.error)
            epoch0, paused, placement = leader()
            assert paused is not None and placement is not None
            other = "node-2" if paused == "node-1" else "node-1"
            # the cluster file has the current pids (an earlier test restarted a node)
            record = cluster_file.read(data / launcher.CLUSTER_FILE_NAME).process(paused)
            assert record is not None
            wal = topics.wal(pid, placement)
            os.kill(record.pid, signal.SIGSTOP)
            try:
                assert wait_until(lambda: leader()[0] > epoch0 and leader()[1] == other, 90)
                before = len(w.acked)
                assert wait_until(lambda: len(w.acked) >= before + 40, 90), "writes did not resume on the new leader"
                append_before = log_start_and_end(admin_conn.kafka, wal)[1]
            finally:
                os.kill(record.pid, signal.SIGCONT)
            # the resumed node learns it lost the leadership; writes keep flowing to the new leader
            after_resume = len(w.acked)
            assert wait_until(lambda: len(w.acked) >= after_resume + 40, 90), "writes stopped after the resume"
        finally:
            w.stop()
        # the zombie committed nothing after the new leader fenced its channel: whatever its channel
        # holds past that point was written by a later leadership of that node (a preferred leader
        # returns once caught up), with a higher epoch
        later = list(read_wal_channel(admin_conn.kafka, wal, append_before))
        assert all(r.record.gtid.epoch > epoch0 for r in later), [(r.offset, str(r.record.gtid)) for r in later]
        acked, sent = set(w.acked), set(w.sent)

        def agreed() -> bool:
            try:
                report = verify_table(meta, "fz")
                held = [keys_on(server) for server in (paused, other)]
            except ShoalError:
                return False
            return bool(report["ok"]) and all(acked <= keys <= sent for keys in held) and held[0] == held[1]

        assert wait_until(agreed, 90), verify_table(meta, "fz")


@pytest.mark.spark
def test_spark_sink_writes_a_secured_table_scannable_over_flight(
    secured: tuple[Path, ClusterInfo, secure.SecureCluster], spark: Any
) -> None:
    from spark_jobs.datasource import register

    data, info, sec = secured
    create_table(data, ["node-1"], 1, name="sk")
    # the sink's connection: the cluster's locations, the writer principal's SCRAM user, CA and
    # secrets file, all as options (the Python data source runs in Spark's own Python workers)
    security = {key.replace("_", ""): value for key, value in sec.options("writer").items()}
    options = {"bootstrapServers": info.bootstrap_servers, "zk": info.zk_connect, **security}
    options.update(topicPrefix=info.topic_prefix, zkRoot=str(info.extra.get("zk_root", "/shoal")))
    register(spark)
    df = spark.createDataFrame([(k, f"v{k}") for k in range(30)], "k long, v string").repartition(2)
    df.write.format("shoal").option("table", "sk").options(**options).mode("append").save()

    def scanned() -> list[dict[str, Any]] | None:
        result = run(data, "scan", "sk", "--output", "json")  # the admin's scan credentials, over TLS
        if result.exit_code != 0:
            return None
        return [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]

    assert wait_until(lambda: len(scanned() or []) == 30, 60)
    assert sorted((r["k"], r["v"]) for r in scanned() or []) == [(k, f"v{k}") for k in range(30)]


@pytest.mark.spark
def test_spark_ingest_job_reads_a_secured_topic_as_the_spark_ingest_principal(
    secured: tuple[Path, ClusterInfo, secure.SecureCluster], spark: Any, tmp_path: Path
) -> None:
    from spark_jobs.ingest import IngestConfig, start_ingest

    data, info, sec = secured
    create_table(data, ["node-1"], 1, name="ig")
    admin = secure.connection_of(info)
    source = "ig-source"
    create_topic(clients.admin(admin.kafka), source, policy=TopicPolicy())
    plan = cluster_plan(TopicNames(info.topic_prefix), source_topics=[source])  # what `shoal acl plan` prints
    secure.apply_acls(admin.kafka, [r for r in plan if r.role == "spark-ingest" and r.name == source])
    producer = clients.producer(admin.kafka)
    for k in range(40):
        producer.produce(source, json.dumps({"k": k, "v": f"v{k}"}).encode())
    assert producer.flush(30) == 0
    zk_root = str(info.extra.get("zk_root", "/shoal"))
    connection = _connection(info, sec, "spark-ingest", topic_prefix=info.topic_prefix, zk_root=zk_root)
    config = IngestConfig(
        source_topic=source,
        table="ig",
        connection=MetadataConfig(connection=connection),
        checkpoint=tmp_path / "checkpoint",
        query_name="ig-secured",
        available_now=True,
    )
    job = start_ingest(spark, config)  # the Kafka source, the sink's workers and the offsets mirror, secured
    try:
        assert job.await_termination(120), "the ingest query did not finish"
        assert job.query.exception() is None, job.query.exception()
    finally:
        job.close()

    def scanned() -> list[tuple[int, str]]:
        result = run(data, "scan", "ig", "--output", "json")
        lines = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
        return sorted((r["k"], r["v"]) for r in lines) if result.exit_code == 0 else []

    assert wait_until(lambda: len(scanned()) == 40, 60)
    assert scanned() == [(k, f"v{k}") for k in range(40)]
    assert job.mirror.committed.get((source, 0)) == 40  # mirrored to its consumer group as spark-ingest


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
