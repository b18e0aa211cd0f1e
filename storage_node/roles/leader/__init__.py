"""The leader role (DESIGN.md section 4): the loop (``role``), recovery, deadletter, the WAL transaction."""

from storage_node.roles.leader.role import LeaderRoleState, LeaderStats, PartitionLeader

__all__ = ["LeaderRoleState", "LeaderStats", "PartitionLeader"]
