"""The cluster file: what a running local cluster is and where to reach it.

``shoal up`` writes it; every other command reads it by default. It holds addresses, ports,
pids (with the marker that proves a pid is still ours) and log paths; never a secret.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shoal.errors import ClusterFileError

FORMAT_VERSION = 1


@dataclass(frozen=True)
class ProcessRecord:
    name: str
    pid: int
    marker: str
    log_path: str
    port: int | None = None
    metrics_port: int | None = None
    """A storage node's Prometheus ``/metrics`` port (None for other processes)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessRecord:
        return cls(
            name=str(data["name"]),
            pid=int(data["pid"]),
            marker=str(data["marker"]),
            log_path=str(data["log_path"]),
            port=None if data.get("port") is None else int(data["port"]),
            metrics_port=None if data.get("metrics_port") is None else int(data["metrics_port"]),
        )


@dataclass(frozen=True)
class ClusterInfo:
    data_dir: str
    bootstrap_servers: str
    zk_connect: str
    kafka_cluster_id: str
    brokers: int
    processes: tuple[ProcessRecord, ...] = ()
    topic_prefix: str = "shoal"
    started_at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def process(self, name: str) -> ProcessRecord | None:
        return next((p for p in self.processes if p.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "data_dir": self.data_dir,
            "bootstrap_servers": self.bootstrap_servers,
            "zk_connect": self.zk_connect,
            "kafka_cluster_id": self.kafka_cluster_id,
            "brokers": self.brokers,
            "topic_prefix": self.topic_prefix,
            "started_at": self.started_at,
            "processes": [p.to_json() for p in self.processes],
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterInfo:
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise ClusterFileError(
                f"unsupported cluster file version {data.get('version') if isinstance(data, dict) else data!r}"
            )
        try:
            return cls(
                data_dir=str(data["data_dir"]),
                bootstrap_servers=str(data["bootstrap_servers"]),
                zk_connect=str(data["zk_connect"]),
                kafka_cluster_id=str(data["kafka_cluster_id"]),
                brokers=int(data["brokers"]),
                topic_prefix=str(data.get("topic_prefix", "shoal")),
                started_at=float(data.get("started_at", 0.0)),
                processes=tuple(ProcessRecord.from_json(p) for p in data.get("processes", [])),
                extra=dict(data.get("extra", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ClusterFileError(f"cluster file is missing or has a bad field: {exc}") from exc


def write(path: Path, info: ClusterInfo) -> None:
    """Atomically replace the cluster file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".cluster-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(info.to_json(), f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def read(path: Path) -> ClusterInfo:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ClusterFileError(f"no cluster file at {path}: start a local cluster with `shoal up`") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClusterFileError(f"cluster file {path} is not valid JSON: {exc}") from exc
    return ClusterInfo.from_json(data)
