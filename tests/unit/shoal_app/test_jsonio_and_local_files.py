"""Every JSON file or line shoal reads from outside fails with one clear error of the caller's type:
nested deeper than Python's recursion limit, a number of more than 4300 digits, bytes that are not
UTF-8 (``json.loads`` raises RecursionError, ValueError and UnicodeDecodeError for those, not
``JSONDecodeError``). Also the other local inputs that raised tracebacks: a split point of thousands
of digits, an environment integer in another script, a node data dir that cannot be a directory."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from shoal import jsonio
from shoal.errors import ConfigError

DEEP = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
HUGE = b'{"a": ' + b"9" * 5000 + b"}"
NOT_UTF8 = b'{"a": "\xff\xfe"}'
BAD = pytest.mark.parametrize(
    ("data", "reason"), [(DEEP, "nested too deeply"), (HUGE, "not readable JSON"), (NOT_UTF8, "not UTF-8")]
)


@BAD
def test_loads_checked_turns_every_failure_into_bad_json(data: bytes, reason: str) -> None:
    with pytest.raises(jsonio.BadJson, match=reason):
        jsonio.loads_checked(data)
    assert jsonio.loads_checked(b'{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}


@BAD
def test_cluster_file(tmp_path: Path, data: bytes, reason: str) -> None:
    from shoal import cluster_file
    from shoal.errors import ClusterFileError

    path = tmp_path / "cluster.json"
    path.write_bytes(data)
    with pytest.raises(ClusterFileError, match=reason):
        cluster_file.read(path)


@BAD
def test_secrets_file(tmp_path: Path, data: bytes, reason: str) -> None:
    from shoal.kafka.settings import read_secrets_file

    path = tmp_path / "secrets.json"
    path.write_bytes(data)
    path.chmod(0o600)
    with pytest.raises(ConfigError, match=reason):
        read_secrets_file(path)


@BAD
def test_monitor_history(tmp_path: Path, data: bytes, reason: str) -> None:
    from monitor.errors import HistoryFileError
    from monitor.history import FILE_NAME, History

    (tmp_path / FILE_NAME).write_bytes(data)
    with pytest.raises(HistoryFileError, match=reason):
        History.load(tmp_path, keep_samples=10, keep_s=60.0, now=0.0)


@BAD
def test_demo_state(tmp_path: Path, data: bytes, reason: str) -> None:
    from shoal_app.demo.processes import DEMO_MARKER, DemoError, read_state

    (tmp_path / DEMO_MARKER).write_bytes(data)
    with pytest.raises(DemoError, match=reason):
        read_state(tmp_path)


@BAD
def test_table_create_schema_file(tmp_path: Path, data: bytes, reason: str) -> None:
    from shoal_app.cli.main import cli

    path = tmp_path / "schema.json"
    path.write_bytes(data)
    argv = ["table", "create", "t1", "--schema-file", str(path), "--server", "node-1", "--zk", "127.0.0.1:1"]
    result = CliRunner().invoke(cli, argv, env={"SHOAL_CLUSTER_FILE": ""})
    assert result.exit_code == 2, result.output
    assert reason in result.output and "--schema-file" in result.output and "Traceback" not in result.output


@BAD
def test_write_line(data: bytes, reason: str) -> None:
    from shoal_app.cli.main import cli

    stdin = b'{"k": 1}\n' + data + b"\n"
    argv = ["write", "events", "--bootstrap-servers", "127.0.0.1:1", "--zk", "127.0.0.1:1"]
    result = CliRunner().invoke(cli, argv, input=stdin, env={"SHOAL_CLUSTER_FILE": ""})
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: line 2: ") and "nothing was sent" in lines[0]


def test_write_lines_that_are_not_json_objects_are_exit_2_too() -> None:
    """One exit code for every bad input line (it was 1 for "not JSON", 2 for "not UTF-8")."""
    from shoal_app.cli.main import cli

    argv = ["write", "events", "--bootstrap-servers", "127.0.0.1:1", "--zk", "127.0.0.1:1"]
    for stdin, expected in ((b"{nope\n", "line 1: not valid JSON"), (b"[1]\n", "line 1: expected a JSON object")):
        result = CliRunner().invoke(cli, argv, input=stdin, env={"SHOAL_CLUSTER_FILE": ""})
        assert result.exit_code == 2 and expected in result.output, result.output


def test_a_split_point_of_thousands_of_digits_is_an_invalid_key() -> None:
    from metadata.errors import InvalidKeyError
    from metadata.keyspace import Keyspace

    for text in ("9" * 5000, "18446744073709551616" + "0"):
        with pytest.raises(InvalidKeyError):
            Keyspace.UINT64.parse_text(text)
    assert Keyspace.UINT64.parse_text("000018446744073709551615") == Keyspace.UINT64.encode(2**64 - 1)


@pytest.mark.parametrize("text", ["1_0", "\u0663", "+3", "3.0", "9" * 5000])
def test_environment_integers_are_ascii_digits(text: str) -> None:
    from shoal.kafka.settings import ConnectionSettings

    with pytest.raises(ConfigError, match="topic_replication_factor"):
        ConnectionSettings.resolve({}, {"SHOAL_TOPIC_REPLICATION_FACTOR": text}, None)


def test_a_node_data_dir_that_cannot_be_a_directory_is_a_config_error(tmp_path: Path) -> None:
    from metadata.client import MetadataConfig
    from shoal.kafka.settings import ConnectionSettings
    from storage_node.config import NodeConfig
    from storage_node.node import StorageNode

    (tmp_path / "file").write_text("x")
    settings = ConnectionSettings.resolve({"zk_hosts": "127.0.0.1:1", "bootstrap_servers": "127.0.0.1:1"}, {}, None)
    config = NodeConfig(server_id="node-1", data_dir=tmp_path / "file" / "node", connection=settings)
    errors: list[BaseException] = []

    def run() -> None:  # off the main thread: run() installs signal handlers only on the main thread
        try:
            StorageNode(config, metadata=MetadataConfig(connection=settings)).run()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], ConfigError), errors
    assert "cannot create the node data dir" in str(errors[0])


@pytest.mark.parametrize(("data", "reason"), [(DEEP, "nested too deeply"), (HUGE, "not readable JSON")])
def test_spark_ingest_avro_schema(data: bytes, reason: str) -> None:
    from spark_jobs.avro_source import parse_schema
    from spark_jobs.errors import IngestError

    with pytest.raises(IngestError, match=reason):
        parse_schema(data.decode())


def test_spark_ingest_avro_schema_file_that_is_not_utf8(tmp_path: Path) -> None:
    from shoal_app.cli.main import cli

    path = tmp_path / "bad.avsc"
    path.write_bytes(NOT_UTF8)
    argv = ["spark", "ingest", "--topic", "src", "--table", "t1", "--format", "avro", "--avro-schema", str(path)]
    result = CliRunner().invoke(cli, argv, env={"SHOAL_CLUSTER_FILE": ""})
    assert result.exit_code == 2, result.output
    assert "--avro-schema" in result.output and "utf-8" in result.output and "Traceback" not in result.output


def test_a_cluster_file_with_bad_fields_is_one_line_naming_them(tmp_path: Path) -> None:
    """It was pydantic's multi-line dump with a documentation link per field."""
    from shoal import cluster_file
    from shoal.errors import ClusterFileError

    path = tmp_path / "cluster.json"
    path.write_text('{"version": 1, "brokers": "three"}')
    with pytest.raises(ClusterFileError) as info:
        cluster_file.read(path)
    message = str(info.value)
    assert "\n" not in message and "pydantic.dev" not in message
    assert "bootstrap_servers: Field required" in message and "brokers: Input should be a valid integer" in message
