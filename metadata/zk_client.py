"""Creating kazoo clients, turning kazoo errors into shoal errors, and bounded retries (kazoo's KazooRetry)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionLoss,
    KazooException,
    NoAuthError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import ForceRetryError, KazooRetry, RetryFailedError

from metadata.security import OPEN, ZkSecurity
from shoal.errors import ConfigError, MetadataConflictError, MetadataError

log = logging.getLogger(__name__)
T = TypeVar("T")


class ZooKeeperUnavailableError(MetadataError):
    """ZooKeeper could not be reached, or the session was lost mid-operation."""


def make_client(hosts: str, security: ZkSecurity = OPEN, *, timeout: float = 10.0, start: bool = True) -> KazooClient:
    """A kazoo client authenticated with ``security`` whose default ACL is shoal's ACL."""
    if not isinstance(hosts, str) or not hosts.strip():
        raise ConfigError("ZooKeeper hosts must be a non-empty 'host:port[,host:port][/chroot]' string")
    try:
        client = KazooClient(
            hosts=hosts,
            timeout=timeout,
            auth_data=security.auth_data() or None,
            default_acl=security.acls(),
        )
    except ValueError as exc:  # kazoo parses the connect string: a bad port or host
        raise ConfigError(f"ZooKeeper hosts {hosts!r:.200}: {exc}") from None
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
    """Create ``path`` and its parents with shoal's ACL (no-op where they exist): kazoo's ensure_path."""
    with zk_errors(f"create {path}"):
        zk.ensure_path(path, acl=security.acls())


def cas_retry(max_tries: int = 20, deadline: float = 30.0) -> KazooRetry:
    """The retry bounds of a compare-and-swap loop: ``max_tries`` attempts in all, exponential backoff
    from 10 ms (x2, jittered, at most 1 s between attempts) and no new attempt past ``deadline`` seconds.

    Session expiry is not retried through (``ignore_expire=False``): at LOST the session's ephemeral
    znodes and watches are gone, so the caller must see it (DESIGN.md sections 7 and 8).
    """
    if max_tries < 1:
        raise ConfigError(f"retry max_tries must be >= 1, got {max_tries}")
    if deadline <= 0:
        raise ConfigError(f"retry deadline must be > 0 seconds, got {deadline}")
    return KazooRetry(max_tries=max_tries, delay=0.01, backoff=2, max_delay=1.0, deadline=deadline, ignore_expire=False)


def retrying(retry: KazooRetry, attempt: Callable[[], T], on: type[MetadataError] = MetadataConflictError) -> T:
    """Call ``attempt`` under a fresh copy of ``retry`` (KazooRetry keeps per-call state, so callers
    share one policy across threads); an ``on`` error is retried and, once the bounds are spent, the
    last one is raised. Other errors (a stale epoch, ZooKeeper unavailable) end the loop at once.
    """
    last: list[MetadataError] = []

    def once() -> T:
        try:
            return attempt()
        except on as exc:
            last[:] = [exc]
            raise ForceRetryError(str(exc)) from exc

    try:
        return retry.copy()(once)
    except RetryFailedError as exc:
        if not last:
            raise ZooKeeperUnavailableError(f"ZooKeeper operation failed after retries: {exc}") from exc
        raise last[0] from last[0].__cause__
