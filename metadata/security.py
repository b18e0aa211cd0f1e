"""ZooKeeper security hooks: digest authentication and ACLs on every znode shoal creates.

When credentials are configured, every ``create`` made by the metadata package passes
:meth:`ZkSecurity.acls` (all rights for the shoal digest identity, optionally read for everyone)
and the client authenticates with :meth:`ZkSecurity.auth_data`. Without credentials, znodes get
the client's default ACL (ZooKeeper's open ACL), as a plain kazoo client would create them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kazoo.security import ACL, Id, Permissions, make_digest_acl

from shoal.errors import ConfigError

_USER = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class ZkSecurity:
    """Digest credentials for ZooKeeper; no username means security is off."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    world_readable: bool = False

    def __post_init__(self) -> None:
        if (self.username is None) != (self.password is None):
            raise ConfigError("ZooKeeper digest auth needs both a username and a password (or neither)")
        if self.username is not None and not _USER.fullmatch(self.username):
            raise ConfigError(f"ZooKeeper username must match {_USER.pattern}, got {self.username!r:.80}")
        if self.password is not None and not self.password:
            raise ConfigError("ZooKeeper password must not be empty")

    @property
    def enabled(self) -> bool:
        return self.username is not None

    def auth_data(self) -> list[tuple[str, str]]:
        """For ``KazooClient(auth_data=...)`` or ``client.add_auth``."""
        if not self.enabled:
            return []
        return [("digest", f"{self.username}:{self.password}")]

    def acls(self) -> list[ACL] | None:
        """The ACL list for every znode shoal creates (None = the client's default)."""
        if self.username is None or self.password is None:
            return None
        acl = [make_digest_acl(self.username, self.password, all=True)]
        if self.world_readable:
            acl.append(ACL(Permissions.READ, Id("world", "anyone")))
        return acl

    def apply(self, client: Any) -> None:
        """Authenticate an already-started kazoo client (idempotent on the server side)."""
        for scheme, credential in self.auth_data():
            client.add_auth(scheme, credential)


OPEN = ZkSecurity()
