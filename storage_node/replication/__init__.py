"""Replication procedures over Kafka (DESIGN.md sections 5 to 7; EventQL seed 000 section 3.5).

The middle layer of the storage node: procedures on a replica's state (:mod:`storage_node.replica`)
that the roles (:mod:`storage_node.roles`) run.

=============  ====================================================================================
``publish``    the leader's publisher: every chain entry not yet on its segments channel, in order;
               ``push_segments`` (a follower pushes what the leader lacks)
``receive``    ``apply_segment``: the receive procedure applied to one manifest and its chunks
``adopt``      a new leader adopts the other placements' WAL records beyond what its chain covers
``merge_in``   the leader receives and merges segments other placements pushed
``collect``    garbage collection of weakly referenced and unreferenced segments
``tail``       the Tail index: truncating WAL and segments channels below what every replica acked
``describe``   ``describe replica``: a replica's chain and a content hash (``shoal verify``)
=============  ====================================================================================

(The segments-channel framing and manifest conversions are the core's :mod:`shoal.segments.channel`.)
"""
