"""Apache Kafka brokers in KRaft mode (combined broker + controller) on 127.0.0.1.

With B brokers every node is also a controller voter (a static quorum of B). The replication
defaults follow B: replication factor min(B, 3), min.insync.replicas min(B, 2), so B=3 gives the
production shape RF=3 / min ISR=2.
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal.cluster_file import ProcessRecord
from shoal.errors import ConfigError, RuntimeLaunchError
from shoal.jvm import jars
from shoal.jvm.java import java_executable, jvm_options
from shoal.kafka.settings import KafkaSettings, Secret
from shoal_app.runtime.ports import is_listening
from shoal_app.runtime.process import spawn

OFFSETS_TOPIC_PARTITIONS = 10
"""``offsets.topic.num.partitions`` of the local cluster (each is one group coordinator's share)."""

_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.server.name = kafka.server
logger.server.level = INFO
logger.raft.name = org.apache.kafka.raft
logger.raft.level = WARN
"""

REQUEST_LOG_NAME = "requests.log"
"""The file (in the broker's ``logs`` directory) of :func:`start`'s ``request_log``."""

_REQUEST_LOGGER = f"""appender.req.type = File
appender.req.name = REQ
appender.req.fileName = ${{sys:kafka.logs.dir}}/{REQUEST_LOG_NAME}
appender.req.layout.type = PatternLayout
appender.req.layout.pattern = %d{{UNIX_MILLIS}} %m%n
logger.req.name = kafka.request.logger
logger.req.level = DEBUG
logger.req.additivity = false
logger.req.appenderRef.req.ref = REQ
"""


@dataclass(frozen=True)
class BrokerPorts:
    node_id: int
    broker_port: int
    controller_port: int


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, base64url without padding (Kafka's Uuid form).

    Never starting with '-': ``kafka-storage format -t -xyz`` would read it as an option (Kafka's own
    ``Uuid.randomUuid`` redraws such ids for the same reason)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def replication_defaults(brokers: int) -> dict[str, int]:
    return {
        "replication_factor": min(brokers, 3),
        "min_insync_replicas": min(brokers, 2),
    }


def cluster_settings(brokers: int) -> dict[str, str | int]:
    """Broker settings that do not depend on addresses: the same for ``shoal up`` and the compose cluster."""
    d = replication_defaults(brokers)
    return {
        "num.partitions": 1,
        "default.replication.factor": d["replication_factor"],
        "min.insync.replicas": d["min_insync_replicas"],
        "offsets.topic.replication.factor": d["replication_factor"],
        "offsets.topic.num.partitions": OFFSETS_TOPIC_PARTITIONS,
        "transaction.state.log.replication.factor": d["replication_factor"],
        "transaction.state.log.min.isr": d["min_insync_replicas"],
        "transaction.state.log.num.partitions": 10,
        "share.coordinator.state.topic.replication.factor": d["replication_factor"],
        "share.coordinator.state.topic.min.isr": d["min_insync_replicas"],
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false",
        "log.segment.bytes": 64 * 1024 * 1024,
        "log.retention.check.interval.ms": 30000,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 5000,
        "transaction.remove.expired.transaction.cleanup.interval.ms": 60000,
    }


def docker_env(settings: dict[str, str | int]) -> dict[str, str]:
    """Broker settings as environment of the apache/kafka image (``a.b-c_d`` -> ``KAFKA_A_B___C__D``)."""
    out = {}
    for key, value in settings.items():
        name = key.replace("_", "__").replace("-", "___").replace(".", "_").upper()
        out[f"KAFKA_{name}"] = str(value)
    return out


@dataclass(frozen=True)
class BrokerSecurity:
    """A secured broker: SASL_SSL with SCRAM-SHA-512 for clients and between brokers, SASL_SSL with
    PLAIN for the controller listener (KRaft controllers cannot use SCRAM: its credentials live in
    the metadata log they serve), the ``admin`` user as the super user of both, ACLs enforced by
    KRaft's StandardAuthorizer. The properties file holding the passwords is written with mode 0600."""

    keystore: Path
    keystore_password: Secret
    truststore: Path
    """The CA certificate (PEM)."""
    admin_user: str
    admin_password: Secret
    scram_users: Mapping[str, Secret]
    """SCRAM-SHA-512 users created when the storage is formatted (``--add-scram``)."""

    def properties(self) -> dict[str, str | int]:
        admin = _jaas_value(self.admin_user)
        password = _jaas_value(self.admin_password.reveal())
        return {
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="{admin}" password="{password}" user_{admin}="{password}";'
            ),
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{admin}" password="{password}";'
            ),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.keystore),
            "ssl.keystore.password": self.keystore_password.reveal(),
            "ssl.key.password": self.keystore_password.reveal(),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.truststore),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{self.admin_user}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def scram_arguments(self) -> list[str]:
        """``kafka-storage format`` arguments creating every SCRAM user."""
        out = []
        for user, password in sorted(self.scram_users.items()):
            out += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={password.reveal()}]"]
        return out


def _jaas_value(value: str) -> str:
    if any(c in value for c in '"\\;'):
        raise ConfigError("a JAAS user name or password must not contain quotes, backslashes or ';'")
    return value


def server_properties(
    node: BrokerPorts, all_nodes: list[BrokerPorts], log_dir: Path, security: BrokerSecurity | None = None
) -> str:
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in all_nodes)
    if security is not None:
        return _properties_text(
            {
                "process.roles": "broker,controller",
                "node.id": node.node_id,
                "controller.quorum.voters": voters,
                "listeners": f"SASL_SSL://127.0.0.1:{node.broker_port},CONTROLLER://127.0.0.1:{node.controller_port}",
                "advertised.listeners": f"SASL_SSL://127.0.0.1:{node.broker_port}",
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "SASL_SSL",
                "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL",
                "log.dirs": str(log_dir),
                **cluster_settings(len(all_nodes)),
                **security.properties(),
            }
        )
    props: dict[str, str | int] = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{node.broker_port},CONTROLLER://127.0.0.1:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.broker_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        **cluster_settings(len(all_nodes)),
    }
    return _properties_text(props)


def _properties_text(props: Mapping[str, str | int]) -> str:
    return "".join(f"{k}={v}\n" for k, v in props.items())


def log4j2_properties(*, request_log: bool = False) -> str:
    """The brokers' log4j2 configuration; ``request_log`` adds Kafka's request logger at DEBUG (one
    line per completed request: API, client, queue/local/remote times; for profiling, it slows the
    broker) writing ``logs/requests.log`` with epoch-millisecond timestamps."""
    return _LOG4J2 + (_REQUEST_LOGGER if request_log else "")


def _base_argv(directory: Path, cache_dir: Path, heap_mb: int, request_log: bool = False) -> list[str]:
    (directory / "log4j2.properties").write_text(log4j2_properties(request_log=request_log), encoding="utf-8")
    return [
        java_executable(),
        *jvm_options(heap_mb),
        f"-Dlog4j2.configurationFile={directory / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={directory / 'logs'}",
        "-cp",
        jars.classpath(jars.kafka_bundle(), cache_dir),
    ]


def format_storage(
    directory: Path,
    node: BrokerPorts,
    all_nodes: list[BrokerPorts],
    cluster_id: str,
    cache_dir: Path,
    security: BrokerSecurity | None = None,
) -> Path:
    """Write server.properties (mode 0600 when it holds passwords) and format the log dir (skipped
    when already formatted), creating ``security``'s SCRAM users."""
    directory.mkdir(parents=True, exist_ok=True)
    log_dir = directory / "data"
    config = directory / "server.properties"
    text = server_properties(node, all_nodes, log_dir, security)
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if security is not None else 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    if (log_dir / "meta.properties").exists():
        return config
    argv = [
        *_base_argv(directory, cache_dir, 256),
        "kafka.tools.StorageTool",
        "format",
        "-t",
        cluster_id,
        "-c",
        str(config),
        *(security.scram_arguments() if security is not None else ()),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        out = f"{proc.stdout}{proc.stderr}"
        for password in security.scram_users.values() if security is not None else ():
            out = out.replace(password.reveal(), "***")
        raise RuntimeLaunchError(f"kafka storage format failed for node {node.node_id}:\n{out}")
    return config


def start(
    directory: Path, node: BrokerPorts, cache_dir: Path, heap_mb: int = 768, *, request_log: bool = False
) -> ProcessRecord:
    """Start the broker (``request_log``: see :func:`log4j2_properties`)."""
    config = directory / "server.properties"
    argv = [*_base_argv(directory, cache_dir, heap_mb, request_log), "kafka.Kafka", str(config)]
    return spawn(
        f"kafka-{node.node_id}",
        argv,
        log_path=directory / "kafka.log",
        marker=str(config),
        port=node.broker_port,
    )


def broker_count(bootstrap_servers: str | KafkaSettings, timeout_s: float = 5.0) -> int:
    """How many brokers the cluster reports (0 if it does not answer); ``bootstrap_servers`` may be
    the full settings of a secured cluster."""
    from shoal.kafka import clients

    settings = bootstrap_servers if isinstance(bootstrap_servers, KafkaSettings) else KafkaSettings(bootstrap_servers)
    bootstrap_servers = settings.bootstrap_servers
    addresses = [a.strip().rsplit(":", 1) for a in bootstrap_servers.split(",") if a.strip()]
    known = [(host, int(port)) for host, port in (a for a in addresses if len(a) == 2) if port.isdigit()]
    if known and len(known) == len(addresses) and not any(is_listening(port, host) for host, port in known):
        return 0  # nothing listens: do not wait for librdkafka's timeout (any live broker answers for all)
    quiet: dict[str, Any] = {"socket.timeout.ms": int(timeout_s * 1000), "log_level": 2}
    admin = clients.admin(settings, **quiet)
    try:
        md = admin.list_topics(timeout=timeout_s)
    except Exception:
        return 0
    finally:
        del admin
    return len(md.brokers)


def wait_ready(bootstrap_servers: str | KafkaSettings, brokers: int, timeout_s: float) -> bool:
    """Every broker registered, then every group coordinator answering (:func:`wait_group_coordinators`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if broker_count(bootstrap_servers, timeout_s=3.0) >= brokers:
            settings = (
                bootstrap_servers if isinstance(bootstrap_servers, KafkaSettings) else KafkaSettings(bootstrap_servers)
            )
            return wait_group_coordinators(settings, deadline - time.monotonic())
        time.sleep(0.5)
    return False


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit overflow), signed."""
    h = 0
    for unit in range(0, len(encoded := text.encode("utf-16-be")), 2):
        h = (31 * h + int.from_bytes(encoded[unit : unit + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(group: str, partitions: int = OFFSETS_TOPIC_PARTITIONS) -> int:
    """The ``__consumer_offsets`` partition whose leader coordinates ``group`` (Kafka's
    ``Utils.abs(groupId.hashCode) % partitions``)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def probe_groups(partitions: int = OFFSETS_TOPIC_PARTITIONS) -> list[str]:
    """One group name per ``__consumer_offsets`` partition, in partition order."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < partitions:
        name = f"shoal.ready-probe.{i}"
        found.setdefault(coordinator_partition(name, partitions), name)
        i += 1
    return [found[p] for p in range(partitions)]


def wait_group_coordinators(settings: KafkaSettings, timeout_s: float) -> bool:
    """Fetch a committed offset through a consumer of one group per ``__consumer_offsets`` partition
    until each answers: every group coordinator is loaded before shoal starts.

    librdkafka 2.16's AdminClient ``list_consumer_group_offsets`` crashes the process (SIGSEGV in
    ``rd_kafka_cgrp_op``, confluentinc/librdkafka#5040) when the coordinator answers NOT_COORDINATOR,
    which a just-started cluster does while ``__consumer_offsets`` loads; a consumer's own fetch
    handles it (it looks the coordinator up again)."""
    from confluent_kafka import KafkaException, TopicPartition

    from shoal.kafka import clients

    deadline = time.monotonic() + max(timeout_s, 1.0)
    for group in probe_groups():
        consumer = clients.consumer(settings, group_id=group)
        try:
            while True:
                try:
                    consumer.committed([TopicPartition("__consumer_offsets", 0)], timeout=5)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        return False
                    time.sleep(0.3)
        finally:
            consumer.close()
    return True
