"""How a storage node is started: the one place that says its command line, environment, port and data dir.

``shoal up --nodes N`` (:mod:`shoal_app.runtime.launcher`) and the compose test cluster
(``docker/docker-compose.yml``, checked by ``tests/unit/docker/test_compose.py``) both build their
storage nodes from :func:`node_spec`, so the two cannot drift. What differs between them is only the
:class:`NodeTarget`: which program runs ``shoal``, where data lives, how the cluster is reached and
which address the node serves scans on. DESIGN.md section 1 (one process per node).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from shoal.errors import ConfigError
from shoal.ids import validate_server_id
from storage_node.allocator import ARROW_POOL_ENV, DEFAULT_ARROW_MEMORY_POOL

COMPOSE_FLIGHT_PORT = 8815
"""The port each node serves scans on inside its container (every container has its own address)."""
COMPOSE_METRICS_PORT = 9464
"""The port each node serves Prometheus ``/metrics`` on inside its container."""
COMPOSE_DATA_ROOT = "/var/lib/shoal/nodes"
COMPOSE_ZK_CONNECT = "zookeeper:2181"
COMPOSE_BOOTSTRAP_SERVERS = "kafka-1:9092,kafka-2:9092,kafka-3:9092"

CONNECTION_ENV = ("SHOAL_ZK_CONNECT", "SHOAL_BOOTSTRAP_SERVERS", "SHOAL_TOPIC_PREFIX", "SHOAL_ZK_ROOT")
"""Variables the node reads at its CLI entry point; the spec always sets every one of them."""


def node_id(index: int) -> str:
    """The server id of the ``index``-th node (1-based): node-1, node-2, ..."""
    if isinstance(index, bool) or not isinstance(index, int) or index < 1:
        raise ConfigError(f"node index must be an int >= 1, got {index!r}")
    return validate_server_id(f"node-{index}")


@dataclass(frozen=True)
class NodeTarget:
    """Where storage nodes run (the local runtime or the compose cluster)."""

    program: tuple[str, ...]
    """How to run the shoal CLI: (python, -m, shoal_app.cli.main) locally, (shoal,) in the image."""
    data_root: str
    """Node i keeps its data (and, locally, its log) in <data_root>/node-i."""
    zk_connect: str
    bootstrap_servers: str
    topic_prefix: str = "shoal"
    zk_root: str = "/shoal"
    cluster_file: str | None = None
    """Passed as ``shoal --cluster-file`` (the local runtime); None in containers."""
    flight_host: str | None = None
    """Address each node binds and advertises for scans; None = the node's own id (its compose hostname)."""
    metrics_port: int | None = None
    """Every node's ``--metrics-port`` (Prometheus ``/metrics``): a fixed port where each node has its own
    address (compose), 0 = any free port (local; the node logs the address); None = no exporter."""
    log_level: str = "-v"
    """Verbosity flag of the node command (info logging, so the node log says what it leads)."""
    extra_env: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.program:
            raise ConfigError("NodeTarget.program must name the shoal command")
        if not self.data_root:
            raise ConfigError("NodeTarget.data_root must be a directory")
        for name in ("zk_connect", "bootstrap_servers", "topic_prefix", "zk_root"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"NodeTarget.{name} must be a non-empty string, got {value!r}")
        if self.metrics_port is not None and not 0 <= self.metrics_port < 65536:
            raise ConfigError(f"NodeTarget.metrics_port must be in [0, 65535], got {self.metrics_port!r}")
        if self.log_level not in ("", "-v", "-vv"):
            raise ConfigError(f"NodeTarget.log_level must be '', '-v' or '-vv', got {self.log_level!r}")


@dataclass(frozen=True)
class NodeSpec:
    """Everything needed to start one storage node."""

    server_id: str
    data_dir: str
    flight_host: str
    flight_port: int
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    metrics_port: int | None = None
    """Port of the node's Prometheus exporter (``--metrics-port``); None = no exporter."""

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def log_path(self) -> str:
        return f"{self.data_dir}/node.log"

    @property
    def marker(self) -> str:
        """A string that appears only in this node's command line (its data dir)."""
        return self.data_dir


def node_spec(index: int, target: NodeTarget, flight_port: int, metrics_port: int | None = None) -> NodeSpec:
    """The command line, environment, ports and data dir of node ``index`` (1-based) on ``target``.

    ``metrics_port``: serve Prometheus ``/metrics`` there (``shoal node --metrics-port``); None = the
    target's (:attr:`NodeTarget.metrics_port`).
    """
    server_id = node_id(index)
    if not 0 < flight_port < 65536:
        raise ConfigError(f"flight port of {server_id} must be in [1, 65535], got {flight_port}")
    if metrics_port is None:
        metrics_port = target.metrics_port
    if metrics_port is not None and (not 0 <= metrics_port < 65536 or metrics_port == flight_port):
        raise ConfigError(
            f"metrics port of {server_id} must be in [0, 65535] and not its flight port, got {metrics_port}"
        )
    data_dir = f"{target.data_root.rstrip('/')}/{server_id}"
    host = target.flight_host or server_id
    argv = [*target.program]
    if target.log_level:
        argv.append(target.log_level)
    if target.cluster_file:
        argv += ["--cluster-file", target.cluster_file]
    argv += [
        "node",
        "--id",
        server_id,
        "--data-dir",
        data_dir,
        "--flight-host",
        host,
        "--flight-port",
        str(flight_port),
    ]
    if metrics_port is not None:
        argv += [
            "--metrics-host",
            "127.0.0.1" if target.flight_host == "127.0.0.1" else "0.0.0.0",
            "--metrics-port",
            str(metrics_port),
        ]
    env = {
        "PYTHONUNBUFFERED": "1",
        # Arrow C++ reads its default pool once, at start (storage_node.allocator): set here, so `shoal node`
        # need not re-execute itself to set it
        ARROW_POOL_ENV: DEFAULT_ARROW_MEMORY_POOL,
        "SHOAL_ZK_CONNECT": target.zk_connect,
        "SHOAL_BOOTSTRAP_SERVERS": target.bootstrap_servers,
        "SHOAL_TOPIC_PREFIX": target.topic_prefix,
        "SHOAL_ZK_ROOT": target.zk_root,
        **dict(target.extra_env),
    }
    return NodeSpec(server_id, data_dir, host, flight_port, tuple(argv), tuple(sorted(env.items())), metrics_port)


def local_target(
    data_dir: str,
    cluster_file: str,
    zk_connect: str,
    bootstrap_servers: str,
    topic_prefix: str = "shoal",
    zk_root: str = "/shoal",
) -> NodeTarget:
    """Nodes of ``shoal up``: this Python, data and logs under <data_dir>/nodes, serving on 127.0.0.1."""
    return NodeTarget(
        program=(sys.executable, "-m", "shoal_app.cli.main"),
        data_root=f"{data_dir.rstrip('/')}/nodes",
        zk_connect=zk_connect,
        bootstrap_servers=bootstrap_servers,
        topic_prefix=topic_prefix,
        zk_root=zk_root,
        cluster_file=cluster_file,
        flight_host="127.0.0.1",
        metrics_port=0,
    )


def compose_target() -> NodeTarget:
    """Nodes of docker/docker-compose.yml: the ``shoal`` entry point of the image, one container each."""
    return NodeTarget(
        program=("shoal",),
        data_root=COMPOSE_DATA_ROOT,
        zk_connect=COMPOSE_ZK_CONNECT,
        bootstrap_servers=COMPOSE_BOOTSTRAP_SERVERS,
        metrics_port=COMPOSE_METRICS_PORT,
    )


def compose_node_service(index: int) -> dict[str, object]:
    """The compose service fields that node_spec decides (command, environment, volume mount point)."""
    spec = node_spec(index, compose_target(), COMPOSE_FLIGHT_PORT)
    return {"command": list(spec.argv), "environment": spec.env_dict, "data_dir": spec.data_dir}


def process_env(spec: NodeSpec, inherited: Mapping[str, str]) -> dict[str, str]:
    """The environment of a locally started node: the caller's, with every connection variable from the spec."""
    env = {k: v for k, v in inherited.items() if k not in CONNECTION_ENV}
    env.update(spec.env)
    return env
