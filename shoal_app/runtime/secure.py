"""What ``shoal up --secure`` adds to the local cluster: a local CA and certificates, one SCRAM user
per role, the ZooKeeper digest identity and the scan servers' credentials, kept under
``<data_dir>/security`` (private keys and secrets with mode 0600).

Each role gets its own secrets file (:func:`shoal.kafka.settings.write_secrets_file`) and its own
connection options (:meth:`SecureCluster.options`), the way an operator would hand them out: the
cluster file records the admin's options (no secret, only the path of its secrets file); the
storage nodes run as the ``node`` principal.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from metadata.security import ZkSecurity
from shoal.cluster_file import ClusterInfo
from shoal.errors import ConfigError, RuntimeLaunchError
from shoal.kafka import clients
from shoal.kafka.settings import SECURITY_EXTRA, ConnectionSettings, KafkaSettings, Secret, write_secrets_file
from shoal.security import certs
from shoal.security.acls import ROLES, AclRule
from shoal_app.runtime.kafka import BrokerSecurity

SASL_MECHANISM = "SCRAM-SHA-512"
ADMIN = "admin"
ZK_USER = "shoal"
SCAN_USER = "shoal-scan"
_STATE = "credentials.json"

ENV_OF_OPTION = {
    "security_protocol": "SHOAL_KAFKA_SECURITY_PROTOCOL",
    "sasl_mechanism": "SHOAL_KAFKA_SASL_MECHANISM",
    "sasl_username": "SHOAL_KAFKA_SASL_USERNAME",
    "ssl_ca_location": "SHOAL_KAFKA_SSL_CA_LOCATION",
    "zk_user": "SHOAL_ZK_USER",
    "scan_tls_ca_location": "SHOAL_SCAN_TLS_CA_LOCATION",
    "scan_tls_cert_location": "SHOAL_SCAN_TLS_CERT_LOCATION",
    "scan_tls_key_location": "SHOAL_SCAN_TLS_KEY_LOCATION",
    "scan_username": "SHOAL_SCAN_USERNAME",
    "secrets_file": "SHOAL_SECRETS_FILE",
}


@dataclass(frozen=True)
class SecureCluster:
    directory: Path
    ca: certs.CertFiles
    server: certs.CertFiles
    """Kafka's listeners and the nodes' scan servers (valid for 127.0.0.1 and localhost)."""
    keystore: Path
    keystore_password: Secret
    passwords: Mapping[str, Secret]
    """Role (SCRAM user) -> password."""
    zk_password: Secret
    scan_password: Secret

    def secrets_file(self, role: str) -> Path:
        return self.directory / f"secrets-{role}.json"

    def options(self, role: str) -> dict[str, str]:
        """The connection options of ``role`` (no secret: the passwords are in its secrets file)."""
        if role not in self.passwords:
            raise ConfigError(f"unknown role {role!r}; roles: {', '.join(self.passwords)}")
        out = {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": SASL_MECHANISM,
            "sasl_username": role,
            "ssl_ca_location": str(self.ca.cert),
            "zk_user": ZK_USER,
            "scan_tls_ca_location": str(self.ca.cert),
            "scan_username": SCAN_USER,
            "secrets_file": str(self.secrets_file(role)),
        }
        if role == "node":
            out["scan_tls_cert_location"] = str(self.server.cert)
            out["scan_tls_key_location"] = str(self.server.key)
        return out

    def env(self, role: str) -> dict[str, str]:
        """:meth:`options` as ``SHOAL_*`` environment variables."""
        return {ENV_OF_OPTION[k]: v for k, v in self.options(role).items()}

    def connection(self, bootstrap_servers: str, zk_connect: str, role: str = ADMIN, **more: str) -> ConnectionSettings:
        """The resolved connection settings of ``role`` on this cluster."""
        options = {**self.options(role), "bootstrap_servers": bootstrap_servers, "zk_hosts": zk_connect, **more}
        return ConnectionSettings.resolve(options, {}, None)

    def broker_security(self) -> BrokerSecurity:
        """The brokers' side: key store, CA, the admin super user and every role's SCRAM user."""
        return BrokerSecurity(
            keystore=self.keystore,
            keystore_password=self.keystore_password,
            truststore=self.ca.cert,
            admin_user=ADMIN,
            admin_password=self.passwords[ADMIN],
            scram_users=dict(self.passwords),
        )

    def cluster_extra(self) -> dict[str, object]:
        """What the cluster file records (:data:`shoal.kafka.settings.SECURITY_EXTRA`): the admin's options."""
        return {SECURITY_EXTRA: self.options(ADMIN)}


def _password() -> str:
    return secrets.token_urlsafe(24)


def prepare(directory: Path) -> SecureCluster:
    """Create (or, on a reused data dir, load) the CA, certificates and credentials in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    state_path = directory / _STATE
    if state_path.exists():
        state = json.loads(state_path.read_text(encoding="utf-8"))
    else:
        state = {
            "users": {role: _password() for role in ROLES},
            "zk": _password(),
            "scan": _password(),
            "keystore": _password(),
        }
        fd = os.open(state_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(state, f)
    ca = certs.CertFiles(directory / "ca.pem", directory / "ca-key.pem")
    if not ca.cert.exists():
        ca = certs.create_ca(directory)
    server = certs.CertFiles(directory / "server.pem", directory / "server-key.pem")
    if not server.cert.exists():
        server = certs.issue(ca, directory, "server")
    keystore = directory / "kafka.p12"
    if not keystore.exists():
        certs.pkcs12_keystore(server, keystore, state["keystore"])
    sec = SecureCluster(
        directory=directory,
        ca=ca,
        server=server,
        keystore=keystore,
        keystore_password=Secret(state["keystore"]),
        passwords={role: Secret(pw) for role, pw in state["users"].items()},
        zk_password=Secret(state["zk"]),
        scan_password=Secret(state["scan"]),
    )
    for role in ROLES:
        write_secrets_file(
            sec.secrets_file(role),
            {"sasl_password": sec.passwords[role], "zk_password": sec.zk_password, "scan_password": sec.scan_password},
        )
    return sec


def connection_of(info: ClusterInfo) -> ConnectionSettings:
    """The admin's connection settings of the cluster ``info`` describes (plain when not secured)."""
    security = info.extra.get(SECURITY_EXTRA)
    options: dict[str, object | None] = {"bootstrap_servers": info.bootstrap_servers, "zk_hosts": info.zk_connect}
    if isinstance(security, dict):
        options.update({k: str(v) for k, v in security.items()})
    options["zk_root"] = str(info.extra.get("zk_root", "/shoal"))
    options["topic_prefix"] = info.topic_prefix
    return ConnectionSettings.resolve(options, {}, None)


def node_env(info: ClusterInfo) -> tuple[tuple[str, str], ...]:
    """The ``SHOAL_*`` security environment of a storage node of the local cluster ``info`` (none
    when it is not secured)."""
    if SECURITY_EXTRA not in info.extra:
        return ()
    return tuple(sorted(prepare(Path(info.data_dir) / "security").env("node").items()))


def zk_security(connection: ConnectionSettings) -> ZkSecurity:
    """The ZooKeeper digest credentials of ``connection`` (open when it has none)."""
    password = connection.zk_password
    return ZkSecurity(connection.zk_user, None if password is None else password.reveal())


def apply_acls(settings: KafkaSettings, rules: Sequence[AclRule], timeout_s: float = 30.0) -> int:
    """Create ``rules`` with the AdminClient's ``create_acls`` (as a super user); the count created.
    Creating an ACL that exists is a no-op in Kafka, so this is idempotent."""
    bindings = [
        AclBinding(
            ResourceType["BROKER" if r.resource_type == "CLUSTER" else r.resource_type],
            r.name,
            ResourcePatternType[r.pattern],
            r.principal,
            "*",
            AclOperation[r.operation],
            AclPermissionType.ALLOW,
        )
        for r in rules
    ]
    if not bindings:
        return 0
    admin = clients.admin(settings)
    futures = admin.create_acls(bindings, request_timeout=timeout_s)
    for binding, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise RuntimeLaunchError(f"creating the ACL {binding} failed: {exc}") from exc
    admin.poll(0)
    return len(bindings)
