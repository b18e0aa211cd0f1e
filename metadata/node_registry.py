"""Where each node serves: an ephemeral znode ``<zk_root>/nodes/<server_id>`` = {"flight": "grpc://h:p"}
(``grpc+tls://`` when scans use TLS).

Ephemeral, so a dead node disappears with its ZooKeeper session.
"""

from __future__ import annotations

import json
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from metadata.security import OPEN, ZkSecurity
from metadata.zk_client import ensure_path, zk_errors
from metadata.zk_layout import ZkLayout
from shoal import jsonio
from shoal.errors import MetadataError
from shoal.ids import validate_server_id


def node_path(layout: ZkLayout, server_id: str) -> str:
    return f"{layout.root}/nodes/{validate_server_id(server_id)}"


def register_node(zk: Any, layout: ZkLayout, server_id: str, location: str, security: ZkSecurity = OPEN) -> None:
    """Publish this node's Flight location (replacing a stale entry of a previous session)."""
    path = node_path(layout, server_id)
    ensure_path(zk, path.rsplit("/", 1)[0], security)
    data = json.dumps({"flight": location}).encode()
    with zk_errors(f"register node {server_id}"):
        try:
            zk.create(path, data, acl=security.acls(), ephemeral=True)
        except NodeExistsError:
            zk.delete(path)  # left by our own previous session, which ZooKeeper has not expired yet
            zk.create(path, data, acl=security.acls(), ephemeral=True)


def lookup_node(zk: Any, layout: ZkLayout, server_id: str) -> str:
    """The Flight location of a running node; MetadataError if it is not registered."""
    path = node_path(layout, server_id)
    with zk_errors(f"look up node {server_id}"):
        try:
            data, _ = zk.get(path)
        except NoNodeError as exc:
            raise MetadataError(f"node {server_id} is not running (no {path})") from exc
    try:
        location = jsonio.loads_checked(data)["flight"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise MetadataError(f"{path} is malformed: {exc}") from exc
    if not isinstance(location, str) or not location.startswith(("grpc://", "grpc+tls://")):
        raise MetadataError(f"{path}: bad flight location {location!r:.80}")
    return location
