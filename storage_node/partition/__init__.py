"""Partition replicas on a node and their roles: leader (leader.py) and follower (follower.py, issue 5)."""

from storage_node.partition.leader import FencedError, LeaderRoleState, PartitionLeader, versioned_rows
from storage_node.partition.replica import KeyFilter, PartitionReplica, replica_dir
from storage_node.partition.validate import IngestValidator, Rejected

__all__ = [
    "FencedError",
    "IngestValidator",
    "KeyFilter",
    "LeaderRoleState",
    "PartitionLeader",
    "PartitionReplica",
    "Rejected",
    "replica_dir",
    "versioned_rows",
]
