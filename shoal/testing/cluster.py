"""Real clusters for tests: the local runtime (default), an existing one, or testcontainers.

Chosen by the test entry point from the environment:
- default: the embedded local runtime (ZooKeeper + KRaft Kafka started from the jar cache);
- ``SHOAL_TEST_BOOTSTRAP_SERVERS`` + ``SHOAL_TEST_ZK_CONNECT``: an existing cluster, not stopped;
- ``SHOAL_TEST_BACKEND=docker``: containers via testcontainers (needs a Docker engine).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from shoal.errors import ConfigError, RuntimeLaunchError
from shoal.runtime import launcher, versions

log = logging.getLogger(__name__)

KAFKA_IMAGE = f"apache/kafka:{versions.KAFKA_VERSION}"
ZOOKEEPER_IMAGE = f"zookeeper:{versions.ZOOKEEPER_VERSION}"


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


def start_docker() -> TestCluster:  # pragma: no cover - needs a Docker engine
    try:
        import docker

        docker.from_env().ping()  # type: ignore[attr-defined]
    except Exception as exc:
        raise RuntimeLaunchError(
            "SHOAL_TEST_BACKEND=docker needs a running Docker engine, and none answered "
            f"({exc}). Unset SHOAL_TEST_BACKEND to use the embedded local cluster instead."
        ) from exc
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs
    from testcontainers.kafka import KafkaContainer

    zk = DockerContainer(ZOOKEEPER_IMAGE).with_exposed_ports(2181)
    zk.start()
    wait_for_logs(zk, "binding to port", timeout=60)
    kafka = KafkaContainer(KAFKA_IMAGE).with_kraft()
    kafka.start()

    def stop() -> None:
        kafka.stop()
        zk.stop()

    zk_connect = f"{zk.get_container_host_ip()}:{zk.get_exposed_port(2181)}"
    return TestCluster(kafka.get_bootstrap_server(), zk_connect, "docker", 1, stop)


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
