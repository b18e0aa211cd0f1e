"""node_spec: the one description of a storage node's command line, environment, port and data dir."""

from __future__ import annotations

import sys

import pytest

from shoal.errors import ConfigError
from shoal_app.cli.main import cli
from shoal_app.runtime.node_spec import (
    COMPOSE_FLIGHT_PORT,
    NodeTarget,
    compose_node_service,
    compose_target,
    local_target,
    node_id,
    node_spec,
    process_env,
)


def _local() -> NodeTarget:
    return local_target("/data/c", "/data/c/cluster.json", "127.0.0.1:2181", "127.0.0.1:9092", "pfx", "/root")


def test_local_node_command_is_shoal_node_with_the_cluster_file() -> None:
    spec = node_spec(2, _local(), 45000)
    assert spec.server_id == "node-2" and spec.data_dir == "/data/c/nodes/node-2"
    assert spec.argv == (
        sys.executable,
        "-m",
        "shoal_app.cli.main",
        "-v",
        "--cluster-file",
        "/data/c/cluster.json",
        "node",
        "--id",
        "node-2",
        "--data-dir",
        "/data/c/nodes/node-2",
        "--flight-host",
        "127.0.0.1",
        "--flight-port",
        "45000",
        "--metrics-host",
        "127.0.0.1",
        "--metrics-port",
        "0",
    )
    assert spec.env_dict == {
        "PYTHONUNBUFFERED": "1",
        "ARROW_DEFAULT_MEMORY_POOL": "system",
        "SHOAL_ZK_CONNECT": "127.0.0.1:2181",
        "SHOAL_BOOTSTRAP_SERVERS": "127.0.0.1:9092",
        "SHOAL_TOPIC_PREFIX": "pfx",
        "SHOAL_ZK_ROOT": "/root",
    }
    assert spec.log_path == "/data/c/nodes/node-2/node.log" and spec.marker == spec.data_dir


def test_the_command_line_parses_as_the_real_cli() -> None:
    """Every flag node_spec writes exists on `shoal node` (parsed by click, not run)."""
    for target, port in ((_local(), 45000), (compose_target(), COMPOSE_FLIGHT_PORT)):
        argv = list(node_spec(1, target, port).argv)
        args = argv[argv.index("-v") :]
        ctx = cli.make_context("shoal", args, resilient_parsing=True)
        command = cli.get_command(ctx, "node")
        assert command is not None
        node_args = args[args.index("node") + 1 :]
        parsed = command.make_context("node", node_args, parent=ctx)
        assert parsed.params["server_id"] == "node-1"
        assert parsed.params["flight_port"] == port
        assert parsed.params["metrics_port"] == target.metrics_port


def test_an_explicit_metrics_port_is_passed_and_checked() -> None:
    spec = node_spec(1, _local(), 45000, 45001)
    assert spec.metrics_port == 45001 and spec.argv[-2:] == ("--metrics-port", "45001")
    with pytest.raises(ConfigError, match="metrics port of node-1"):
        node_spec(1, _local(), 45000, 45000)


def test_compose_nodes_use_service_names_and_fixed_port() -> None:
    svc = compose_node_service(3)
    assert svc["command"] == [
        "shoal",
        "-v",
        "node",
        "--id",
        "node-3",
        "--data-dir",
        "/var/lib/shoal/nodes/node-3",
        "--flight-host",
        "node-3",
        "--flight-port",
        str(COMPOSE_FLIGHT_PORT),
        "--metrics-host",
        "0.0.0.0",
        "--metrics-port",
        "9464",
    ]
    assert svc["environment"]["SHOAL_ZK_CONNECT"] == "zookeeper:2181"  # type: ignore[index]


def test_process_env_takes_every_connection_variable_from_the_spec() -> None:
    spec = node_spec(1, _local(), 45000)
    inherited = {"PATH": "/bin", "SHOAL_ZK_CONNECT": "elsewhere:1/chroot", "SHOAL_ZK_ROOT": "/other"}
    env = process_env(spec, inherited)
    assert env["PATH"] == "/bin" and env["SHOAL_ZK_CONNECT"] == "127.0.0.1:2181" and env["SHOAL_ZK_ROOT"] == "/root"


@pytest.mark.parametrize("index", [0, -1, True, "1"])
def test_bad_node_index_is_rejected(index: object) -> None:
    with pytest.raises(ConfigError, match="node index"):
        node_id(index)  # type: ignore[arg-type]


@pytest.mark.parametrize("port", [0, 70000])
def test_bad_port_is_rejected(port: int) -> None:
    with pytest.raises(ConfigError, match="flight port of node-1"):
        node_spec(1, _local(), port)


def test_bad_target_is_rejected() -> None:
    with pytest.raises(ConfigError, match="zk_connect"):
        NodeTarget(program=("shoal",), data_root="/d", zk_connect=" ", bootstrap_servers="b:1")
    with pytest.raises(ConfigError, match="program"):
        NodeTarget(program=(), data_root="/d", zk_connect="z:1", bootstrap_servers="b:1")


def test_node_ids_are_valid_server_ids() -> None:
    assert [node_id(i) for i in (1, 2, 16)] == ["node-1", "node-2", "node-16"]
