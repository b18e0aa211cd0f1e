"""What a secured process hands to the processes it starts: the ingest job's ``format("shoal")`` sink
options (every connection setting, the passwords only as the secrets file's path) and the monitor's
Kafka clients (the resolved settings, not the bare addresses)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from metadata.client import MetadataConfig
from monitor.collector import Collector
from monitor.config import MonitorConfig
from shoal.kafka.settings import SECRET_KEYS, ConnectionSettings, Secret, write_secrets_file
from spark_jobs.ingest import IngestConfig, shoal_format_options
from spark_jobs.settings import CONNECTION_OPTIONS, SinkSettings

PASSWORDS = {
    "sasl_password": "sasl-Pa55-0123456789",
    "zk_password": "zk-Pa55-0123456789",
    "scan_password": "scan-Pa55-0123456789",
}


def _secured(tmp_path: Path) -> ConnectionSettings:
    secrets = tmp_path / "secrets-writer.json"
    write_secrets_file(secrets, {k: Secret(v) for k, v in PASSWORDS.items()})
    options = {
        "bootstrap_servers": "b:9093",
        "zk_hosts": "z:2181/chroot",
        "zk_root": "/r",
        "topic_prefix": "px",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "writer",
        "ssl_ca_location": str(tmp_path / "ca.pem"),
        "zk_user": "shoal",
        "scan_tls_ca_location": str(tmp_path / "ca.pem"),
        "scan_username": "shoal-scan",
        "secrets_file": str(secrets),
        "topic_replication_factor": "2",
    }
    return ConnectionSettings.resolve(options, {}, None)


def test_public_options_carry_the_secrets_file_path_and_resolve_back(tmp_path: Path) -> None:
    conn = _secured(tmp_path)
    assert conn.secrets_file == str(tmp_path / "secrets-writer.json") and conn.has_passwords
    public = conn.public_options()
    assert not set(public) & SECRET_KEYS
    assert not any(pw in value for value in public.values() for pw in PASSWORDS.values())
    assert ConnectionSettings.resolve(public, {}, None) == conn
    plain = ConnectionSettings.plain("b:9092", "z:2181")
    assert not plain.has_passwords and plain.secrets_file is None
    assert plain.public_options() == {
        "bootstrap_servers": "b:9092",
        "zk_hosts": "z:2181",
        "zk_root": "/shoal",
        "topic_prefix": "shoal",
    }


def test_ingest_sink_options_name_every_setting_but_no_password(tmp_path: Path) -> None:
    conn = _secured(tmp_path)
    cfg = IngestConfig(
        source_topic="src", table="ev", connection=MetadataConfig(connection=conn), checkpoint=tmp_path, query_name="q"
    )
    options = cfg.sink_options()
    assert options["table"] == "ev" and options["zk"] == "z:2181/chroot" and options["bootstrapServers"] == "b:9093"
    assert options["secretsFile"] == conn.secrets_file and options["saslUsername"] == "writer"
    assert options["securityProtocol"] == "SASL_SSL" and options["zkUser"] == "shoal"
    assert {k.lower() for k in options} - {"table"} <= set(CONNECTION_OPTIONS)
    assert not any(pw in value for value in options.values() for pw in PASSWORDS.values())
    # what the sink resolves in Spark's Python workers (no environment, no cluster file): the same settings
    lowered = {k.lower(): v for k, v in options.items()}  # as Spark hands options over
    assert SinkSettings.from_options(lowered, env={}).connection.connection == conn


def test_passwords_from_the_environment_are_not_handed_over(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    env = {"SHOAL_KAFKA_SASL_PASSWORD": PASSWORDS["sasl_password"]}
    options = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "writer"}
    conn = ConnectionSettings.resolve(options, env, None)
    with caplog.at_level(logging.WARNING):
        out = shoal_format_options(conn)
    assert "secretsFile" not in out and PASSWORDS["sasl_password"] not in str(out)
    assert "SHOAL_SECRETS_FILE" in caplog.text and PASSWORDS["sasl_password"] not in caplog.text


def test_monitor_clients_use_the_secured_settings(tmp_path: Path) -> None:
    conn = _secured(tmp_path)
    collector = Collector(MonitorConfig(kafka=conn.kafka, topic_prefix="px"), list)
    try:
        assert collector.kafka.kafka == conn.kafka and collector.segments.kafka == conn.kafka
    finally:
        collector.close()


def test_cli_checks_kafka_access_first_on_a_secured_cluster_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shoal_app.cli import connection

    checked: list[str | None] = []
    monkeypatch.setattr(connection.clients, "check_access", lambda kafka: checked.append(kafka.sasl_username))
    secured = _secured(tmp_path).public_options()
    connection.connection_settings(secured, {})
    assert checked == ["writer"]
    connection.connection_settings(secured, {}, check_access=False)
    connection.connection_settings({"bootstrap_servers": "b:9092", "zk_hosts": "z:2181"}, {})
    assert checked == ["writer"]
