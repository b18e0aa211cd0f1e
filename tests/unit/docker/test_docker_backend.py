"""SHOAL_TEST_BACKEND=docker: the same images and broker settings as the compose cluster, and a clear
message where no Docker engine answers (as on this machine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.errors import ConfigError, RuntimeLaunchError
from shoal_app.runtime import images, kafka
from shoal_app.testing import cluster


def test_without_a_docker_engine_the_backend_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")  # nothing listens there
    with pytest.raises(RuntimeLaunchError) as info:
        cluster.from_environment({"SHOAL_TEST_BACKEND": "docker"}, tmp_path / "data", tmp_path / "cache")
    message = str(info.value)
    assert "SHOAL_TEST_BACKEND=docker needs a running Docker engine" in message
    assert "no Docker engine answered" in message
    assert "unset SHOAL_TEST_BACKEND" in message
    assert not (tmp_path / "data").exists()  # nothing was started or created


def test_engine_problem_names_the_cause(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    problem = cluster.docker_engine_problem()
    assert problem is not None and problem.startswith("no Docker engine answered")


def test_unknown_backend_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'local' or 'docker'"):
        cluster.from_environment({"SHOAL_TEST_BACKEND": "podman"}, tmp_path, tmp_path)


def test_docker_backend_uses_the_compose_images_and_broker_settings() -> None:
    assert cluster.KAFKA_IMAGE == images.KAFKA_IMAGE and cluster.ZOOKEEPER_IMAGE == images.ZOOKEEPER_IMAGE
    env = cluster.docker_kafka_env(19092)
    for key, value in kafka.docker_env(kafka.cluster_settings(1)).items():
        assert env[key] == value
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://localhost:19092"
    assert env["KAFKA_LISTENERS"].startswith("PLAINTEXT://:19092,")
