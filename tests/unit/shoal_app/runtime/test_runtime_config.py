"""Pure parts of the local runtime: server configs, cluster file, jar POMs, validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shoal import cluster_file
from shoal.cluster_file import ClusterInfo, ProcessRecord
from shoal.errors import ClusterFileError, ConfigError, RuntimeLaunchError
from shoal.jvm import jars
from shoal_app.runtime import kafka, launcher
from shoal_app.runtime.ports import free_ports
from shoal_app.runtime.process import spawn


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


@pytest.mark.parametrize(("brokers", "rf", "isr"), [(1, 1, 1), (2, 2, 2), (3, 3, 2), (5, 3, 2)])
def test_replication_defaults_follow_broker_count(brokers: int, rf: int, isr: int) -> None:
    nodes = [kafka.BrokerPorts(i + 1, 9000 + i, 9100 + i) for i in range(brokers)]
    props = _props(kafka.server_properties(nodes[0], nodes, Path("/x")))
    assert props["default.replication.factor"] == str(rf)
    assert props["min.insync.replicas"] == str(isr)
    assert props["transaction.state.log.min.isr"] == str(isr)
    assert props["controller.quorum.voters"].count("@127.0.0.1:") == brokers
    assert props["listeners"].count("127.0.0.1") == 2  # loopback only
    assert props["auto.create.topics.enable"] == "false"


def test_cluster_ids_are_kafka_uuids() -> None:
    ids = {kafka.new_cluster_id() for _ in range(2000)}  # ~1 in 64 raw draws starts with '-'
    assert len(ids) == 2000 and all(len(i) == 22 and "=" not in i and not i.startswith("-") for i in ids)


def test_cluster_file_round_trip_and_errors(tmp_path: Path) -> None:
    info = ClusterInfo(
        data_dir="/d",
        bootstrap_servers="127.0.0.1:1",
        zk_connect="127.0.0.1:2",
        kafka_cluster_id="abc",
        brokers=1,
        processes=(ProcessRecord("zookeeper", 42, "/d/zoo.cfg", "/d/zk.log", 2),),
    )
    path = tmp_path / "cluster.json"
    cluster_file.write(path, info)
    assert cluster_file.read(path) == info
    with pytest.raises(ClusterFileError, match="no cluster file"):
        cluster_file.read(tmp_path / "missing.json")
    path.write_text("{not json")
    with pytest.raises(ClusterFileError, match="not valid JSON"):
        cluster_file.read(path)
    path.write_text(json.dumps({"version": 1, "data_dir": "/d"}))
    with pytest.raises(ClusterFileError, match="bad field"):
        cluster_file.read(path)
    path.write_text(json.dumps({"version": 99}))
    with pytest.raises(ClusterFileError, match="version"):
        cluster_file.read(path)


def test_bundle_pom_lists_pinned_coordinates() -> None:
    pom = jars._pom(jars.zookeeper_bundle())
    assert "<artifactId>zookeeper</artifactId><version>3.9.4</version>" in pom
    assert "netty-tcnative-boringssl-static" in pom  # excluded: native TLS jars for other platforms
    assert "org.apache.spark" in jars._pom(jars.spark_kafka_bundle("4.0.0"))


def test_complete_bundle_needs_no_maven(tmp_path: Path) -> None:
    bundle = jars.JarBundle("x", "1", ("g:a:1",))
    folder = bundle.directory(tmp_path)
    folder.mkdir(parents=True)
    (folder / "a-1.jar").write_bytes(b"")
    (folder / ".complete").write_text("g:a:1\n")
    assert jars.ensure_bundle(bundle, tmp_path, mvn="/nonexistent/mvn") == folder


def test_missing_maven_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeLaunchError, match="Maven"):
        jars.ensure_bundle(jars.JarBundle("x", "1", ("g:a:1",)), tmp_path, mvn="/nonexistent/mvn")


@pytest.mark.parametrize("kwargs", [{"brokers": 0}, {"brokers": 10}, {"nodes": -1}, {"kafka_heap_mb": 10}])
def test_local_cluster_config_is_validated(kwargs: dict[str, int], tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        launcher.LocalClusterConfig(data_dir=tmp_path, cache_dir=tmp_path, **kwargs)  # type: ignore[arg-type]


def test_free_ports_are_distinct() -> None:
    ports = free_ports(7)
    assert len(set(ports)) == 7


def test_spawn_requires_marker_in_command_line(tmp_path: Path) -> None:
    with pytest.raises(RuntimeLaunchError, match="marker"):
        spawn("x", ["sleep", "1"], log_path=tmp_path / "x.log", marker="not-there")
