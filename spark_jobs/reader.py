"""The shoal batch reader: ``spark.read.format("shoal").option("table", T).load()``.

DESIGN.md section 9 (Reader). The driver plans one input partition per shoal partition of the
current METADATA file, each bound to the Flight location of the partition's leader (its epoch
record in ZooKeeper) or of the node named by ``.option("node", ID)``. Executors run one
:class:`storage_node.serve.ScanRequest` per partition against that node: the newest version of
every key in segments + memtable, tombstones hidden, exactly what ``shoal scan`` returns. Each
partition is one scan of one replica's chain, so every partition is read at one consistent
point. If the leader moved between planning and reading, the executor looks it up once more.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from metadata.client import MetadataClient
from metadata.metadata_file import MetadataFile
from shoal.errors import ShoalError
from spark_jobs.errors import ReaderError
from spark_jobs.schema_map import to_spark_arrow
from spark_jobs.settings import ReaderSettings

log = logging.getLogger(__name__)


@dataclass
class ShoalInputPartition(InputPartition):
    """One shoal partition and the node (Flight location) to read it from."""

    partition_id: str
    server_id: str
    location: str
    follow_leader: bool


def _leader(client: MetadataClient, table: str, partition_id: str) -> str:
    from metadata.election import read_epoch

    server = read_epoch(client.zk, client.layout, partition_id).server_id
    if server is None:
        raise ReaderError(f"partition {partition_id} of table {table} has no leader yet")
    return server


def plan(settings: ReaderSettings, file: MetadataFile, client: MetadataClient) -> list[ShoalInputPartition]:
    """One input partition per shoal partition, each bound to the node to read it from (driver)."""
    from metadata.node_registry import lookup_node

    out = []
    for entry in file.partitions:
        server = settings.node or _leader(client, settings.table, entry.partition_id)
        location = lookup_node(client.zk, client.layout, server)
        out.append(ShoalInputPartition(entry.partition_id, server, location, settings.node is None))
    return out


class ShoalReader(DataSourceReader):
    def __init__(self, settings: ReaderSettings, file: MetadataFile, partitions: list[ShoalInputPartition]) -> None:
        self.settings = settings
        self.file = file
        self._partitions = partitions

    def partitions(self) -> list[InputPartition]:
        return list(self._partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ShoalInputPartition)
        table = self._scan(partition)
        yield from to_spark_arrow(table, self.file.table).to_batches()

    def _scan(self, p: ShoalInputPartition) -> pa.Table:
        from metadata.node_registry import lookup_node
        from shoal.scan import ScanRequest, scan_remote

        request = ScanRequest(self.settings.table, p.partition_id)
        try:
            return scan_remote(
                p.location, request, timeout_s=self.settings.timeout_s, scan=self.settings.connection.connection.scan
            )
        except ShoalError as first:
            if not p.follow_leader:
                raise ReaderError(f"partition {p.partition_id} on node {p.server_id}: {first}") from first
            with MetadataClient(self.settings.connection) as client:
                server = _leader(client, self.settings.table, p.partition_id)
                location = lookup_node(client.zk, client.layout, server)
            if location == p.location:
                raise ReaderError(f"partition {p.partition_id} on leader {p.server_id}: {first}") from first
            log.info("partition %s: leader moved from %s to %s", p.partition_id, p.server_id, server)
            try:
                return scan_remote(
                    location, request, timeout_s=self.settings.timeout_s, scan=self.settings.connection.connection.scan
                )
            except ShoalError as exc:
                raise ReaderError(f"partition {p.partition_id} on leader {server}: {exc}") from exc
