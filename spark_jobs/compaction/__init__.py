"""The compaction service (DESIGN.md sections 5 and 9; EventQL seed 000 section 3.1).

==============  ==================================================================================
``policy``      CompactionPolicy (frozen thresholds) and the decision: minor count, bytes, age
``book``        what the segments channels say: each placement's chain, rebuilt from its manifests
``compute``     the major with Spark: chunks from Kafka -> rows -> newest version per key by GTID
``publish``     manifest + chunks on ``TopicNames.compaction(pid)`` for the leader's intake
``service``     the Structured Streaming query over the segments channels that drives it all
==============  ==================================================================================

The leader side is ``storage_node.roles.compaction_intake.CompactionIntake``.
"""
