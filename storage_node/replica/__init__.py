"""A partition replica's state on this node, the bottom layer of the storage node (DESIGN.md section 11).

=============  ====================================================================================
``replica``    :class:`PartitionReplica`: segment list, segment files, memtable, scans
``memtable``   the rows not yet in a segment
``catch_up``   SERVING or BOOTSTRAPPING (with progress): eligibility for election and reads
``overlay``    a follower's in-memory overlay of the leader's WAL channel (fresh reads)
``validate``   :class:`IngestValidator`: an ingest message -> rows, or the reason it is refused
``rows``       :func:`versioned_rows`: ingest rows -> stored rows with their GTID columns
=============  ====================================================================================

Nothing here talks to Kafka or runs a thread: the procedures (:mod:`storage_node.replication`)
and the roles (:mod:`storage_node.roles`) do.
"""

from storage_node.replica.catch_up import CatchUp, CatchUpPhase
from storage_node.replica.memtable import Memtable
from storage_node.replica.overlay import PendingRows, WalOverlay
from storage_node.replica.replica import KeyFilter, PartitionReplica, minor_backlog, replica_dir
from storage_node.replica.rows import versioned_rows
from storage_node.replica.validate import IngestValidator, Rejected

__all__ = [
    "CatchUp",
    "CatchUpPhase",
    "IngestValidator",
    "KeyFilter",
    "Memtable",
    "PartitionReplica",
    "PendingRows",
    "Rejected",
    "WalOverlay",
    "minor_backlog",
    "replica_dir",
    "versioned_rows",
]
