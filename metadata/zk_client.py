"""Creating kazoo clients and turning kazoo errors into shoal errors."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from metadata.security import OPEN, ZkSecurity
from shoal.errors import ConfigError, MetadataError

log = logging.getLogger(__name__)


class ZooKeeperUnavailableError(MetadataError):
    """ZooKeeper could not be reached, or the session was lost mid-operation."""


def make_client(hosts: str, security: ZkSecurity = OPEN, *, timeout: float = 10.0, start: bool = True) -> KazooClient:
    """A kazoo client authenticated with ``security`` whose default ACL is shoal's ACL."""
    if not isinstance(hosts, str) or not hosts.strip():
        raise ConfigError("ZooKeeper hosts must be a non-empty 'host:port[,host:port][/chroot]' string")
    client = KazooClient(
        hosts=hosts,
        timeout=timeout,
        auth_data=security.auth_data() or None,
        default_acl=security.acls(),
    )
    if start:
        try:
            client.start(timeout=timeout)
        except KazooTimeoutError as exc:
            client.close()
            raise ZooKeeperUnavailableError(f"cannot connect to ZooKeeper at {hosts} within {timeout}s") from exc
    return client


@contextlib.contextmanager
def zk_errors(what: str) -> Iterator[None]:
    """Re-raise kazoo's errors (other than those the caller handles first) as MetadataError."""
    try:
        yield
    except NoAuthError as exc:
        raise MetadataError(f"{what}: ZooKeeper denied access (check the digest credentials / ACLs)") from exc
    except (ConnectionLoss, SessionExpiredError, KazooTimeoutError) as exc:
        raise ZooKeeperUnavailableError(f"{what}: ZooKeeper connection lost ({type(exc).__name__})") from exc
    except KazooException as exc:
        raise MetadataError(f"{what}: ZooKeeper error {type(exc).__name__}: {exc}") from exc


def ensure_path(zk: Any, path: str, security: ZkSecurity) -> None:
    """Create ``path`` and its parents with shoal's ACL (no-op where they exist)."""
    with zk_errors(f"create {path}"):
        if zk.exists(path):
            return
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            sub = "/" + "/".join(parts[:i])
            with contextlib.suppress(NodeExistsError):
                zk.create(sub, b"", acl=security.acls())
