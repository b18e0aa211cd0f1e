"""Raise the replication of existing topics to the topic policy (DESIGN.md section 1).

confluent-kafka's AdminClient has no partition reassignment call, so the move is made by Kafka's
own tool, ``org.apache.kafka.tools.reassign.ReassignPartitionsCommand``, from the pinned Kafka jar
bundle (the one ``shoal up`` runs): :func:`plan` writes the reassignment (the current replicas
first, so leaders stay, then the least used live brokers), :func:`execute` runs the tool with
``--execute``, :func:`wait_until_replicated` polls the cluster metadata until every new replica
is in sync, and :func:`set_min_insync_replicas` then sets the policy's ``min.insync.replicas``
(only then: with it set earlier, acks=all writes would wait for replicas still copying).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from shoal.errors import ConfigError, KafkaOperationError, ReassignmentError
from shoal.jvm import jars
from shoal.jvm.java import java_executable, jvm_options
from shoal.kafka.errors import classify
from shoal.kafka.settings import KafkaSettings, TopicPolicy
from shoal.worker import Deadline

TOOL_CLASS = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


@dataclass(frozen=True)
class PartitionMove:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    """The replicas after the move (the current ones first)."""


@dataclass(frozen=True)
class TopicReplication:
    """One topic's replication now and as the policy wants it."""

    topic: str
    replication_factor: int
    wanted_replication_factor: int
    min_insync_replicas: int | None
    wanted_min_insync_replicas: int
    moves: tuple[PartitionMove, ...]
    below_policy: bool = False
    """The policy wants more replicas than there are live brokers: ``wanted_replication_factor`` (and
    ``wanted_min_insync_replicas``, capped by it) is what the live brokers allow."""


def plan(
    admin: AdminClient, topics: Iterable[str], policy: TopicPolicy, timeout_s: float = 10.0
) -> list[TopicReplication]:
    """Where each of ``topics`` stands against ``policy`` and the partition moves that raise it.

    New replicas go to the live brokers holding the fewest replicas of the planned topics so far,
    so one run spreads them over the cluster. Missing topics are skipped.
    """
    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise classify(exc, "cannot read the cluster metadata") from exc
    brokers = sorted(md.brokers)
    policy_rf = policy.replication_factor_for(len(brokers))
    # an acks=all write must never need more copies than the topic can have: with a broker down,
    # as many replicas as there are live brokers, and min.insync.replicas capped by that
    wanted = max(1, min(policy_rf, len(brokers)))
    wanted_isr = policy.min_insync_replicas_for(wanted)
    names = [t for t in topics if t in md.topics and md.topics[t].error is None and md.topics[t].partitions]
    load: Counter[int] = Counter({b: 0 for b in brokers})
    for name in names:
        for p in md.topics[name].partitions.values():
            load.update(r for r in p.replicas if r in load)
    isr_now = _min_insync_replicas(admin, names, timeout_s)
    out: list[TopicReplication] = []
    for name in names:
        parts = sorted(md.topics[name].partitions.values(), key=lambda p: p.id)
        moves: list[PartitionMove] = []
        for p in parts:
            current = list(p.replicas)
            if len(current) >= wanted:
                continue
            extra = sorted((b for b in brokers if b not in current), key=lambda b: (load[b], b))[
                : wanted - len(current)
            ]
            if not extra:
                continue  # no live broker to add: a move would change nothing
            load.update(extra)
            moves.append(PartitionMove(name, p.id, tuple(current + extra)))
        moved = {m.partition: len(m.replicas) for m in moves}
        after = min(moved.get(p.id, len(p.replicas)) for p in parts)  # the fewest replicas once moved
        out.append(
            TopicReplication(
                name,
                min(len(p.replicas) for p in parts),
                wanted,
                isr_now.get(name),
                min(wanted_isr, after),
                tuple(moves),
                below_policy=policy_rf > wanted,
            )
        )
    return out


def reassignment_json(moves: Sequence[PartitionMove]) -> str:
    """The ``--reassignment-json-file`` document of Kafka's tool."""
    partitions = [{"topic": m.topic, "partition": m.partition, "replicas": list(m.replicas)} for m in moves]
    return json.dumps({"version": 1, "partitions": partitions})


def tool_properties(kafka: KafkaSettings) -> dict[str, str]:
    """The Java client settings (``--command-config``) that reach the cluster as ``kafka`` does."""
    props = {"security.protocol": kafka.security_protocol}
    if kafka.sasl_mechanism is not None and kafka.sasl_username and kafka.sasl_password is not None:
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if kafka.sasl_mechanism.upper() == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        props["sasl.mechanism"] = kafka.sasl_mechanism.upper()
        props["sasl.jaas.config"] = (
            f"{module} required username={json.dumps(kafka.sasl_username)} "
            f"password={json.dumps(kafka.sasl_password.reveal())};"
        )
    if kafka.ssl_ca_location:
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = kafka.ssl_ca_location
    return props


def run_tool(kafka: KafkaSettings, cache_dir: Path, moves: Sequence[PartitionMove], action: str) -> str:
    """Run Kafka's reassignment tool with ``action`` (``--execute`` or ``--verify``) on ``moves``;
    its output. ReassignmentError carries the tool's exit code and output when it fails."""
    if action not in ("--execute", "--verify"):
        raise ConfigError(f"unknown reassignment action {action!r}")
    topics = tuple(sorted({m.topic for m in moves}))
    with tempfile.TemporaryDirectory(prefix="shoal-reassign-") as tmp:
        plan_file = Path(tmp) / "reassignment.json"
        plan_file.write_text(reassignment_json(moves), encoding="utf-8")
        config_file = Path(tmp) / "client.properties"
        config_file.write_text("".join(f"{k}={v}\n" for k, v in tool_properties(kafka).items()), encoding="utf-8")
        argv = [
            java_executable(),
            *jvm_options(256),
            "-cp",
            jars.classpath(jars.kafka_bundle(), cache_dir),
            TOOL_CLASS,
            "--bootstrap-server",
            kafka.bootstrap_servers,
            "--command-config",
            str(config_file),
            "--reassignment-json-file",
            str(plan_file),
            action,
        ]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        except subprocess.TimeoutExpired as exc:
            raise ReassignmentError(f"Kafka's reassignment tool ({action}) did not finish in 300s", topics) from exc
    output = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        raise ReassignmentError(
            f"Kafka's reassignment tool ({action}) failed with exit code {proc.returncode}: {output[-2000:]}",
            topics,
            proc.returncode,
            output,
        )
    return output


def execute(kafka: KafkaSettings, cache_dir: Path, moves: Sequence[PartitionMove]) -> str:
    """Start the moves (the tool returns once Kafka accepted them); its output."""
    return run_tool(kafka, cache_dir, moves, "--execute") if moves else ""


def pending(admin: AdminClient, moves: Sequence[PartitionMove], timeout_s: float = 10.0) -> list[PartitionMove]:
    """The moves whose partition does not have exactly its new replicas, all in sync, yet."""
    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise classify(exc, "cannot read the cluster metadata") from exc
    left: list[PartitionMove] = []
    for m in moves:
        tmd = md.topics.get(m.topic)
        p = None if tmd is None else tmd.partitions.get(m.partition)
        if p is None or sorted(p.replicas) != sorted(m.replicas) or sorted(p.isrs) != sorted(m.replicas):
            left.append(m)
    return left


def wait_until_replicated(
    admin: AdminClient, moves: Sequence[PartitionMove], timeout_s: float, *, poll_s: float = 1.0
) -> None:
    """Wait until every move is complete (its new replicas all in sync); ReassignmentError names
    the partitions still moving after ``timeout_s``."""
    deadline = Deadline(timeout_s)
    while True:
        left = pending(admin, moves)
        if not left:
            return
        if not deadline.sleep(poll_s):
            names = ", ".join(f"{m.topic}[{m.partition}]" for m in left)
            raise ReassignmentError(
                f"reassignment not complete after {timeout_s}s: {names}", tuple(sorted({m.topic for m in left}))
            )


def set_min_insync_replicas(admin: AdminClient, wanted: Mapping[str, int], timeout_s: float = 30.0) -> None:
    """Set ``min.insync.replicas`` of each topic (incremental: other settings stay)."""
    if not wanted:
        return
    resources = [
        ConfigResource(
            ConfigResource.Type.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry("min.insync.replicas", str(n), incremental_operation=AlterConfigOpType.SET)
            ],
        )
        for topic, n in wanted.items()
    ]
    for res, fut in admin.incremental_alter_configs(resources, request_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s)
        except KafkaException as exc:
            raise classify(exc, f"cannot set min.insync.replicas of {res.name}") from exc
        except TimeoutError as exc:
            raise KafkaOperationError(f"cannot set min.insync.replicas of {res.name}: no answer in time") from exc


def _min_insync_replicas(admin: AdminClient, topics: Sequence[str], timeout_s: float) -> dict[str, int]:
    if not topics:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    out: dict[str, int] = {}
    for res, fut in admin.describe_configs(resources, request_timeout=timeout_s).items():
        try:
            entry = fut.result(timeout=timeout_s).get("min.insync.replicas")
        except KafkaException as exc:
            raise classify(exc, f"cannot read the configuration of topic {res.name}") from exc
        except TimeoutError as exc:
            raise KafkaOperationError(f"cannot read the configuration of topic {res.name}: no answer in time") from exc
        if entry is not None and entry.value is not None:
            out[res.name] = int(entry.value)
    return out
