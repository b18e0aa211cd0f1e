"""Storage node processes of the local runtime: start one from its :class:`NodeSpec`, wait until it registered.

A node is ready when its ephemeral znode ``<zk_root>/nodes/<id>`` exists (it registers after its
scan server listens, see ``metadata.node_registry``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from metadata.security import OPEN, ZkSecurity
from shoal.cluster_file import ProcessRecord
from shoal.errors import RuntimeLaunchError, ShoalError
from shoal_app.runtime.node_spec import NodeSpec, process_env
from shoal_app.runtime.process import is_running, spawn, tail

log = logging.getLogger(__name__)


def start(spec: NodeSpec, inherited_env: Mapping[str, str] | None = None) -> ProcessRecord:
    """Spawn the node of ``spec`` (detached, logging to <data dir>/node.log)."""
    Path(spec.data_dir).mkdir(parents=True, exist_ok=True)
    env = process_env(spec, os.environ if inherited_env is None else inherited_env)
    return spawn(
        spec.server_id,
        spec.argv,
        log_path=Path(spec.log_path),
        marker=spec.marker,
        env=env,
        port=spec.flight_port,
        metrics_port=spec.metrics_port,
    )


def registered(
    zk_connect: str, zk_root: str, server_ids: Iterable[str], timeout_s: float = 5.0, security: ZkSecurity = OPEN
) -> set[str]:
    """Which of ``server_ids`` have registered their scan location (empty if ZooKeeper does not answer)."""
    from metadata.node_registry import lookup_node
    from metadata.zk_client import make_client
    from metadata.zk_layout import ZkLayout

    layout = ZkLayout(zk_root)
    try:
        zk = make_client(zk_connect, security, timeout=timeout_s)
    except ShoalError:  # ZooKeeper does not answer
        return set()
    try:
        found = set()
        for server_id in server_ids:
            try:
                lookup_node(zk, layout, server_id)
            except ShoalError:
                continue
            found.add(server_id)
        return found
    finally:
        zk.stop()
        zk.close()


def wait_registered(
    records: list[ProcessRecord],
    zk_connect: str,
    zk_root: str,
    timeout_s: float,
    poll_s: float = 0.5,
    security: ZkSecurity = OPEN,
) -> None:
    """Wait until every node of ``records`` registered; RuntimeLaunchError (with its log) if one dies or is late."""
    deadline = time.monotonic() + timeout_s
    waiting = {r.name: r for r in records}
    while waiting:
        for rec in waiting.values():
            if not is_running(rec):
                raise RuntimeLaunchError(f"storage node {rec.name} exited during start:\n{tail(rec.log_path)}")
        waiting = {
            n: r for n, r in waiting.items() if n not in registered(zk_connect, zk_root, waiting, security=security)
        }
        if not waiting:
            return
        if time.monotonic() >= deadline:
            logs = "\n".join(f"--- {r.name}\n{tail(r.log_path)}" for r in waiting.values())
            raise RuntimeLaunchError(
                f"storage node(s) {', '.join(sorted(waiting))} did not register in ZooKeeper within "
                f"{timeout_s:.0f}s:\n{logs}"
            )
        time.sleep(poll_s)
