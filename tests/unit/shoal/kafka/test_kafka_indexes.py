"""ChannelIndexes: one type for the node (Ack per replica group) and the monitor (Ack and Consume)."""

from __future__ import annotations

from shoal.kafka.indexes import ChannelIndexes


def test_lookup_and_invariant() -> None:
    ix = ChannelIndexes("t", tail=10, append=20, acks=(("a", 15), ("b", None), ("c", 25)), consumes=(("a.c", 18),))
    assert ix.ack("a") == 15 and ix.ack("b") is None and ix.ack("unknown") is None
    assert ix.consume("a.c") == 18 and ix.consume("a") is None
    assert ix.check() == ["c: ack 25 outside [10, 20]"]
    assert [a for _, a in ix.acks] == [15, None, 25]  # in the order asked, as the tail decision reads them
