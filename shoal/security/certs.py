"""A local certificate authority for a secured local cluster (``shoal up --secure``).

Built on the ``cryptography`` library: one self-signed CA, and certificates it signs for servers
(Kafka's listeners, the nodes' Arrow Flight scan servers) valid for ``127.0.0.1``, ``::1`` and
``localhost``. Private keys are written with mode 0600. Kafka (Java) reads its key store as an
encrypted PKCS#12 file; librdkafka, ZooKeeper clients and gRPC read PEM.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from shoal.errors import ConfigError

VALID_DAYS = 825
"""How long a generated certificate is valid (the CA/Browser Forum's former maximum)."""
LOCAL_NAMES = ("localhost",)
LOCAL_ADDRESSES = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class CertFiles:
    """A certificate (PEM) and its private key (unencrypted PEM, mode 0600)."""

    cert: Path
    key: Path


def _write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def create_ca(directory: Path, common_name: str = "shoal local CA") -> CertFiles:
    """A new self-signed CA in ``directory`` (``ca.pem``, ``ca-key.pem``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    files = CertFiles(directory / "ca.pem", directory / "ca-key.pem")
    _write(files.key, _key_pem(key), 0o600)
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return files


def _load(ca: CertFiles) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
        key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load the CA at {ca.cert}: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ConfigError(f"the CA key {ca.key} is not an EC key")
    return cert, key


def issue(
    ca: CertFiles,
    directory: Path,
    name: str,
    *,
    server: bool = True,
    dns_names: tuple[str, ...] = LOCAL_NAMES,
    ip_addresses: tuple[str, ...] = LOCAL_ADDRESSES,
) -> CertFiles:
    """A certificate for ``name`` signed by ``ca``: ``<name>.pem`` (certificate then CA) and
    ``<name>-key.pem`` in ``directory``. Server certificates name ``dns_names`` and ``ip_addresses``
    (what TLS clients check the host against); client ones are for TLS client authentication."""
    ca_cert, ca_key = _load(ca)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server:
        alt: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        alt += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    files = CertFiles(directory / f"{name}.pem", directory / f"{name}-key.pem")
    _write(files.key, _key_pem(key), 0o600)
    chain = cert.public_bytes(serialization.Encoding.PEM) + ca_cert.public_bytes(serialization.Encoding.PEM)
    _write(files.cert, chain, 0o644)
    return files


def pkcs12_keystore(files: CertFiles, path: Path, password: str) -> Path:
    """``files`` as a PKCS#12 key store at ``path`` (mode 0600) encrypted with ``password``
    (PBES2 with AES-256 and SHA-256, which Java 11+ reads): Kafka's ``ssl.keystore.location``."""
    certs = x509.load_pem_x509_certificates(files.cert.read_bytes())
    key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ConfigError(f"the key {files.key} is not an EC key")
    encryption = (
        serialization.PrivateFormat.PKCS12.encryption_builder()
        .kdf_rounds(50_000)
        .key_cert_algorithm(pkcs12.PBES.PBESv2SHA256AndAES256CBC)
        .hmac_hash(hashes.SHA256())
        .build(password.encode())
    )
    data = pkcs12.serialize_key_and_certificates(b"shoal", key, certs[0], certs[1:], encryption)
    _write(path, data, 0o600)
    return path
