"""`shoal acl plan TABLE`: the Kafka ACLs each role needs for a table (shoal.security.acls)."""

from __future__ import annotations

from typing import Any

import click

from metadata.client import MetadataClient
from metadata.metadata_file import retired_partitions
from shoal.errors import InvalidIdError, ShoalError
from shoal.ids import validate_sasl_user, validate_topic_name
from shoal.security.acls import ROLES, cluster_plan, principal, table_plan
from shoal.topics import TopicNames
from shoal_app.cli.connection import connection_options, metadata_config
from shoal_app.cli.context import emit, new_table, output_option, show
from shoal_app.cli.models import AclPlan, AclRuleJson
from shoal_app.cli.params import TABLE_NAME


@click.group("acl")
def acl_group() -> None:
    """Kafka ACLs of a secured cluster, one principal per role."""


@acl_group.command("plan")
@click.argument("table_name", required=False, type=TABLE_NAME)
@click.option(
    "--principal",
    "principals",
    multiple=True,
    metavar="ROLE=USER",
    help="The SASL user of a role (writer, node, monitor, spark-ingest); default: named after the role.",
)
@click.option("--source-topic", multiple=True, help="External topic the Spark ingest job reads (without TABLE).")
@output_option
@connection_options
def plan_command(
    table_name: str | None, principals: tuple[str, ...], source_topic: tuple[str, ...], output: str, **conn: Any
) -> None:
    """Print the ACLs each role needs: literal ACLs for TABLE's partitions and placements (read from
    its METADATA file), or, without TABLE, prefix ACLs covering every table of the topic prefix (what
    `shoal up --secure` applies). The admin role is a super user (super.users) and needs none."""
    who: dict[str, str] = {}
    for item in principals:
        role, sep, user = item.partition("=")
        if not sep or not user:
            raise click.BadParameter(f"expected ROLE=USER, got {item!r}", param_hint="--principal")
        if role not in ROLES:
            raise click.BadParameter(f"unknown role {role!r}; roles: {', '.join(ROLES)}", param_hint="--principal")
        try:
            who[role] = principal(validate_sasl_user(user))
        except InvalidIdError as exc:
            raise click.BadParameter(str(exc), param_hint="--principal") from None
    for topic in source_topic:
        try:
            validate_topic_name(topic)
        except InvalidIdError as exc:
            raise click.BadParameter(str(exc), param_hint="--source-topic") from None
    try:
        config = metadata_config(conn, check_access=table_name is not None)  # the cluster plan needs no Kafka
        topics = TopicNames(config.topic_prefix)
        if table_name is None:
            rules = cluster_plan(topics, who, source_topics=source_topic)
        else:
            with MetadataClient(config) as client:
                current = client.coordinator.current(table_name)
                # a split parent's ingest topic is still read (its straggler forwarder, the streaming
                # sink's commit) and truncated after SPLIT_FINALIZE took it out of METADATA
                retired = [r.entry for r in retired_partitions(client.coordinator.history(table_name))]
            partitions = [
                (p.partition_id, [s.placement_id for s in (*p.servers, *p.servers_joining)])
                for p in (*current.partitions, *retired)
            ]
            rules = table_plan(topics, partitions, who)
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    if output == "json":
        emit(AclPlan([AclRuleJson.model_validate(r.to_json()) for r in rules]), sort_keys=False)
        return
    table = new_table("role", "principal", "resource", "name", "pattern", "operation")
    for r in rules:
        table.add_row(r.role, r.principal, r.resource_type, r.name, r.pattern, r.operation)
    show(f"{len(rules)} ACLs (ALLOW, any host); admin is a super user", table)
