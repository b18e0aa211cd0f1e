"""The local CA of ``shoal up --secure``: certificates that a TLS client trusts for 127.0.0.1, keys 0600."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import pkcs12

from shoal.kafka.settings import read_secrets_file
from shoal.security import certs
from shoal_app.runtime import secure
from shoal_app.runtime.kafka import BrokerPorts, server_properties


def test_server_certificate_is_signed_by_the_ca_for_localhost(tmp_path: Path) -> None:
    ca = certs.create_ca(tmp_path)
    server = certs.issue(ca, tmp_path, "server")
    leaf, issuer = x509.load_pem_x509_certificates(server.cert.read_bytes())
    assert issuer == x509.load_pem_x509_certificate(ca.cert.read_bytes())
    leaf.verify_directly_issued_by(issuer)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert os.stat(server.key).st_mode & 0o777 == 0o600 and os.stat(ca.key).st_mode & 0o777 == 0o600
    store = certs.pkcs12_keystore(server, tmp_path / "k.p12", "pw")
    key, cert, more = pkcs12.load_key_and_certificates(store.read_bytes(), b"pw")
    assert key is not None and cert == leaf and more == [issuer]


def test_prepare_writes_one_secrets_file_per_role_and_is_stable(tmp_path: Path) -> None:
    sec = secure.prepare(tmp_path / "security")
    again = secure.prepare(tmp_path / "security")
    assert again.passwords == sec.passwords
    for role in sec.passwords:
        path = sec.secrets_file(role)
        assert os.stat(path).st_mode & 0o777 == 0o600
        assert read_secrets_file(path)["sasl_password"] == sec.passwords[role].reveal()
        assert all(sec.passwords[role].reveal() not in v for v in sec.options(role).values())
    assert "scan_tls_key_location" in sec.options("node") and "scan_tls_key_location" not in sec.options("writer")
    conn = sec.connection("127.0.0.1:1", "127.0.0.1:2", "writer")
    assert conn.kafka.sasl_username == "writer" and conn.kafka.sasl_password == sec.passwords["writer"]
    assert conn.zk_user == secure.ZK_USER and conn.scan.tls


def test_secured_broker_properties(tmp_path: Path) -> None:
    sec = secure.prepare(tmp_path / "security")
    node = BrokerPorts(1, 9093, 9094)
    text = server_properties(node, [node], tmp_path / "data", sec.broker_security())
    props = dict(line.split("=", 1) for line in text.splitlines())
    assert props["listeners"] == "SASL_SSL://127.0.0.1:9093,CONTROLLER://127.0.0.1:9094"
    assert props["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL"
    assert props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert props["super.users"] == "User:admin"
    args = sec.broker_security().scram_arguments()
    assert args.count("--add-scram") == len(sec.passwords)
    plain = server_properties(node, [node], tmp_path / "data")
    assert "SASL" not in plain and "authorizer" not in plain
