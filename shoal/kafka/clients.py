"""The client factory: the only place a librdkafka configuration is built (DESIGN.md sections 1 and 11).

Every producer, consumer and admin client of shoal comes from here, so connection and security
settings are applied once and the same way. ``overrides`` use librdkafka's own names
(``**{"linger.ms": 5}``) so tuning carries over unchanged. librdkafka's log lines go to Python
logging (logger ``shoal.kafka.librdkafka``) instead of stderr; they are emitted when the client is
polled (``poll``/``consume``/``flush``; an admin client's by ``admin.poll(0)``, which the helpers of
:mod:`shoal.kafka.admin` call after each request).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from shoal.errors import ConfigError, ShoalError
from shoal.kafka.settings import KafkaSettings, Secret

librdkafka_log = logging.getLogger("shoal.kafka.librdkafka")


def client_config(settings: KafkaSettings, **overrides: Any) -> dict[str, Any]:
    """The librdkafka configuration for ``settings``: connection, security, passthrough, then
    ``overrides`` (librdkafka names; later wins)."""
    config: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap_servers,
        "security.protocol": settings.security_protocol,
        "logger": librdkafka_log,
    }
    optional = {
        "sasl.mechanism": settings.sasl_mechanism,
        "sasl.username": settings.sasl_username,
        "sasl.password": settings.sasl_password,
        "ssl.ca.location": settings.ssl_ca_location,
        "ssl.certificate.location": settings.ssl_certificate_location,
        "ssl.key.location": settings.ssl_key_location,
        "ssl.key.password": settings.ssl_key_password,
    }
    for key, value in optional.items():
        if value is not None:
            config[key] = value.reveal() if isinstance(value, Secret) else value
    config.update(settings.passthrough)
    config.update(overrides)
    return config


def producer(settings: KafkaSettings, *, transactional_id: str | None = None, **overrides: Any) -> Producer:
    """An idempotent producer (``acks=all``); transactional when ``transactional_id`` is given."""
    return Producer(producer_config(settings, transactional_id=transactional_id, **overrides))


def producer_config(
    settings: KafkaSettings, *, transactional_id: str | None = None, **overrides: Any
) -> dict[str, Any]:
    """The configuration :func:`producer` uses (idempotent, ``acks=all``, then ``overrides``)."""
    base: dict[str, Any] = {"enable.idempotence": True, "acks": "all"}
    if transactional_id is not None:
        base["transactional.id"] = transactional_id
    return client_config(settings, **{**base, **overrides})


def consumer(settings: KafkaSettings, *, group_id: str, read_committed: bool = True, **overrides: Any) -> Consumer:
    """A consumer of ``group_id`` that never commits on its own (``enable.auto.commit=false``) and
    reads only committed transactions unless ``read_committed`` is False."""
    base: dict[str, Any] = {
        "group.id": group_id,
        "enable.auto.commit": False,
        "isolation.level": "read_committed" if read_committed else "read_uncommitted",
    }
    return Consumer(client_config(settings, **{**base, **overrides}))


def admin(settings: KafkaSettings, **overrides: Any) -> AdminClient:
    """An admin client; a long-lived one should call ``poll(0)`` now and then to emit its log lines.

    It carries its ``settings`` (``shoal_settings``) so that committed offsets are read through
    consumers of the same connection (:func:`shoal.kafka.indexes.committed_offsets`)."""
    client = AdminClient(client_config(settings, **overrides))
    setattr(client, "shoal_settings", settings)  # noqa: B010 (a C extension type: mypy does not know it)
    return client


def spark_kafka_options(settings: KafkaSettings) -> dict[str, str]:
    """Spark's Kafka source and sink options (``kafka.*``, Java client names) for ``settings``.

    These are the Java client's settings, not librdkafka's: SASL becomes a JAAS line, the CA file a
    PEM trust store, a client certificate a PEM key store given by content (the Java client takes a
    PEM key store file only as one file holding both, so the two files are read here).
    ``passthrough`` is librdkafka-only and is not carried over. The result holds secrets: never log it.
    """
    options = {
        "kafka.bootstrap.servers": settings.bootstrap_servers,
        "kafka.security.protocol": settings.security_protocol,
    }
    if settings.sasl_mechanism is not None:
        options["kafka.sasl.mechanism"] = settings.sasl_mechanism
    if settings.sasl_username is not None and settings.sasl_password is not None:
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if (settings.sasl_mechanism or "PLAIN").upper() == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        user = _jaas_quote(settings.sasl_username)
        password = _jaas_quote(settings.sasl_password.reveal())
        options["kafka.sasl.jaas.config"] = f'{module} required username="{user}" password="{password}";'
    if settings.ssl_ca_location is not None:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = settings.ssl_ca_location
    if settings.ssl_certificate_location is not None and settings.ssl_key_location is not None:
        options["kafka.ssl.keystore.type"] = "PEM"
        options["kafka.ssl.keystore.certificate.chain"] = _read_pem(settings.ssl_certificate_location)
        options["kafka.ssl.keystore.key"] = _read_pem(settings.ssl_key_location)
        if settings.ssl_key_password is not None:
            options["kafka.ssl.key.password"] = settings.ssl_key_password.reveal()
    return options


def _read_pem(path: str) -> str:
    try:
        return Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the PEM file {path}: {exc}") from None


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


class KafkaAccessError(ShoalError):
    """Kafka refused this client at the door: authentication (SASL, TLS) failed, or nothing answered.

    ``door`` is ``"kafka"``; ``address`` the bootstrap servers; ``user`` the SASL user (None
    without SASL); ``reason`` librdkafka's own message (never a secret)."""

    def __init__(self, address: str, user: str | None, reason: str) -> None:
        self.door = "kafka"
        self.address = address
        self.user = user
        self.reason = reason
        who = f" as {user}" if user else ""
        super().__init__(f"Kafka at {address} refused the connection{who}: {reason}")


def check_access(settings: KafkaSettings, timeout_s: float = 10.0) -> int:
    """Connect with ``settings`` and list the brokers (their count); :class:`KafkaAccessError`
    within about ``timeout_s`` when authentication fails (a wrong password, an unknown user, an
    untrusted certificate) or no broker answers, instead of librdkafka's silent retries."""
    refused: list[str] = []

    def on_error(err: Any) -> None:
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED):
            refused.append(err.str())

    client = admin(settings, error_cb=on_error, **{"socket.timeout.ms": int(timeout_s * 1000)})
    deadline = time.monotonic() + timeout_s
    while True:  # in short slices: a refusal is reported (by error_cb, on poll) long before the timeout
        try:
            return len(client.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic()))).brokers)
        except KafkaException as exc:
            client.poll(0)
            if refused or time.monotonic() >= deadline:
                reason = refused[0] if refused else str(exc.args[0].str() if exc.args else exc)
                raise KafkaAccessError(settings.bootstrap_servers, settings.sasl_username, reason) from None
