"""Bad local input is refused while the command line is parsed, with one line and no traceback,
before anything connects: NaN and infinite numbers, hostile ids, unknown ACL roles, keys a column
cannot hold, ``~user`` paths that name no user, and a named cluster file that is not there."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from shoal.errors import ConfigError
from shoal.worker import Deadline
from shoal_app.cli.context import configure_logging, node_logging
from shoal_app.cli.main import cli
from shoal_app.cli.params import FiniteFloatRange

UNREACHABLE = ["--bootstrap-servers", "127.0.0.1:1", "--zk", "127.0.0.1:1"]


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    out: list[tuple[tuple[str, ...], click.Command]] = []
    for name, command in group.commands.items():
        out.append(((*prefix, name), command))
        if isinstance(command, click.Group):
            out += _commands(command, (*prefix, name))
    return out


def test_every_float_option_refuses_nan_and_infinity() -> None:
    """``click.FloatRange`` compares, and NaN fails no comparison: ``--timeout nan`` made ``shoal stop``
    never escalate to SIGKILL and every ``--wait`` loop never give up."""
    floats = [
        (path, p.name)
        for path, command in _commands(cli)
        for p in command.params
        if isinstance(p.type, click.types.FloatParamType)
    ]
    assert len(floats) > 10  # every --timeout, --interval, --flush-age, --replica-lag-max...
    loose = [(path, name) for path, name in floats if not isinstance(params_type(path, name), FiniteFloatRange)]
    assert loose == []


def params_type(path: tuple[str, ...], name: str | None) -> click.ParamType:
    command: click.Command = cli
    for part in path:
        assert isinstance(command, click.Group)
        command = command.commands[part]
    return next(p.type for p in command.params if p.name == name)


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "1e400"])
@pytest.mark.parametrize(
    "argv",
    [
        ["stop", "node-1", "--timeout"],
        ["write", "events", *UNREACHABLE, "--timeout"],
        ["table", "split", "events", "--at", "5", "--wait", *UNREACHABLE, "--timeout"],
        ["table", "rebalance", "events", *UNREACHABLE, "--timeout"],
        ["node", "--id", "node-1", *UNREACHABLE, "--replica-lag-max"],
        ["node", "--id", "node-1", *UNREACHABLE, "--flush-age"],
        ["monitor", "--interval"],
    ],
)
def test_a_float_option_of_nan_or_infinity_is_a_usage_error(argv: list[str], text: str) -> None:
    result = _run([*argv, text])
    assert result.exit_code == 2, result.output
    assert "is not a finite number" in result.output or "not in the range" in result.output


def test_a_nan_deadline_is_refused() -> None:
    with pytest.raises(ConfigError, match="nan"):
        Deadline(math.nan)
    assert Deadline(0.0).expired()


def test_compaction_and_rebalance_refuse_nan_and_infinite_durations() -> None:
    from metadata.rebalance import request_rebalance
    from metadata.zk_layout import ZkLayout
    from spark_jobs.compaction.policy import CompactionPolicy

    for bad in (math.nan, math.inf, 0.0):
        with pytest.raises(ConfigError):
            CompactionPolicy(max_age_s=bad)
        with pytest.raises(ConfigError):
            request_rebalance(None, ZkLayout(), "events", ttl_s=bad)  # refused before ZooKeeper is used


@pytest.mark.parametrize(
    "argv",
    [
        ["table", "describe", "../../etc"],
        ["verify", "a b"],
        ["offsets", "x/y"],
        ["write", "../../etc/passwd"],
        ["scan", "events\n"],
        ["acl", "plan", "_x"],
        ["table", "add-replica", "events", "abc", "--server", "../node"],
        ["node", "drain", "--id", "Node 1"],
    ],
)
def test_a_hostile_table_or_server_name_is_refused_before_connecting(argv: list[str]) -> None:
    """Checked while parsing: with ZooKeeper unreachable, the answer is the name, not a 10 s timeout."""
    result = _run([*argv, *UNREACHABLE], stdin=b"")
    assert result.exit_code == 2, result.output
    assert "must match" in result.output


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--principal", "writre=app"], "unknown role 'writre'"),
        (["--principal", "writer=a b"], "a user name is"),
        (["--principal", "writer=x,User:admin"], "a user name is"),
        (["--source-topic", "bad topic"], "a Kafka topic name"),
        (["--source-topic", ".."], "a Kafka topic name"),
        (["--source-topic", "x" * 250], "a Kafka topic name"),
    ],
)
def test_acl_plan_refuses_unknown_roles_and_names_kafka_would_not_take(argv: list[str], expected: str) -> None:
    result = _run(["acl", "plan", *argv, "--topic-prefix", "pfx"])
    assert result.exit_code == 2, result.output
    assert expected in result.output


def test_acl_plan_still_takes_every_role_and_a_dotted_topic() -> None:
    args = [
        a for role in ("writer", "node", "monitor", "spark-ingest", "admin") for a in ("--principal", f"{role}=u.1")
    ]
    result = _run(["acl", "plan", *args, "--source-topic", "raw.events-v1", "--topic-prefix", "pfx", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert "User:u.1" in result.output and "raw.events-v1" in result.output


def test_a_user_that_does_not_exist_in_a_path_is_a_config_error(tmp_path: Path) -> None:
    """``Path.expanduser`` raises RuntimeError for ``~nosuchuser``: every command, even ``--help`` of a
    group, was a traceback."""
    for argv, env in (
        (["--data-dir", "~shoal_no_such_user_x/d", "table", "--help"], {}),
        (["table", "--help"], {"SHOAL_CLUSTER_FILE": "~shoal_no_such_user_x/c.json"}),
        (["table", "--help"], {"SHOAL_CACHE_DIR": "~shoal_no_such_user_x/cache"}),
    ):
        result = CliRunner().invoke(cli, argv, env={"SHOAL_DATA_DIR": str(tmp_path), **env})
        assert result.exit_code == 2, result.output
        assert "cannot expand" in result.output and "~shoal_no_such_user_x" in result.output
        assert not isinstance(result.exception, RuntimeError)


def test_a_named_cluster_file_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    """Without it, the built-in defaults were used: maybe another cluster."""
    missing = tmp_path / "nope" / "cluster.json"
    result = CliRunner().invoke(cli, ["--cluster-file", str(missing), "acl", "plan"], env={})
    assert result.exit_code != 0
    assert f"the cluster file {missing}" in result.output and "does not exist" in result.output
    # a default cluster file that is not there is not an error: the built-in defaults apply
    result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "acl", "plan"], env={})
    assert result.exit_code == 0, result.output


def test_kazoo_warnings_are_quiet_for_commands_and_kept_for_a_node() -> None:
    kazoo = logging.getLogger("kazoo")
    try:
        configure_logging(0)
        assert kazoo.getEffectiveLevel() == logging.ERROR
        configure_logging(1)
        assert kazoo.level == logging.NOTSET
        configure_logging(0)
        node_logging()
        assert kazoo.level == logging.NOTSET
    finally:
        kazoo.setLevel(logging.NOTSET)


def _run(argv: list[str], stdin: bytes | None = None) -> Result:
    result = CliRunner().invoke(cli, argv, input=stdin, env={"SHOAL_CLUSTER_FILE": ""})
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@pytest.mark.parametrize(
    ("ctype", "text", "expected"),
    [
        ("uint64", "-1", "out of its range"),
        ("uint64", "18446744073709551616", "out of its range"),
        ("int32", "2147483648", "out of its range"),
        ("uint64", "1_000", "not a decimal integer"),
        ("uint64", "\u0663", "not a decimal integer"),
        ("uint64", " 7 ", "not a decimal integer"),
        ("uint64", "9" * 5000, "a 5000-digit key is out of its range"),
        ("binary", "abc", "take integer or string keys"),
        ("bool", "true", "take integer or string keys"),
        ("string", "\udcff", "is not valid text"),
    ],
)
def test_scan_keys_are_refused_when_the_key_column_cannot_hold_them(ctype: str, text: str, expected: str) -> None:
    from shoal.errors import SchemaError
    from shoal_app.cli.node import _parse_key

    with pytest.raises(SchemaError, match=expected):
        _parse_key(_table(ctype), text)


def test_scan_keys_the_column_holds_are_parsed() -> None:
    from shoal_app.cli.node import _parse_key

    assert _parse_key(_table("uint64"), "18446744073709551615") == 2**64 - 1
    assert _parse_key(_table("int64"), "-5") == -5
    assert _parse_key(_table("timestamp_ms"), "1700000000000") == 1_700_000_000_000
    assert _parse_key(_table("string"), "héllo") == "héllo"


def test_a_node_refuses_a_scan_key_its_column_cannot_hold_as_a_schema_error() -> None:
    """A scan request from another client reaches ``KeyFilter``: OverflowError and ArrowInvalid were
    not ShoalErrors, so the Flight server answered with a generic internal error."""
    import pyarrow as pa

    from shoal.errors import SchemaError
    from storage_node.replica.replica import KeyFilter

    col = pa.chunked_array([pa.array([1, 2, 3], pa.uint64())])
    for bad in (KeyFilter(key=-1), KeyFilter(low=2**64), KeyFilter(high="x")):
        with pytest.raises(SchemaError, match="scan key"):
            bad.mask(col)
    mask = KeyFilter(low=2, high=3).mask(col)
    assert mask is not None and mask.to_pylist() == [False, True, False]


def _table(ctype: str):  # type: ignore[no-untyped-def]
    from metadata.table import Column, ColumnType, TableDefinition

    return TableDefinition(
        name="t1",
        columns=(
            Column("k", ColumnType.parse(ctype), nullable=False),
            Column("p", ColumnType.UINT64, nullable=False),
            Column("v", ColumnType.STRING),
        ),
        primary_key=("k", "p"),  # scans filter on the first primary-key column, k
        partition_key="p",
    )


def test_fix_replication_names_the_kafka_it_could_not_reach(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from confluent_kafka import KafkaError

    from shoal.errors import KafkaOperationError
    from shoal.kafka.settings import KafkaSettings
    from shoal_app.cli import replication

    cause = KafkaError(KafkaError._TRANSPORT, "connection refused")

    def unreachable(admin: object, prefix: str) -> list[str]:
        raise KafkaOperationError("cannot list topics: transport failure", cause)

    monkeypatch.setattr(replication, "shoal_topics", unreachable)
    with pytest.raises(KafkaOperationError, match=r"Kafka at 127\.0\.0\.1:9") as caught:
        replication.fix_replication(
            KafkaSettings("127.0.0.1:9"), "shoal", tmp_path, wait=False, timeout_s=1.0, progress=print
        )
    assert caught.value.kafka_error is cause and caught.value.retriable is False
