"""The Kafka ACLs each shoal role needs (DESIGN.md section 3 names every topic, group and
transactional id): least privilege, one principal per role.

Roles:

- ``writer`` (producers, ``shoal write``, the Spark sink): writes (and creates, when it is first)
  and reads (the streaming sink's commit: a split parent's unforwarded records) the ingest topics
  of its tables (a streaming Spark sink in transactions ``<prefix>.sink.*``),
  reads the metadata topic (partition map), describes the leader groups (``sync`` waits on the
  accepted-by-leader index) and reads the deadletter topic (``sync`` reports refused messages).
- ``node`` (storage nodes): everything on its tables' channels: creates, reads and writes the
  ingest, WAL, segments, compaction and forward topics, ``DeleteRecords`` (Tail), its consumer
  groups (leader, replica Ack, consume) and its transactional ids (each equal to its channel topic).
- ``monitor``: describes topics and groups and reads committed offsets; writes nothing.
- ``spark-ingest``: reads its source topic (and Spark's own ``spark-kafka-source-*`` groups), writes
  the ingest topics in transactions ``<prefix>.sink.*`` (and, for records that do not parse, the
  deadletter topic), describes the
  leader groups (the sink's ``sync``), mirrors its offsets in its ``<prefix>.spark.<query>`` group.
- ``admin``: a super user (``super.users``), no ACLs: creates tables and runs the cluster.

:func:`cluster_plan` gives prefix ACLs that cover every table of a topic prefix (what ``shoal up
--secure`` applies, before any table exists); :func:`table_plan` gives the literal ACLs of one
table's partitions and placements (``shoal acl plan TABLE``, for an operator who grants per table).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from shoal.errors import ConfigError
from shoal.topics import TopicNames

ROLES = ("writer", "node", "monitor", "spark-ingest", "admin")
RESOURCE_TYPES = ("TOPIC", "GROUP", "TRANSACTIONAL_ID", "CLUSTER")
PATTERNS = ("LITERAL", "PREFIXED")
OPERATIONS = (
    "ALL",
    "READ",
    "WRITE",
    "CREATE",
    "DELETE",
    "ALTER",
    "DESCRIBE",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
)
CLUSTER_NAME = "kafka-cluster"
NODE_READER_GROUPS = ("shoal-wal-reader", "shoal-segments-reader", "shoal-watermarks", "shoal-bootstrap-probe")
"""The fixed group ids of a node's assign-only channel readers (:mod:`shoal.kafka.readers`, a new
leader's channel adoption and recovery, a joining replica's bootstrap probe): they commit nothing,
but a consumer with a group id looks up its coordinator, which needs the group's ACL."""
SPARK_SOURCE_GROUP_PREFIX = "spark-kafka-source-"
"""Spark's Kafka source names its (offset-less) consumer groups with this prefix."""


@dataclass(frozen=True, order=True)
class AclRule:
    """One ALLOW ACL: ``principal`` may ``operation`` on the resource (from any host)."""

    role: str
    principal: str
    resource_type: str
    name: str
    pattern: str
    operation: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ConfigError(f"unknown role {self.role!r}; roles: {', '.join(ROLES)}")
        if self.resource_type not in RESOURCE_TYPES or self.pattern not in PATTERNS or self.operation not in OPERATIONS:
            raise ConfigError(f"bad ACL {self}")

    def to_json(self) -> dict[str, str]:
        return {
            "role": self.role,
            "principal": self.principal,
            "resource_type": self.resource_type,
            "name": self.name,
            "pattern": self.pattern,
            "operation": self.operation,
            "permission": "ALLOW",
            "host": "*",
        }


def principal(username: str) -> str:
    """The Kafka principal of a SASL user."""
    return f"User:{username}"


def default_principals() -> dict[str, str]:
    """Role -> principal when each role's SASL user is named after the role (the local cluster)."""
    return {role: principal(role) for role in ROLES}


def _rules(role: str, who: str, resource: str, names: Iterable[str], pattern: str, ops: Sequence[str]) -> list[AclRule]:
    return [AclRule(role, who, resource, name, pattern, op) for name in names for op in ops]


_NODE_TOPIC_OPS = ("CREATE", "READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "DELETE")
"""ALTER_CONFIGS: a leader sets ``retention.ms=-1``/``retention.bytes=-1`` on its ingest topic and its
own channels when they were made without them (``create_topic(repair=True)``)."""
_NODE_GROUP_OPS = ("READ", "DESCRIBE")
_TXN_OPS = ("WRITE", "DESCRIBE")
_INGEST_WRITE_OPS = ("CREATE", "WRITE", "DESCRIBE", "READ")
"""Writing an ingest topic: a producer creates a missing one (with shoal's topic policy) first; a
streaming Spark sink's commit, and a producer routing by a map in which partitions it wrote to split,
read a split partition's ingest topic for the records its forwarder has not moved yet
(``shoal.kafka.backlog.unaccepted_ends``)."""
_METADATA_READ_OPS = ("READ", "DESCRIBE", "DESCRIBE_CONFIGS")
"""Reading the metadata topic: the store checks its configs (compacted) before it reads."""


def _refusal_reads(role: str, principal: str, topics: TopicNames) -> list[AclRule]:
    """A producer's ``sync()`` reads the deadletter topic for its refused messages (:mod:`producer.refusals`)."""
    return _rules(role, principal, "TOPIC", [topics.deadletter], "LITERAL", ("READ", "DESCRIBE")) + _rules(
        role, principal, "GROUP", [topics.refusals_group], "LITERAL", ("DESCRIBE",)
    )


def cluster_plan(
    topics: TopicNames, principals: dict[str, str] | None = None, *, source_topics: Sequence[str] = ()
) -> list[AclRule]:
    """Prefix ACLs for every table under ``topics.prefix`` (plus the Spark ingest job's
    ``source_topics``). ``principals``: role -> principal (default: users named after the roles)."""
    who = {**default_principals(), **(principals or {})}
    p = topics.prefix
    out: list[AclRule] = []
    # writer
    out += _rules("writer", who["writer"], "TOPIC", [f"{p}.ingest."], "PREFIXED", _INGEST_WRITE_OPS)
    out += _rules("writer", who["writer"], "TOPIC", [topics.metadata], "LITERAL", _METADATA_READ_OPS)
    out += _rules("writer", who["writer"], "GROUP", [f"{p}.leader."], "PREFIXED", ("DESCRIBE",))
    out += _refusal_reads("writer", who["writer"], topics)
    out += _sink_transactions("writer", who["writer"], topics)
    # node
    out += _rules("node", who["node"], "TOPIC", [f"{p}."], "PREFIXED", _NODE_TOPIC_OPS)
    out += _rules("node", who["node"], "GROUP", [f"{p}."], "PREFIXED", _NODE_GROUP_OPS)
    out += _rules("node", who["node"], "GROUP", NODE_READER_GROUPS, "LITERAL", _NODE_GROUP_OPS)
    out += _rules("node", who["node"], "TRANSACTIONAL_ID", [f"{p}."], "PREFIXED", _TXN_OPS)
    out += _rules("node", who["node"], "CLUSTER", [CLUSTER_NAME], "LITERAL", ("DESCRIBE", "IDEMPOTENT_WRITE"))
    # monitor
    out += _rules("monitor", who["monitor"], "TOPIC", [f"{p}."], "PREFIXED", ("DESCRIBE",))
    out += _rules("monitor", who["monitor"], "TOPIC", [topics.metadata], "LITERAL", _METADATA_READ_OPS)
    out += _rules("monitor", who["monitor"], "GROUP", [f"{p}."], "PREFIXED", ("DESCRIBE",))
    out += _rules("monitor", who["monitor"], "CLUSTER", [CLUSTER_NAME], "LITERAL", ("DESCRIBE",))
    # spark-ingest
    spark = who["spark-ingest"]
    out += _rules("spark-ingest", spark, "TOPIC", list(source_topics), "LITERAL", ("READ", "DESCRIBE"))
    out += _rules("spark-ingest", spark, "GROUP", [SPARK_SOURCE_GROUP_PREFIX], "PREFIXED", ("READ", "DESCRIBE"))
    out += _rules("spark-ingest", spark, "GROUP", [f"{p}.spark."], "PREFIXED", ("READ", "DESCRIBE"))
    out += _rules("spark-ingest", spark, "TOPIC", [f"{p}.ingest."], "PREFIXED", _INGEST_WRITE_OPS)
    out += _rules("spark-ingest", spark, "TOPIC", [topics.metadata], "LITERAL", _METADATA_READ_OPS)
    out += _rules("spark-ingest", spark, "GROUP", [f"{p}.leader."], "PREFIXED", ("DESCRIBE",))  # the sink's sync
    out += _rules("spark-ingest", spark, "TOPIC", [topics.deadletter], "LITERAL", _INGEST_WRITE_OPS)
    out += _refusal_reads("spark-ingest", spark, topics)
    out += _sink_transactions("spark-ingest", spark, topics)
    return sorted(set(out))


def table_plan(
    topics: TopicNames,
    partitions: Sequence[tuple[str, Sequence[int]]],
    principals: dict[str, str] | None = None,
) -> list[AclRule]:
    """Literal ACLs for one table: ``partitions`` = (partition_id, placement ids) of each of its
    partitions (from its METADATA file). Every name comes from :class:`shoal.topics.TopicNames`."""
    who = {**default_principals(), **(principals or {})}
    out: list[AclRule] = []
    for partition_id, placements in partitions:
        ingest = topics.ingest(partition_id)
        channels = [topics.wal(partition_id, pl) for pl in placements]
        channels += [topics.segments(partition_id, pl) for pl in placements]
        node_topics = [ingest, topics.compaction(partition_id), *channels]
        groups = [topics.leader_group(partition_id)]
        groups += [topics.replica_group(partition_id, pl) for pl in placements]
        groups += [topics.consume_group(partition_id, pl) for pl in placements]
        out += _rules("writer", who["writer"], "TOPIC", [ingest], "LITERAL", _INGEST_WRITE_OPS)
        # a split partition's ingest topic is read as "<leader group>.sink-check" by the streaming sink's
        # commit and a producer (shoal.kafka.backlog): a group id's coordinator lookup needs DESCRIBE
        sink_check = [topics.leader_group(partition_id), f"{topics.leader_group(partition_id)}.sink-check"]
        out += _rules("writer", who["writer"], "GROUP", sink_check, "LITERAL", ("DESCRIBE",))
        out += _rules("node", who["node"], "TOPIC", node_topics, "LITERAL", _NODE_TOPIC_OPS)
        out += _rules("node", who["node"], "GROUP", groups, "LITERAL", _NODE_GROUP_OPS)
        # a split's straggler forwarder (storage_node.roles.forward) commits as "<ingest>.forward"
        txn_ids = [*channels, f"{ingest}.forward", topics.compaction(partition_id)]
        out += _rules("node", who["node"], "TRANSACTIONAL_ID", txn_ids, "LITERAL", _TXN_OPS)
        out += _rules("monitor", who["monitor"], "TOPIC", [ingest, *channels], "LITERAL", ("DESCRIBE",))
        out += _rules("monitor", who["monitor"], "GROUP", groups, "LITERAL", ("DESCRIBE",))
        out += _rules("spark-ingest", who["spark-ingest"], "TOPIC", [ingest], "LITERAL", _INGEST_WRITE_OPS)
        out += _rules("spark-ingest", who["spark-ingest"], "GROUP", sink_check, "LITERAL", ("DESCRIBE",))
    shared = [topics.metadata, topics.deadletter]
    out += _rules("writer", who["writer"], "TOPIC", [topics.metadata], "LITERAL", _METADATA_READ_OPS)
    out += _rules("node", who["node"], "TOPIC", shared, "LITERAL", _NODE_TOPIC_OPS)
    out += _rules("node", who["node"], "GROUP", NODE_READER_GROUPS, "LITERAL", _NODE_GROUP_OPS)
    out += _rules("node", who["node"], "CLUSTER", [CLUSTER_NAME], "LITERAL", ("DESCRIBE", "IDEMPOTENT_WRITE"))
    out += _rules("monitor", who["monitor"], "TOPIC", [topics.metadata], "LITERAL", _METADATA_READ_OPS)
    out += _rules("spark-ingest", who["spark-ingest"], "TOPIC", [topics.metadata], "LITERAL", _METADATA_READ_OPS)
    out += _rules("spark-ingest", who["spark-ingest"], "TOPIC", [topics.deadletter], "LITERAL", _INGEST_WRITE_OPS)
    out += _refusal_reads("writer", who["writer"], topics)
    out += _refusal_reads("spark-ingest", who["spark-ingest"], topics)
    out += _sink_transactions("writer", who["writer"], topics)
    out += _sink_transactions("spark-ingest", who["spark-ingest"], topics)
    return sorted(set(out))


def _sink_transactions(role: str, principal: str, topics: TopicNames) -> list[AclRule]:
    """The Spark sink's streaming write tasks: one transactional id per query and Spark partition,
    ``<prefix>.sink.<query id>.<partition>`` (:func:`spark_jobs.sink.sink_transactional_id`)."""
    return _rules(role, principal, "TRANSACTIONAL_ID", [f"{topics.prefix}.sink."], "PREFIXED", _TXN_OPS)
