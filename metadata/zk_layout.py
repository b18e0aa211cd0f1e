"""The ZooKeeper layout of shoal's metadata, and the codec of its small znodes.

Everything lives under ``root`` (default ``/shoal``), itself under the client's chroot::

    <root>/tables/<table>                  {"metadata_txnid", "metadata_sequence", "metadata_servers"}
                                           (the znode version is the compare-and-swap token)
    <root>/partitions/<partition_id>/epoch {"epoch", "server_id", "placement_id"} (bumped by CAS)
    <root>/partitions/<partition_id>/election/n_<seq>   ephemeral sequential candidates
    <root>/partitions/<partition_id>/in_sync {"epoch", "placement_id", "out_of_sync"} (the leader's
                                           in-sync set, written fenced by its epoch: metadata.in_sync)
    <root>/placements                      the placement id counter (decimal, bumped by CAS)

Names and ids are validated before they become path components.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from metadata.errors import MetadataDecodeError
from metadata.metadata_file import validate_txnid
from shoal import jsonio
from shoal.errors import ConfigError, InvalidIdError
from shoal.ids import validate_partition_id, validate_placement_id, validate_server_id, validate_table_name

_ROOT = re.compile(r"^(/[A-Za-z0-9_.-]+)+$")
MAX_ZNODE_BYTES = 512 * 1024


@dataclass(frozen=True)
class ZkLayout:
    root: str = "/shoal"

    def __post_init__(self) -> None:
        if not _ROOT.fullmatch(self.root) or "/." in self.root:
            raise ConfigError(f"ZooKeeper root must be an absolute path like /shoal, got {self.root!r:.80}")

    @property
    def tables(self) -> str:
        return f"{self.root}/tables"

    def table(self, name: str) -> str:
        return f"{self.tables}/{validate_table_name(name)}"

    @property
    def partitions(self) -> str:
        return f"{self.root}/partitions"

    def partition(self, partition_id: str) -> str:
        return f"{self.partitions}/{validate_partition_id(partition_id)}"

    def epoch(self, partition_id: str) -> str:
        return f"{self.partition(partition_id)}/epoch"

    def election(self, partition_id: str) -> str:
        return f"{self.partition(partition_id)}/election"

    def in_sync(self, partition_id: str) -> str:
        return f"{self.partition(partition_id)}/in_sync"

    @property
    def placements(self) -> str:
        return f"{self.root}/placements"


@dataclass(frozen=True)
class TableHead:
    """The per-table record of the source's section 5, plus the znode version (the CAS token)."""

    table: str
    metadata_txnid: str
    metadata_sequence: int
    metadata_servers: tuple[str, ...]
    version: int = -1

    def encode(self) -> bytes:
        return json.dumps(
            {
                "metadata_txnid": self.metadata_txnid,
                "metadata_sequence": self.metadata_sequence,
                "metadata_servers": list(self.metadata_servers),
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, table: str, data: bytes, version: int) -> TableHead:
        try:
            if len(data) > MAX_ZNODE_BYTES:
                raise ValueError(f"{len(data)} bytes")
            obj = jsonio.loads_checked(data)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            seq = obj["metadata_sequence"]
            if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
                raise ValueError(f"metadata_sequence {seq!r:.40}")
            servers = obj["metadata_servers"]
            if not isinstance(servers, list):
                raise ValueError("metadata_servers is not a list")
            return cls(
                table,
                validate_txnid(obj["metadata_txnid"]),
                seq,
                tuple(validate_server_id(s) for s in servers),
                version,
            )
        except (ValueError, KeyError, UnicodeDecodeError, InvalidIdError) as exc:
            raise MetadataDecodeError(f"table znode of {table} is not a valid metadata record: {exc}") from exc


@dataclass(frozen=True)
class EpochRecord:
    """The current leader epoch of a partition and who was elected with it."""

    partition_id: str
    epoch: int
    server_id: str | None
    placement_id: int | None
    version: int = -1

    def encode(self) -> bytes:
        return json.dumps(
            {"epoch": self.epoch, "server_id": self.server_id, "placement_id": self.placement_id}, sort_keys=True
        ).encode()

    @classmethod
    def decode(cls, partition_id: str, data: bytes, version: int) -> EpochRecord:
        if not data:
            return cls(partition_id, 0, None, None, version)
        try:
            obj: Any = jsonio.loads_checked(data)
            epoch = obj["epoch"]
            if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
                raise ValueError(f"epoch {epoch!r:.40}")
            server = obj.get("server_id")
            placement = obj.get("placement_id")
            return cls(
                partition_id,
                epoch,
                None if server is None else validate_server_id(server),
                None if placement is None else validate_placement_id(placement),
                version,
            )
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, InvalidIdError) as exc:
            raise MetadataDecodeError(f"epoch znode of partition {partition_id} is invalid: {exc}") from exc
