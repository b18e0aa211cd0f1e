"""Shared fixtures: one real cluster per test session, and per-test isolation.

Every test gets its own topic prefix, consumer group ids and ZooKeeper chroot, so tests never
see each other's state even though they share one ZooKeeper and one Kafka.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from shoal.jvm import jars
from shoal_app.testing.cluster import TestCluster, from_environment

SERVER_FIXTURES = {"cluster", "zk", "zk_hosts", "kafka_admin", "spark"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses the real servers must say so with @pytest.mark.integration."""
    unmarked = [
        item.nodeid
        for item in items
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("integration") is None
    ]
    if unmarked:
        raise pytest.UsageError("tests using real servers need @pytest.mark.integration: " + ", ".join(unmarked))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI nothing may be skipped: a skipped server test is a test that did not run."""
    if os.environ.get("CI") != "true":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if skipped and session.exitstatus == 0:
        reporter.write_line(f"CI: {skipped} test(s) were skipped; in CI every test must run", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _cache_dir() -> Path:
    return jars.cache_dir_from(os.environ)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    """The real ZooKeeper + Kafka for this test session (started once, stopped at the end)."""
    c = from_environment(os.environ, tmp_path_factory.mktemp("cluster"), _cache_dir())
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def unique_id() -> str:
    return uuid.uuid4().hex[:12]


@pytest.fixture
def topic_prefix(unique_id: str) -> str:
    """A topic prefix no other test uses."""
    return f"t{unique_id}"


@pytest.fixture
def group_id(unique_id: str) -> str:
    """A consumer group id no other test uses (derive more with a suffix)."""
    return f"g{unique_id}"


@pytest.fixture
def zk_hosts(cluster: TestCluster, unique_id: str) -> Iterator[str]:
    """A ZooKeeper connect string with a fresh chroot, removed after the test."""
    chroot = f"/shoal-test/{unique_id}"
    admin = KazooClient(hosts=cluster.zk_connect, timeout=10)
    admin.start(timeout=30)
    admin.ensure_path(chroot)
    try:
        yield f"{cluster.zk_connect}{chroot}"
    finally:
        # A test may leave ACL-protected znodes; its chroot is unique, so they can stay.
        with contextlib.suppress(NoAuthError):
            admin.delete(chroot, recursive=True)
        admin.stop()
        admin.close()


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[KazooClient]:
    """A started kazoo client inside this test's chroot."""
    client = KazooClient(hosts=zk_hosts, timeout=10)
    client.start(timeout=30)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="session")
def kafka_admin(cluster: TestCluster):  # type: ignore[no-untyped-def]
    from shoal.kafka import clients
    from shoal.kafka.settings import KafkaSettings

    return clients.admin(KafkaSettings(cluster.bootstrap_servers))


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One local Spark session for the whole test session."""
    from spark_jobs.session import SparkConfig, build_session

    session = build_session(
        SparkConfig(
            cache_dir=_cache_dir(),
            master="local[2]",
            app_name="shoal-tests",
            shuffle_partitions=2,
            extra_conf=(("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse"))),),
        )
    )
    try:
        yield session
    finally:
        session.stop()
