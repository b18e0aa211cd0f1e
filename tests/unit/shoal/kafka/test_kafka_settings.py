"""ConnectionSettings.resolve: options, then SHOAL_* environment, then the cluster file, then defaults;
secrets never shown."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from shoal import cluster_file
from shoal.cluster_file import ClusterInfo
from shoal.errors import ConfigError
from shoal.kafka import clients
from shoal.kafka.settings import ConnectionSettings, KafkaSettings, Secret


def _cluster(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.json"
    cluster_file.write(
        path,
        ClusterInfo(
            data_dir=str(tmp_path),
            bootstrap_servers="file:9092",
            zk_connect="file:2181",
            kafka_cluster_id="x",
            brokers=1,
            topic_prefix="fromfile",
        ),
    )
    return path


def test_defaults_without_anything() -> None:
    s = ConnectionSettings.resolve({}, {}, None)
    assert s.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert (s.zk_hosts, s.zk_root, s.topic_prefix) == ("127.0.0.1:2181", "/shoal", "shoal")
    assert s.kafka.security_protocol == "PLAINTEXT" and s.zk_user is None


def test_options_win_over_environment_over_cluster_file(tmp_path: Path) -> None:
    path = _cluster(tmp_path)
    env = {"SHOAL_BOOTSTRAP_SERVERS": "env:9092", "SHOAL_TOPIC_PREFIX": "fromenv"}
    s = ConnectionSettings.resolve({"bootstrap_servers": "opt:9092", "zk_hosts": None}, env, path)
    assert s.kafka.bootstrap_servers == "opt:9092"
    assert s.topic_prefix == "fromenv"
    assert s.zk_hosts == "file:2181"
    s = ConnectionSettings.resolve({}, {}, path)
    assert (s.bootstrap_servers, s.zk_hosts, s.topic_prefix) == ("file:9092", "file:2181", "fromfile")


def test_cluster_file_not_read_when_options_name_both(tmp_path: Path) -> None:
    s = ConnectionSettings.resolve({"bootstrap_servers": "a:1", "zk_hosts": "b:2"}, {}, _cluster(tmp_path))
    assert s.topic_prefix == "shoal"


def test_missing_cluster_file_falls_back_to_defaults(tmp_path: Path) -> None:
    s = ConnectionSettings.resolve({}, {}, tmp_path / "absent.json")
    assert s.bootstrap_servers == "127.0.0.1:9092"


def test_security_from_environment() -> None:
    env = {
        "SHOAL_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "SHOAL_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "SHOAL_KAFKA_SASL_USERNAME": "alice",
        "SHOAL_KAFKA_SASL_PASSWORD": "s3cret",
        "SHOAL_KAFKA_SSL_CA_LOCATION": "/ca.pem",
        "SHOAL_ZK_USER": "zk",
        "SHOAL_ZK_PASSWORD": "zkpw",
    }
    s = ConnectionSettings.resolve({}, env, None)
    assert s.kafka.security_protocol == "SASL_SSL"
    assert s.kafka.sasl_password == Secret("s3cret") and s.zk_password is not None
    assert s.zk_password.reveal() == "zkpw"
    config = clients.client_config(s.kafka)
    assert config["sasl.password"] == "s3cret" and config["ssl.ca.location"] == "/ca.pem"
    spark = clients.spark_kafka_options(s.kafka)
    assert spark["kafka.bootstrap.servers"] == s.bootstrap_servers
    assert "ScramLoginModule" in spark["kafka.sasl.jaas.config"]


def test_secrets_hidden_in_repr_str_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    s = ConnectionSettings.resolve(
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "u",
            "sasl_password": "hunter2",
            "zk_user": "zk",
            "zk_password": "zkpass",
        },
        {},
        None,
    )
    assert str(Secret("hunter2")) == "***" and "hunter2" not in repr(Secret("hunter2"))
    for text in (repr(s), str(s), repr(s.kafka), f"{s}"):
        assert "hunter2" not in text and "zkpass" not in text
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("settings: %s %r", s, s.kafka)
    assert "hunter2" not in caplog.text and "zkpass" not in caplog.text
    assert s.kafka.sasl_password is not None and s.kafka.sasl_password.reveal() == "hunter2"


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"security_protocol": "SASL_SSL"}, "sasl_mechanism, sasl_username, sasl_password"),
        ({"security_protocol": "CARRIER_PIGEON"}, "security_protocol"),
        ({"zk_user": "zk"}, "zk_password"),
        ({"bogus": "x"}, "bogus"),
    ],
)
def test_config_errors_name_what_is_missing(options: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        ConnectionSettings.resolve(options, {}, None)


def test_kafka_settings_passthrough_and_overrides() -> None:
    s = KafkaSettings("h:1", passthrough={"client.id": "x", "linger.ms": "1"})
    config = clients.client_config(s, **{"linger.ms": 5})
    assert config["client.id"] == "x" and config["linger.ms"] == 5 and config["bootstrap.servers"] == "h:1"
    with pytest.raises(ConfigError):
        KafkaSettings("  ")
