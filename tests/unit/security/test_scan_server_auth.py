"""A scan server secured with TLS and Flight basic authentication: the scan client authenticates;
a wrong password or no credentials are refused at once, naming the door."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.errors import ShoalError
from shoal.kafka.settings import ScanSettings, Secret
from shoal.scan import describe_remote
from shoal.security import certs
from storage_node.serve.flight import ScanServer, server_options


@pytest.fixture
def secured_server(tmp_path: Path) -> Iterator[tuple[str, ScanSettings]]:
    ca = certs.create_ca(tmp_path)
    server_cert = certs.issue(ca, tmp_path, "server")
    scan = ScanSettings(
        tls_ca_location=str(ca.cert),
        tls_cert_location=str(server_cert.cert),
        tls_key_location=str(server_cert.key),
        username="scan",
        password=Secret("right-password"),
    )
    server = ScanServer(
        "grpc+tls://127.0.0.1:0",
        lambda table, pid: [],
        describe=lambda table: [{"table": table}],
        **server_options(scan),
    )
    try:
        yield f"grpc+tls://127.0.0.1:{server.port}", scan
    finally:
        server.shutdown()


def test_authenticated_client_is_served(secured_server: tuple[str, ScanSettings]) -> None:
    location, scan = secured_server
    assert describe_remote(location, "t", scan=scan, timeout_s=10) == [{"table": "t"}]


def test_wrong_password_or_no_credentials_are_refused(secured_server: tuple[str, ScanSettings]) -> None:
    location, scan = secured_server
    wrong = ScanSettings(tls_ca_location=scan.tls_ca_location, username="scan", password=Secret("nope"))
    with pytest.raises(ShoalError, match=r"scan server .* refused scan") as refused:
        describe_remote(location, "t", scan=wrong, timeout_s=10)
    assert "nope" not in str(refused.value)
    anonymous = ScanSettings(tls_ca_location=scan.tls_ca_location)
    with pytest.raises(ShoalError, match=r"(?i)authentication required"):
        describe_remote(location, "t", scan=anonymous, timeout_s=10)
