"""docker/docker-compose.yml: valid for docker-compose, generated, and in step with `shoal up`.

(a) ``docker-compose config`` (Debian's 1.29, offline) accepts the file; (b) as docker-compose reads
it, every storage node's command and environment are what ``node_spec`` produces, with the same
flags and variables as the launcher's nodes, and the brokers carry the launcher's broker settings.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from shoal.jvm.java import C1_ONLY
from shoal_app.runtime import compose, images, kafka
from shoal_app.runtime.node_spec import COMPOSE_FLIGHT_PORT, compose_target, local_target, node_spec

COMPOSE_FILE = Path(__file__).resolve().parents[3] / "docker" / "docker-compose.yml"


def _docker_compose() -> str:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail("docker-compose is not installed (scripts/system-deps.sh installs Debian's docker-compose)")
    return exe


@pytest.fixture(scope="module")
def resolved() -> dict[str, Any]:
    """The compose file as docker-compose itself reads it (`config`), parsed with docker-compose's own YAML."""
    exe = _docker_compose()
    proc = subprocess.run(
        [exe, "-f", str(COMPOSE_FILE), "config"], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, f"docker-compose config failed:\n{proc.stderr}"
    # docker-compose is a Python program; its interpreter has the YAML library it parses with.
    interpreter = Path(exe).read_text(errors="replace").splitlines()[0].removeprefix("#!").split()
    to_json = "import json, sys, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)"
    parsed = subprocess.run(
        [*interpreter, "-c", to_json], input=proc.stdout, capture_output=True, text=True, timeout=60, check=True
    )
    data: dict[str, Any] = json.loads(parsed.stdout)
    return data


def test_docker_compose_config_accepts_the_file() -> None:
    proc = subprocess.run(
        [_docker_compose(), "-f", str(COMPOSE_FILE), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_file_is_what_the_generator_renders() -> None:
    assert COMPOSE_FILE.read_text(encoding="utf-8") == compose.render(), (
        "docker/docker-compose.yml is out of date: run python -m shoal_app.runtime.compose --write"
    )


def test_services_of_the_test_cluster(resolved: dict[str, Any]) -> None:
    services = resolved["services"]
    expected = {
        "zookeeper",
        "kafka-1",
        "kafka-2",
        "kafka-3",
        "node-1",
        "node-2",
        "node-3",
        "spark-master",
        "spark-worker",
        "init",
        "ingest",
        "compact",
        "monitor",
    }
    assert set(services) == expected
    for name in expected - {"init", "ingest", "compact"}:
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    declared = set(resolved["volumes"])
    for name, svc in services.items():
        for volume in svc.get("volumes", []):
            source = volume.split(":", 1)[0]  # docker-compose 1.29 keeps the short syntax
            assert source in declared, f"{name}: {volume} is not a named volume"
    assert services["ingest"]["command"][:3] == ["shoal", "spark", "ingest"]
    assert services["compact"]["command"][:3] == ["shoal", "spark", "compact"]
    assert services["monitor"]["command"][:4] == ["shoal", "monitor", "--host", "0.0.0.0"]
    assert "8080" in services["monitor"]["command"]
    assert services["zookeeper"]["image"] == images.ZOOKEEPER_IMAGE


@pytest.mark.parametrize("index", [1, 2, 3])
def test_node_services_come_from_node_spec(resolved: dict[str, Any], index: int) -> None:
    spec = node_spec(index, compose_target(), COMPOSE_FLIGHT_PORT)
    svc = resolved["services"][spec.server_id]
    assert svc["command"] == list(spec.argv)
    assert svc["environment"] == spec.env_dict
    assert svc["image"] == images.SHOAL_IMAGE
    assert [v.split(":")[1] for v in svc["volumes"]] == [spec.data_dir]
    # The launcher's node differs only where the target does: same subcommand, flags and variables.
    local = node_spec(index, local_target("/d", "/d/cluster.json", "127.0.0.1:1", "127.0.0.1:2"), 40000 + index)
    flags = [a for a in local.argv[local.argv.index("node") :] if a.startswith("--")]
    assert [a for a in svc["command"][svc["command"].index("node") :] if a.startswith("--")] == flags
    assert svc["command"][svc["command"].index("--id") + 1] == local.server_id == f"node-{index}"
    assert set(svc["environment"]) == set(local.env_dict)
    assert svc["environment"]["SHOAL_ZK_CONNECT"] == "zookeeper:2181"


@pytest.mark.parametrize("broker", [1, 2, 3])
def test_brokers_carry_the_launchers_settings(resolved: dict[str, Any], broker: int) -> None:
    svc = resolved["services"][f"kafka-{broker}"]
    assert svc["image"] == images.KAFKA_IMAGE
    env = svc["environment"]
    nodes = [kafka.BrokerPorts(i, 9000 + i, 9100 + i) for i in (1, 2, 3)]
    launcher_props = dict(
        line.split("=", 1) for line in kafka.server_properties(nodes[0], nodes, Path("/x")).splitlines() if line
    )
    for key, value in kafka.cluster_settings(3).items():
        assert launcher_props[key] == str(value)
        assert env[next(iter(kafka.docker_env({key: value})))] == str(value), key
    assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3" and env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller" and env["KAFKA_NODE_ID"] == str(broker)
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].count("@kafka-") == 3
    assert env["KAFKA_JVM_OPTS"] == C1_ONLY  # the entrypoint appends it to the JVM's options


def test_docker_env_names_follow_the_image_convention() -> None:
    assert kafka.docker_env({"a.b_c-d": 1}) == {"KAFKA_A_B__C___D": "1"}


def test_every_shoal_command_in_compose_parses_with_the_real_cli(resolved: dict[str, Any]) -> None:
    """A renamed or removed option fails here, not in a container: each service's `shoal ...` command
    line is parsed by the click command it names (without running it)."""
    import click

    from shoal_app.cli.main import cli

    checked = []
    for name, service in resolved["services"].items():
        command = service.get("command")
        if not isinstance(command, list) or not command or command[0] != "shoal":
            continue
        cmd: click.Command | None = cli
        tokens = list(command[1:])
        while isinstance(cmd, click.Group):
            while tokens and tokens[0].startswith("-"):  # the group's own options (shoal -v node ...)
                opt = next((p for p in cmd.params if tokens[0] in getattr(p, "opts", ())), None)
                assert isinstance(opt, click.Option), f"{name}: {tokens[0]} is not an option of {cmd.name}"
                del tokens[: 1 if opt.is_flag or opt.count else 2]
            if not tokens and cmd.invoke_without_command:  # a group that runs by itself (shoal node --id ...)
                break
            assert tokens, f"{name}: {command} names no subcommand"
            cmd = cmd.get_command(click.Context(cmd), tokens.pop(0))
        assert cmd is not None, f"{name}: {command} names an unknown command"
        cmd.make_context(cmd.name or "", tokens)  # click.UsageError on an unknown option or a bad value
        checked.append(name)
    assert {"node-1", "ingest", "compact", "monitor"} <= set(checked), checked
