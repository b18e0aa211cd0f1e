"""The roles a replica plays on this node, each a :class:`~shoal.worker.Worker` (DESIGN.md section 11).

==================  ===============================================================================
``leader``          :class:`PartitionLeader`: ingest -> WAL channel -> memtable -> segments
``follower``        :class:`PartitionFollower`: the leader's segments channel (and WAL) -> replica
``compaction_intake``  :class:`CompactionIntake`: commits the majors the compaction service computed
==================  ===============================================================================

Roles call the procedures of :mod:`storage_node.replication` on the state of
:mod:`storage_node.replica`; the node (:mod:`storage_node.node`) starts and stops them.
"""
