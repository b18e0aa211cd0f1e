"""Real clusters for tests: the local runtime (default), an existing one, or testcontainers.

Chosen by the test entry point from the environment:
- default: the embedded local runtime (ZooKeeper + KRaft Kafka started from the jar cache);
- ``SHOAL_TEST_BOOTSTRAP_SERVERS`` + ``SHOAL_TEST_ZK_CONNECT``: an existing cluster, not stopped;
- ``SHOAL_TEST_BACKEND=docker``: containers via testcontainers (needs a Docker engine).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.errors import ConfigError, RuntimeLaunchError
from shoal_app.runtime import compose, images, launcher
from shoal_app.runtime.extras import require_extra
from shoal_app.runtime.ports import free_port

log = logging.getLogger(__name__)

KAFKA_IMAGE = images.KAFKA_IMAGE
ZOOKEEPER_IMAGE = images.ZOOKEEPER_IMAGE


@dataclass
class TestCluster:
    __test__ = False  # not a pytest test class

    bootstrap_servers: str
    zk_connect: str
    backend: str
    brokers: int = 1
    _stop: Callable[[], None] = field(default=lambda: None, repr=False)

    def close(self) -> None:
        self._stop()


def start_local(data_dir: Path, cache_dir: Path, brokers: int = 1) -> TestCluster:
    cfg = launcher.LocalClusterConfig(data_dir=data_dir, cache_dir=cache_dir, brokers=brokers, fresh=True)
    info = launcher.up(cfg)

    def stop() -> None:
        launcher.down(cfg.cluster_file)

    return TestCluster(info.bootstrap_servers, info.zk_connect, "local", brokers, stop)


def docker_engine_problem() -> str | None:
    """Why the docker backend cannot run here (None if a Docker engine answers)."""
    try:
        import docker
    except ImportError:
        return "the Docker extra is not installed (pip install 'shoal[docker]')"
    try:
        client = docker.from_env()  # type: ignore[attr-defined]
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # docker.errors.DockerException and the socket errors under it
        return f"no Docker engine answered ({type(exc).__name__}: {str(exc)[:200]})"
    return None


def docker_kafka_env(host_port: int, host: str = "localhost") -> dict[str, str]:
    """The single test broker: the compose cluster's broker settings (``shoal_app.runtime.compose.kraft_env``)."""
    return compose.kraft_env(1, 1, f"1@localhost:{compose.CONTROLLER_PORT}", host_port, f"{host}:{host_port}")


def start_docker() -> TestCluster:
    """ZooKeeper and one KRaft broker in containers, from the images and settings of docker/docker-compose.yml."""
    require_extra("docker", "SHOAL_TEST_BACKEND=docker")
    problem = docker_engine_problem()
    if problem is not None:
        raise RuntimeLaunchError(
            f"SHOAL_TEST_BACKEND=docker needs a running Docker engine, but {problem}. Start Docker (or point "
            "DOCKER_HOST at one), or unset SHOAL_TEST_BACKEND to use the embedded local cluster instead."
        )
    return _start_containers()  # pragma: no cover - needs a Docker engine


OWNER_LABEL = "org.shoal.owner-pid"
"""The pid of the test process that started a container: containers of dead owners are removed."""


def container_labels(pid: int) -> dict[str, str]:
    return {images.LABEL: "testcontainers", OWNER_LABEL: str(pid)}


def orphans(containers: list[tuple[str, Mapping[str, str]]], alive: Callable[[int], bool]) -> list[str]:
    """Ids of the backend's containers whose owning test process is gone (Ryuk's job, done by label)."""
    out = []
    for cid, labels in containers:
        if labels.get(images.LABEL) != "testcontainers":
            continue
        owner = labels.get(OWNER_LABEL, "")
        if not owner.isdigit() or not alive(int(owner)):
            out.append(cid)
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_orphans() -> None:  # pragma: no cover - needs a Docker engine
    import docker

    client = docker.from_env()  # type: ignore[attr-defined]
    try:
        found = client.containers.list(all=True, filters={"label": f"{images.LABEL}=testcontainers"})
        for cid in orphans([(c.id, c.labels) for c in found], _pid_alive):
            log.info("removing container %s of a test process that is gone", cid[:12])
            client.containers.get(cid).remove(force=True)
    finally:
        client.close()


def _publish_on_loopback(ports: dict[str, Any], container_port: int, host_port: int) -> None:
    """docker-py's ``(address, port)`` binding: published on 127.0.0.1 only (testcontainers' own
    ``with_bind_ports`` binds every interface)."""
    ports[str(container_port)] = ("127.0.0.1", host_port)


def _start_containers() -> TestCluster:  # pragma: no cover - needs a Docker engine
    # Ryuk's image cannot be pulled where no registry is reachable: containers carry our labels instead,
    # are stopped by the fixture, and those of a dead test process are removed at the next start.
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    _remove_orphans()
    labels = container_labels(os.getpid())
    zk_port = free_port()
    zk = DockerContainer(ZOOKEEPER_IMAGE).with_env("ZOO_4LW_COMMANDS_WHITELIST", "srvr,ruok").with_kwargs(labels=labels)
    _publish_on_loopback(zk.ports, 2181, zk_port)
    zk.start()
    # The broker advertises the host port it is published on, so the port is fixed before start.
    port = free_port()
    kafka = DockerContainer(KAFKA_IMAGE).with_kwargs(labels=labels)
    _publish_on_loopback(kafka.ports, port, port)
    for key, value in docker_kafka_env(port, "127.0.0.1").items():
        kafka = kafka.with_env(key, value)
    try:
        wait_for_logs(zk, "binding to port", timeout=60)
        kafka.start()
        wait_for_logs(kafka, "Kafka Server started", timeout=120)
    except BaseException:
        kafka.stop()
        zk.stop()
        raise

    def stop() -> None:
        kafka.stop()
        zk.stop()

    return TestCluster(f"127.0.0.1:{port}", f"127.0.0.1:{zk_port}", "docker", 1, stop)


def from_environment(env: Mapping[str, str], data_dir: Path, cache_dir: Path) -> TestCluster:
    bootstrap = env.get("SHOAL_TEST_BOOTSTRAP_SERVERS")
    zk = env.get("SHOAL_TEST_ZK_CONNECT")
    if bootstrap or zk:
        if not (bootstrap and zk):
            raise ConfigError("an existing cluster needs both SHOAL_TEST_BOOTSTRAP_SERVERS and SHOAL_TEST_ZK_CONNECT")
        return TestCluster(bootstrap, zk, "existing")
    backend = env.get("SHOAL_TEST_BACKEND", "local")
    if backend == "docker":
        return start_docker()
    if backend != "local":
        raise ConfigError(f"SHOAL_TEST_BACKEND must be 'local' or 'docker', got {backend!r}")
    return start_local(data_dir, cache_dir)
