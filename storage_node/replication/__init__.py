"""Segment replication over Kafka (DESIGN.md sections 5 to 7; EventQL seed 000 section 3.5).

=============  ====================================================================================
``wire``       segments-channel framing; manifest <-> segment entry conversions
``publish``    the leader's publisher: every chain entry not yet on its segments channel, in order
``receive``    ``apply_segment``: the receive procedure applied to one manifest and its chunks
``overlay``    a follower's in-memory overlay of the leader's WAL channel (fresh reads)
``tail``       the Tail index: truncating WAL and segments channels below what every replica acked
=============  ====================================================================================
"""
