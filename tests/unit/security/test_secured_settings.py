"""Security settings: resolved from options, environment, a 0600 secrets file and the cluster file of
``shoal up --secure``; mapped to librdkafka and Spark keys only by shoal.kafka.clients; never shown."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from shoal import cluster_file
from shoal.cluster_file import ClusterInfo
from shoal.errors import ConfigError
from shoal.kafka import clients
from shoal.kafka.settings import (
    SECURITY_EXTRA,
    ConnectionSettings,
    KafkaSettings,
    ScanSettings,
    Secret,
    read_secrets_file,
    write_secrets_file,
)

PASSWORD = "s3cret-Pa55"


def _secured(tmp_path: Path) -> KafkaSettings:
    return KafkaSettings(
        "h:9093",
        security_protocol="sasl_ssl",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="writer",
        sasl_password=Secret(PASSWORD),
        ssl_ca_location=str(tmp_path / "ca.pem"),
    )


def test_librdkafka_mapping_of_sasl_ssl(tmp_path: Path) -> None:
    config = clients.client_config(_secured(tmp_path))
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanism"] == "SCRAM-SHA-512"
    assert (config["sasl.username"], config["sasl.password"]) == ("writer", PASSWORD)
    assert config["ssl.ca.location"] == str(tmp_path / "ca.pem")
    assert "ssl.certificate.location" not in config


def test_client_certificate_mapping(tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    (tmp_path / "k.pem").write_text("-----BEGIN PRIVATE KEY-----\ny\n-----END PRIVATE KEY-----\n")
    kafka = KafkaSettings(
        "h:9093",
        security_protocol="SSL",
        ssl_ca_location="ca.pem",
        ssl_certificate_location=str(tmp_path / "c.pem"),
        ssl_key_location=str(tmp_path / "k.pem"),
        ssl_key_password=Secret("kp"),
    )
    config = clients.client_config(kafka)
    assert config["ssl.certificate.location"] == str(tmp_path / "c.pem")
    assert config["ssl.key.location"] == str(tmp_path / "k.pem")
    assert config["ssl.key.password"] == "kp"
    spark = clients.spark_kafka_options(kafka)
    assert spark["kafka.ssl.keystore.type"] == "PEM"
    assert "BEGIN PRIVATE KEY" in spark["kafka.ssl.keystore.key"]
    assert spark["kafka.ssl.key.password"] == "kp"
    with pytest.raises(ConfigError, match="both"):
        KafkaSettings("h:1", security_protocol="SSL", ssl_certificate_location="c.pem")


def test_spark_options_of_sasl_ssl(tmp_path: Path) -> None:
    spark = clients.spark_kafka_options(_secured(tmp_path))
    assert spark["kafka.security.protocol"] == "SASL_SSL"
    assert spark["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert spark["kafka.sasl.jaas.config"] == (
        f'org.apache.kafka.common.security.scram.ScramLoginModule required username="writer" password="{PASSWORD}";'
    )
    assert spark["kafka.ssl.truststore.type"] == "PEM"


def test_no_secret_in_repr_or_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conn = ConnectionSettings(
        _secured(tmp_path),
        "z:2181",
        zk_user="shoal",
        zk_password=Secret(PASSWORD + "zk"),
        scan=ScanSettings(tls_ca_location="ca.pem", username="scan", password=Secret(PASSWORD + "scan")),
    )
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("t").info("settings %s %r", conn, conn)
    for text in (repr(conn), str(conn), caplog.text):
        assert PASSWORD not in text
    assert conn.scan.scheme == "grpc+tls"
    assert ScanSettings().scheme == "grpc"


def test_secrets_file_is_0600_and_fills_passwords(tmp_path: Path) -> None:
    path = tmp_path / "secrets.json"
    write_secrets_file(path, {"sasl_password": Secret(PASSWORD), "zk_password": Secret("zkpw")})
    assert os.stat(path).st_mode & 0o777 == 0o600
    env = {
        "SHOAL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "SHOAL_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "SHOAL_KAFKA_SASL_USERNAME": "node",
        "SHOAL_ZK_USER": "shoal",
        "SHOAL_SECRETS_FILE": str(path),
    }
    s = ConnectionSettings.resolve({}, env, None)
    assert s.kafka.sasl_password == Secret(PASSWORD)
    assert s.zk_password == Secret("zkpw")
    given = ConnectionSettings.resolve({"sasl_password": "other"}, env, None)
    assert given.kafka.sasl_password == Secret("other")
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        read_secrets_file(path)
    os.chmod(path, 0o600)
    path.write_text('{"bogus": "x"}')
    with pytest.raises(ConfigError, match="unknown key"):
        read_secrets_file(path)


def test_cluster_file_records_security_without_secrets(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.json"
    write_secrets_file(secrets, {"sasl_password": Secret(PASSWORD)})
    path = tmp_path / "cluster.json"
    security = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "admin",
        "ssl_ca_location": str(tmp_path / "ca.pem"),
        "secrets_file": str(secrets),
        "sasl_password": "ignored: a cluster file never carries a secret",
    }
    cluster_file.write(
        path,
        ClusterInfo(
            data_dir=str(tmp_path),
            bootstrap_servers="f:9093",
            zk_connect="f:2181",
            kafka_cluster_id="x",
            brokers=1,
            extra={SECURITY_EXTRA: security},
        ),
    )
    s = ConnectionSettings.resolve({}, {}, path)
    assert s.kafka.security_protocol == "SASL_SSL" and s.kafka.sasl_username == "admin"
    assert s.kafka.sasl_password == Secret(PASSWORD)
