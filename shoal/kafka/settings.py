"""Connection settings, typed and resolved once at the edge (DESIGN.md section 1).

:class:`KafkaSettings` says how to reach Kafka (addresses, security, passthrough librdkafka
settings); :class:`ConnectionSettings` adds ZooKeeper and the topic prefix. Every process builds
one with :meth:`ConnectionSettings.resolve` (options, then ``SHOAL_*`` environment variables, then
the cluster file of ``shoal up``, then defaults) and passes it down; library code never reads the
environment. Secrets are :class:`Secret` values, shown as ``***`` by ``repr``, ``str`` and logs.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from shoal import cluster_file, jsonio
from shoal.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_BOOTSTRAP_SERVERS = "127.0.0.1:9092"
DEFAULT_ZK_HOSTS = "127.0.0.1:2181"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class Secret:
    """A secret string: ``repr`` and ``str`` print ``'***'``; :meth:`reveal` gives the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise ConfigError(f"a secret must be a string, got {type(value).__name__}")
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "'***'"

    def __str__(self) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


MAX_POLICY_REPLICATION_FACTOR = 3
"""The replication factor of shoal's topics when the cluster has that many live brokers."""
MAX_POLICY_MIN_INSYNC_REPLICAS = 2
DEFAULT_LOG_SEGMENT_BYTES = 64 * 1024 * 1024
MIN_LOG_SEGMENT_BYTES = 1024 * 1024
"""Kafka 4 refuses a smaller ``segment.bytes``."""
"""``min.insync.replicas`` of shoal's topics when their replication factor allows it."""


@dataclass(frozen=True)
class TopicPolicy:
    """The replication of every topic shoal creates (DESIGN.md section 1): the one place that decides it.

    ``None`` means "as the cluster allows": replication factor min(3, live brokers) and
    ``min.insync.replicas`` min(2, replication factor). A configured replication factor is used as
    given (Kafka refuses one above the live brokers); a configured ``min.insync.replicas`` is capped
    by the replication factor, so an acks=all write never needs more copies than the topic has.
    """

    replication_factor: int | None = None
    min_insync_replicas: int | None = None
    log_segment_bytes: int | None = DEFAULT_LOG_SEGMENT_BYTES
    """Kafka ``segment.bytes`` of the topics shoal truncates itself (created with ``retention.ms=-1``:
    ingest, WAL and segments channels). Kafka frees the bytes below a log start offset moved by
    ``delete_records`` only a whole log segment at a time, so this bounds the bytes kept below each
    Tail (Kafka's 1 GiB default would keep up to that much per channel). None = the broker default."""

    def __post_init__(self) -> None:
        for name in ("replication_factor", "min_insync_replicas"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"topic_{name} must be an int >= 1, got {value!r:.40}")
        seg = self.log_segment_bytes
        if seg is not None and (isinstance(seg, bool) or not isinstance(seg, int) or seg < MIN_LOG_SEGMENT_BYTES):
            raise ConfigError(f"topic log_segment_bytes must be an int >= {MIN_LOG_SEGMENT_BYTES}, got {seg!r:.40}")
        if (
            self.replication_factor is not None
            and self.min_insync_replicas is not None
            and self.min_insync_replicas > self.replication_factor
        ):
            raise ConfigError(
                f"topic min_insync_replicas {self.min_insync_replicas} exceeds the replication factor "
                f"{self.replication_factor}"
            )

    def replication_factor_for(self, live_brokers: int) -> int:
        """The replication factor of a topic created on a cluster with ``live_brokers`` brokers."""
        if self.replication_factor is not None:
            return self.replication_factor
        return max(1, min(MAX_POLICY_REPLICATION_FACTOR, live_brokers))

    def retention_config(self, config: Mapping[str, str]) -> dict[str, str]:
        """Settings added to a topic created with ``config``: for a topic without time retention
        (``retention.ms=-1``, truncated by shoal's Tail), log segments of ``log_segment_bytes`` (at
        least its ``max.message.bytes``, so its largest record fits)."""
        if self.log_segment_bytes is None or str(config.get("retention.ms")) != "-1" or "segment.bytes" in config:
            return {}
        largest = int(config.get("max.message.bytes", 0))
        return {"segment.bytes": str(max(self.log_segment_bytes, largest))}

    def min_insync_replicas_for(self, replication_factor: int) -> int:
        """``min.insync.replicas`` of a topic with ``replication_factor`` replicas."""
        wanted = MAX_POLICY_MIN_INSYNC_REPLICAS if self.min_insync_replicas is None else self.min_insync_replicas
        return max(1, min(wanted, replication_factor))

    @classmethod
    def parse(cls, replication_factor: str | None, min_insync_replicas: str | None) -> TopicPolicy:
        """From option or environment text (empty or None: as the cluster allows)."""
        return cls(
            _positive_int("replication_factor", replication_factor),
            _positive_int("min_insync_replicas", min_insync_replicas),
        )


def _positive_int(name: str, text: str | None) -> int | None:
    if text is None or str(text).strip() == "":
        return None
    digits = str(text).strip()
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 9:  # not '1_0', '٣' or 5000 digits
        raise ConfigError(f"topic_{name} must be an int >= 1, got {text!r:.40}")
    return int(digits)


@dataclass(frozen=True)
class KafkaSettings:
    """How to reach Kafka. ``passthrough`` holds further librdkafka settings (librdkafka names) that
    every client gets; ``repr`` never shows the password."""

    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    """A client certificate (PEM) for brokers that require TLS client authentication (mutual TLS)."""
    ssl_key_location: str | None = None
    """The private key (PEM) of ``ssl_certificate_location``."""
    ssl_key_password: Secret | None = None
    """The password of an encrypted ``ssl_key_location``."""
    passthrough: Mapping[str, str] = field(default_factory=dict, hash=False, repr=False)
    """Not shown by ``repr``: librdkafka settings may hold credentials."""
    topics: TopicPolicy = field(default_factory=TopicPolicy)
    """The replication of every topic shoal creates (:func:`shoal.kafka.admin.create_topic`)."""

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            raise ConfigError("bootstrap_servers must be a non-empty host:port list")
        protocol = self.security_protocol.upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, got {protocol!r}")
        object.__setattr__(self, "security_protocol", protocol)
        for name in ("sasl_password", "ssl_key_password"):
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, Secret(getattr(self, name)))
        if (self.ssl_certificate_location is None) != (self.ssl_key_location is None):
            raise ConfigError("a TLS client certificate needs both ssl_certificate_location and ssl_key_location")
        if protocol.startswith("SASL_"):
            missing = [
                name
                for name, value in (
                    ("sasl_mechanism", self.sasl_mechanism),
                    ("sasl_username", self.sasl_username),
                    ("sasl_password", self.sasl_password),
                )
                if not value
            ]
            if missing:
                raise ConfigError(f"security_protocol {protocol} needs {', '.join(missing)}")
        if self.sasl_mechanism is not None and self.sasl_mechanism.upper() not in SASL_MECHANISMS:
            raise ConfigError(
                f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}, got {self.sasl_mechanism!r}"
            )
        object.__setattr__(self, "passthrough", {str(k): config_text(v) for k, v in self.passthrough.items()})

    @property
    def secured(self) -> bool:
        """Whether clients authenticate or encrypt (any protocol but PLAINTEXT)."""
        return self.security_protocol != "PLAINTEXT"

    def with_passthrough(self, **extra: str) -> KafkaSettings:
        """A copy with more passthrough settings (librdkafka names, given as ``**{"a.b": "v"}``)."""
        return replace(self, passthrough={**self.passthrough, **extra})


@dataclass(frozen=True)
class ScanSettings:
    """How the nodes' Arrow Flight scan servers are secured (DESIGN.md section 1): TLS with the CA in
    ``tls_ca_location`` (clients) and ``tls_cert_location`` / ``tls_key_location`` (servers), and
    Flight basic authentication with ``username`` / ``password`` (clients then carry the token
    the server hands out). All None = plain gRPC without authentication."""

    tls_ca_location: str | None = None
    tls_cert_location: str | None = None
    tls_key_location: str | None = None
    username: str | None = None
    password: Secret | None = None

    def __post_init__(self) -> None:
        if isinstance(self.password, str):
            object.__setattr__(self, "password", Secret(self.password))
        if (self.username is None) != (self.password is None):
            raise ConfigError("scan authentication needs both scan_username and scan_password (or neither)")
        if (self.tls_cert_location is None) != (self.tls_key_location is None):
            raise ConfigError("a TLS scan server needs both scan_tls_cert_location and scan_tls_key_location")

    @property
    def tls(self) -> bool:
        return self.tls_ca_location is not None or self.tls_cert_location is not None

    @property
    def scheme(self) -> str:
        """The Flight location scheme of a scan server (``grpc+tls`` when TLS is on)."""
        return "grpc+tls" if self.tls else "grpc"


@dataclass(frozen=True)
class ConnectionSettings:
    """Kafka, ZooKeeper and the topic prefix: everything a shoal process needs to find the cluster."""

    kafka: KafkaSettings
    zk_hosts: str
    zk_root: str = "/shoal"
    topic_prefix: str = "shoal"
    zk_user: str | None = None
    zk_password: Secret | None = None
    scan: ScanSettings = field(default_factory=ScanSettings)
    """TLS and authentication of the nodes' scan servers."""
    secrets_file: str | None = None
    """The secrets file the passwords were read from (a path, not a secret): what a process hands to
    the processes it starts (Spark's Python workers, see :meth:`public_options`) instead of a password."""

    def __post_init__(self) -> None:
        if not isinstance(self.zk_hosts, str) or not self.zk_hosts.strip():
            raise ConfigError("zk_hosts must be 'host:port[,host:port][/chroot]'")
        if isinstance(self.zk_password, str):
            object.__setattr__(self, "zk_password", Secret(self.zk_password))
        if (self.zk_user is None) != (self.zk_password is None):
            raise ConfigError("ZooKeeper digest auth needs both zk_user and zk_password (or neither)")

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka.bootstrap_servers

    @property
    def has_passwords(self) -> bool:
        """Whether any password is set (SASL, TLS key, ZooKeeper digest or scan authentication)."""
        k = self.kafka
        return any(p is not None for p in (k.sasl_password, k.ssl_key_password, self.zk_password, self.scan.password))

    def public_options(self) -> dict[str, str]:
        """The :meth:`resolve` options that give these settings back, without a single secret: the
        passwords are named only by ``secrets_file`` (a path), read by whoever resolves them.

        For processes started with options rather than this process's environment (the
        ``format("shoal")`` sink's Spark workers). Unset values are left out; ``kafka.passthrough``
        (librdkafka settings, which may hold credentials) is not carried over."""
        k, scan = self.kafka, self.scan
        values: dict[str, object | None] = {
            "bootstrap_servers": k.bootstrap_servers,
            "zk_hosts": self.zk_hosts,
            "zk_root": self.zk_root,
            "topic_prefix": self.topic_prefix,
            "security_protocol": k.security_protocol if k.secured else None,
            "sasl_mechanism": k.sasl_mechanism,
            "sasl_username": k.sasl_username,
            "ssl_ca_location": k.ssl_ca_location,
            "ssl_certificate_location": k.ssl_certificate_location,
            "ssl_key_location": k.ssl_key_location,
            "zk_user": self.zk_user,
            "scan_tls_ca_location": scan.tls_ca_location,
            "scan_tls_cert_location": scan.tls_cert_location,
            "scan_tls_key_location": scan.tls_key_location,
            "scan_username": scan.username,
            "secrets_file": self.secrets_file,
            "topic_replication_factor": k.topics.replication_factor,
            "topic_min_insync_replicas": k.topics.min_insync_replicas,
        }
        return {key: str(value) for key, value in values.items() if value is not None}

    @classmethod
    def plain(
        cls, bootstrap_servers: str, zk_hosts: str, topic_prefix: str = "shoal", zk_root: str = "/shoal"
    ) -> ConnectionSettings:
        """A cluster without security (tests, benchmarks, the local runtime)."""
        return cls(KafkaSettings(bootstrap_servers), zk_hosts, zk_root=zk_root, topic_prefix=topic_prefix)

    @classmethod
    def resolve(
        cls,
        options: Mapping[str, object | None],
        environ: Mapping[str, str],
        cluster_file_path: Path | None,
    ) -> ConnectionSettings:
        """The one place connection settings are resolved: ``options`` that are not None (or empty)
        win, then the ``SHOAL_*`` environment variables in ``environ``, then the cluster file at
        ``cluster_file_path`` (read only when Kafka or ZooKeeper is still open, and skipped when
        absent), then defaults (a local cluster on 127.0.0.1).

        Option keys: the field names (``bootstrap_servers``, ``zk_hosts``, ``zk_root``,
        ``topic_prefix``, ``zk_user``, ``zk_password``, ``security_protocol``, ``sasl_mechanism``,
        ``sasl_username``, ``sasl_password``, ``ssl_ca_location``, ``ssl_certificate_location``,
        ``ssl_key_location``, ``ssl_key_password``, ``scan_*`` (:class:`ScanSettings`),
        ``topic_replication_factor``, ``topic_min_insync_replicas``), ``secrets_file`` (a JSON file
        of mode 0600 holding the passwords not given otherwise, see :func:`read_secrets_file`) and
        ``kafka_passthrough`` (a mapping of librdkafka settings). ConfigError names what is missing
        or invalid.
        """
        unknown = set(options) - set(_ENV) - {"kafka_passthrough"}
        if unknown:
            raise ConfigError(f"unknown connection option(s): {', '.join(sorted(unknown))}")
        values: dict[str, str] = {}
        for key, var in _ENV.items():
            given = options.get(key)
            if given is not None and given != "":
                values[key] = given.reveal() if isinstance(given, Secret) else str(given)
            elif environ.get(var):
                values[key] = environ[var]
        if cluster_file_path is not None and not ("bootstrap_servers" in values and "zk_hosts" in values):
            values = {**_from_cluster_file(cluster_file_path), **values}
        if "secrets_file" in values:
            values = {**read_secrets_file(Path(values["secrets_file"])), **values}
        passthrough = options.get("kafka_passthrough") or {}
        if not isinstance(passthrough, Mapping):
            raise ConfigError("kafka_passthrough must be a mapping of librdkafka settings")

        def secret(key: str) -> Secret | None:
            return None if values.get(key) is None else Secret(values[key])

        try:
            kafka = KafkaSettings(
                bootstrap_servers=values.get("bootstrap_servers", DEFAULT_BOOTSTRAP_SERVERS),
                security_protocol=values.get("security_protocol", "PLAINTEXT"),
                sasl_mechanism=values.get("sasl_mechanism"),
                sasl_username=values.get("sasl_username"),
                sasl_password=secret("sasl_password"),
                ssl_ca_location=values.get("ssl_ca_location"),
                ssl_certificate_location=values.get("ssl_certificate_location"),
                ssl_key_location=values.get("ssl_key_location"),
                ssl_key_password=secret("ssl_key_password"),
                passthrough=passthrough,
                topics=TopicPolicy.parse(
                    values.get("topic_replication_factor"), values.get("topic_min_insync_replicas")
                ),
            )
            return cls(
                kafka=kafka,
                zk_hosts=values.get("zk_hosts", DEFAULT_ZK_HOSTS),
                zk_root=values.get("zk_root", "/shoal"),
                topic_prefix=values.get("topic_prefix", "shoal"),
                zk_user=values.get("zk_user"),
                zk_password=secret("zk_password"),
                scan=ScanSettings(
                    tls_ca_location=values.get("scan_tls_ca_location"),
                    tls_cert_location=values.get("scan_tls_cert_location"),
                    tls_key_location=values.get("scan_tls_key_location"),
                    username=values.get("scan_username"),
                    password=secret("scan_password"),
                ),
                secrets_file=values.get("secrets_file"),
            )
        except ConfigError as exc:
            named = ", ".join(f"{key} from {var}" for key, var in _ENV.items() if key in str(exc))
            raise ConfigError(f"{exc} (options, or the environment: {named})" if named else str(exc)) from exc


def config_text(value: object) -> str:
    """A librdkafka setting as text (booleans as ``true`` / ``false``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


class ConnectionFields:
    """Read-only shortcuts for a configuration that holds ``connection: ConnectionSettings``."""

    connection: ConnectionSettings

    @property
    def kafka(self) -> KafkaSettings:
        return self.connection.kafka

    @property
    def bootstrap_servers(self) -> str:
        return self.connection.kafka.bootstrap_servers

    @property
    def zk_hosts(self) -> str:
        return self.connection.zk_hosts

    @property
    def zk_root(self) -> str:
        return self.connection.zk_root

    @property
    def topic_prefix(self) -> str:
        return self.connection.topic_prefix


_ENV = {
    "bootstrap_servers": "SHOAL_BOOTSTRAP_SERVERS",
    "zk_hosts": "SHOAL_ZK_CONNECT",
    "topic_prefix": "SHOAL_TOPIC_PREFIX",
    "zk_root": "SHOAL_ZK_ROOT",
    "zk_user": "SHOAL_ZK_USER",
    "zk_password": "SHOAL_ZK_PASSWORD",
    "security_protocol": "SHOAL_KAFKA_SECURITY_PROTOCOL",
    "sasl_mechanism": "SHOAL_KAFKA_SASL_MECHANISM",
    "sasl_username": "SHOAL_KAFKA_SASL_USERNAME",
    "sasl_password": "SHOAL_KAFKA_SASL_PASSWORD",
    "ssl_ca_location": "SHOAL_KAFKA_SSL_CA_LOCATION",
    "ssl_certificate_location": "SHOAL_KAFKA_SSL_CERTIFICATE_LOCATION",
    "ssl_key_location": "SHOAL_KAFKA_SSL_KEY_LOCATION",
    "ssl_key_password": "SHOAL_KAFKA_SSL_KEY_PASSWORD",
    "scan_tls_ca_location": "SHOAL_SCAN_TLS_CA_LOCATION",
    "scan_tls_cert_location": "SHOAL_SCAN_TLS_CERT_LOCATION",
    "scan_tls_key_location": "SHOAL_SCAN_TLS_KEY_LOCATION",
    "scan_username": "SHOAL_SCAN_USERNAME",
    "scan_password": "SHOAL_SCAN_PASSWORD",
    "secrets_file": "SHOAL_SECRETS_FILE",
    "topic_replication_factor": "SHOAL_TOPIC_REPLICATION_FACTOR",
    "topic_min_insync_replicas": "SHOAL_TOPIC_MIN_INSYNC_REPLICAS",
}
"""Option key -> the environment variable that fills it when the option is not given."""

ENV_VARS = tuple(_ENV.values())
CONNECTION_KEYS = frozenset(_ENV)
"""The option keys :meth:`ConnectionSettings.resolve` reads (besides ``kafka_passthrough``)."""


SECRET_KEYS = frozenset({"sasl_password", "zk_password", "scan_password", "ssl_key_password"})
"""The option keys a secrets file may hold (and the only ones it may hold)."""
SECURITY_EXTRA = "security"
"""The cluster file's ``extra`` key holding a secured cluster's connection options (never a secret:
the passwords stay in the file its ``secrets_file`` names)."""


def read_secrets_file(path: Path) -> dict[str, str]:
    """The passwords in ``path``: a JSON object with keys among :data:`SECRET_KEYS`. The file must
    not be readable by group or others (mode 0600, as ssh insists for its keys)."""
    try:
        mode = path.stat().st_mode
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the secrets file {path}: {exc.strerror}") from None
    if mode & 0o077:
        raise ConfigError(f"the secrets file {path} is readable by others (mode {mode & 0o777:o}); chmod 600 it")
    try:
        data = jsonio.loads_checked(raw)
    except jsonio.BadJson as exc:
        raise ConfigError(f"the secrets file {path} is {exc.reason}") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ConfigError(f"the secrets file {path} must be a JSON object of strings")
    unknown = set(data) - SECRET_KEYS
    if unknown:
        raise ConfigError(f"the secrets file {path} has unknown key(s) {', '.join(sorted(unknown))}")
    return dict(data)


def write_secrets_file(path: Path, secrets: Mapping[str, Secret]) -> None:
    """Write ``secrets`` (keys among :data:`SECRET_KEYS`) to ``path`` with mode 0600, atomically."""
    unknown = set(secrets) - SECRET_KEYS
    if unknown:
        raise ConfigError(f"not secret keys: {', '.join(sorted(unknown))}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({k: v.reveal() for k, v in secrets.items()}, f)
    os.replace(tmp, path)


def _from_cluster_file(path: Path) -> dict[str, str]:
    """The defaults a cluster file gives; none when there is no file. A file that is there but cannot
    be read is an error (``ClusterFileError``): ignoring it would connect to the built-in defaults, which
    may be another cluster."""
    if not path.exists() and not path.is_symlink():
        log.debug("no cluster defaults: no cluster file at %s", path)
        return {}
    info = cluster_file.read(path)
    out = {"bootstrap_servers": info.bootstrap_servers, "zk_hosts": info.zk_connect, "topic_prefix": info.topic_prefix}
    security = info.extra.get(SECURITY_EXTRA)
    if isinstance(security, dict):
        out.update({k: str(v) for k, v in security.items() if k in _ENV and k not in SECRET_KEYS})
    return out
