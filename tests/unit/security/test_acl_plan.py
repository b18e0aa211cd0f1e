"""The ACLs each role needs: checked against the names of shoal.topics (DESIGN.md section 3)."""

from __future__ import annotations

import pytest

from shoal.errors import ConfigError
from shoal.security.acls import AclRule, cluster_plan, table_plan
from shoal.topics import TopicNames

P1 = "a" * 32
T = TopicNames("pfx")


def _allowed(rules: list[AclRule], role: str, resource: str, name: str, op: str) -> bool:
    """Whether ``rules`` let ``role`` do ``op`` on the resource ``name`` (literal or prefix match)."""
    return any(
        r.role == role
        and r.resource_type == resource
        and r.operation in (op, "ALL")
        and (r.name == name if r.pattern == "LITERAL" else name.startswith(r.name))
        for r in rules
    )


@pytest.mark.parametrize("plan", ["cluster", "table"])
def test_least_privilege_per_role(plan: str) -> None:
    rules = cluster_plan(T) if plan == "cluster" else table_plan(T, [(P1, [1, 2])])
    wal, segments = T.wal(P1, 1), T.segments(P1, 2)
    replica_group = T.replica_group(P1, 2)
    # writer: writes ingest, reads metadata; never a channel, never a replica's group
    assert _allowed(rules, "writer", "TOPIC", T.ingest(P1), "WRITE")
    assert _allowed(rules, "writer", "TOPIC", T.metadata, "READ")
    assert not _allowed(rules, "writer", "TOPIC", wal, "READ")
    assert not _allowed(rules, "writer", "TOPIC", wal, "WRITE")
    assert not _allowed(rules, "writer", "GROUP", replica_group, "READ")
    assert not _allowed(rules, "writer", "TRANSACTIONAL_ID", wal, "WRITE")
    # node: its channels, DeleteRecords (DELETE), its groups and transactional ids
    for topic in (T.ingest(P1), wal, segments):
        for op in ("READ", "WRITE", "DELETE", "DESCRIBE"):
            assert _allowed(rules, "node", "TOPIC", topic, op), (topic, op)
    for group in (T.leader_group(P1), replica_group, T.consume_group(P1, 1)):
        assert _allowed(rules, "node", "GROUP", group, "READ")
    assert _allowed(rules, "node", "TRANSACTIONAL_ID", wal, "WRITE")
    # monitor: describes and reads offsets, writes nothing
    assert _allowed(rules, "monitor", "TOPIC", wal, "DESCRIBE")
    assert _allowed(rules, "monitor", "GROUP", replica_group, "DESCRIBE")
    assert not any(r.role == "monitor" and r.operation in ("WRITE", "CREATE", "DELETE", "ALL") for r in rules)
    # spark-ingest writes ingest topics only; admin is a super user (no ACLs)
    assert _allowed(rules, "spark-ingest", "TOPIC", T.ingest(P1), "WRITE")
    assert not _allowed(rules, "spark-ingest", "TOPIC", wal, "WRITE")
    assert _allowed(rules, "spark-ingest", "TOPIC", T.deadletter, "WRITE")  # records that do not parse
    assert _allowed(rules, "spark-ingest", "GROUP", T.leader_group(P1), "DESCRIBE")  # the sink's sync
    # a streaming sink's commit reads a split parent's ingest topic for records not forwarded yet
    for role in ("writer", "spark-ingest"):
        assert _allowed(rules, role, "TOPIC", T.ingest(P1), "READ"), role
        assert _allowed(rules, role, "GROUP", f"{T.leader_group(P1)}.sink-check", "DESCRIBE"), role
    # sync() reads the deadletter topic for the producer's refused messages (assign only: the group is a label)
    for role in ("writer", "spark-ingest"):
        assert _allowed(rules, role, "TOPIC", T.deadletter, "READ"), role
        assert _allowed(rules, role, "GROUP", T.refusals_group, "DESCRIBE"), role
        assert not _allowed(rules, role, "GROUP", T.refusals_group, "READ"), role
    assert not _allowed(rules, "writer", "TOPIC", T.deadletter, "WRITE")
    assert not any(r.role == "admin" for r in rules)


def test_other_prefix_is_not_covered() -> None:
    rules = cluster_plan(T)
    other = TopicNames("other")
    assert not _allowed(rules, "node", "TOPIC", other.wal(P1, 1), "READ")
    assert not _allowed(rules, "writer", "TOPIC", other.ingest(P1), "WRITE")


def test_a_streaming_sink_may_commit_its_task_transactions() -> None:
    from spark_jobs.sink import sink_transactional_id

    txn_id = sink_transactional_id(T.prefix, "0b6a1a30-6f0e-4c2e-9a57-1c1c2b7d6f10", 3)
    for rules in (cluster_plan(T), table_plan(T, [(P1, [3])])):
        for role in ("writer", "spark-ingest"):
            assert _allowed(rules, role, "TRANSACTIONAL_ID", txn_id, "WRITE"), role
        assert not _allowed(rules, "monitor", "TRANSACTIONAL_ID", txn_id, "WRITE")


def test_spark_source_topic_and_principals() -> None:
    rules = cluster_plan(T, {"spark-ingest": "User:etl"}, source_topics=["events"])
    assert any(r.principal == "User:etl" and r.name == "events" and r.operation == "READ" for r in rules)
    assert all(r.principal != "User:spark-ingest" for r in rules)


def test_table_plan_is_literal_and_sorted() -> None:
    rules = table_plan(T, [(P1, [3])])
    assert rules == sorted(set(rules))
    # the transactional ids a node commits with: its channels and a split's straggler forwarder
    for txn_id in (T.wal(P1, 3), T.segments(P1, 3), f"{T.ingest(P1)}.forward"):
        assert _allowed(rules, "node", "TRANSACTIONAL_ID", txn_id, "WRITE"), txn_id
    # literal, except the streaming Spark sink's transactional ids: one per query and Spark partition
    prefixed = {(r.role, r.resource_type, r.name) for r in rules if r.pattern != "LITERAL"}
    assert prefixed == {(role, "TRANSACTIONAL_ID", f"{T.prefix}.sink.") for role in ("writer", "spark-ingest")}
    assert rules[0].to_json()["permission"] == "ALLOW"
    with pytest.raises(ConfigError):
        AclRule("nobody", "User:x", "TOPIC", "t", "LITERAL", "READ")


def test_cli_prints_the_cluster_plan_as_json() -> None:
    import json

    from click.testing import CliRunner

    from shoal_app.cli.main import cli

    result = CliRunner().invoke(
        cli, ["acl", "plan", "--topic-prefix", "pfx", "--principal", "writer=app", "--output", "json"], env={}
    )
    assert result.exit_code == 0, result.output
    rules = json.loads(result.stdout)
    from shoal_app.schemas import validate

    validate("cli-acl-plan", rules)  # a list of ACL objects, as docs/schemas/cli-acl-plan.json says
    assert {r["role"] for r in rules} == {"writer", "node", "monitor", "spark-ingest"}
    assert any(r["principal"] == "User:app" and r["name"] == "pfx.ingest." for r in rules)
