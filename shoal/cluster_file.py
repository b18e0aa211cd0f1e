"""The cluster file: what a running local cluster is and where to reach it.

``shoal up`` writes it; every other command reads it by default. It holds addresses, ports,
pids (with the marker that proves a pid is still ours) and log paths; never a secret.

Its shape is typed: :class:`ClusterInfo` and :class:`ProcessRecord` are pydantic dataclasses, so
reading validates every field and :func:`json_schema` gives the JSON Schema of the file (committed
under ``docs/schemas/``). The file carries ``"version": FORMAT_VERSION``; any other version is
refused before the fields are looked at.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import field
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass

from shoal import jsonio
from shoal.errors import ClusterFileError
from shoal.shapes import validation_summary

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

    def __post_init__(self) -> None:
        # ``stop``/``down`` signal the pid's process group once the marker matches its command line
        if isinstance(self.pid, bool) or not isinstance(self.pid, int) or self.pid <= 0:
            raise ValueError(f"process {self.name!r}: pid must be a positive integer, got {self.pid!r:.40}")
        if not isinstance(self.marker, str) or not self.marker.strip():
            raise ValueError(f"process {self.name!r}: an empty marker would match any process")

    def to_json(self) -> dict[str, Any]:
        return _PROCESS.dump_python(self, mode="json")

    @classmethod
    def from_json(cls, data: Any) -> ProcessRecord:
        """A record from its JSON object (raises pydantic's ValidationError on a bad field)."""
        return _PROCESS.validate_python(data)


def _add_version(schema: dict[str, Any]) -> None:
    """The file's ``version`` key is not an attribute: it is written and checked by the functions below."""
    schema["properties"] = {"version": {"const": FORMAT_VERSION, "type": "integer"}, **schema["properties"]}
    schema["required"] = ["version", *schema.get("required", [])]


@dataclass(frozen=True, config=ConfigDict(json_schema_extra=_add_version))
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
        return {"version": FORMAT_VERSION, **_CLUSTER.dump_python(self, mode="json")}

    @classmethod
    def from_json(cls, data: Any) -> ClusterInfo:
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise ClusterFileError(
                f"unsupported cluster file version {data.get('version') if isinstance(data, dict) else data!r}"
            )
        try:
            return _CLUSTER.validate_python({k: v for k, v in data.items() if k != "version"})
        except ValidationError as exc:
            raise ClusterFileError(f"cluster file has missing or bad fields: {validation_summary(exc)}") from exc


_PROCESS = TypeAdapter(ProcessRecord)
_CLUSTER = TypeAdapter(ClusterInfo)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the cluster file."""
    return _CLUSTER.json_schema()


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
        data = jsonio.read_checked(path)
    except FileNotFoundError as exc:
        raise ClusterFileError(f"no cluster file at {path}: start a local cluster with `shoal up`") from exc
    except OSError as exc:
        raise ClusterFileError(f"cannot read cluster file {path}: {exc}") from exc
    except jsonio.BadJson as exc:
        raise ClusterFileError(f"cluster file {path} is {exc.reason}") from exc
    return ClusterInfo.from_json(data)
