"""The start-up probe reaches every group coordinator: one group per ``__consumer_offsets`` partition,
placed as Kafka places groups (``Utils.abs(groupId.hashCode) % partitions``)."""

from __future__ import annotations

from shoal_app.runtime.kafka import OFFSETS_TOPIC_PARTITIONS, coordinator_partition, java_string_hash, probe_groups


def test_java_string_hash_matches_java() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322  # "hello".hashCode() in Java
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE: Kafka's Utils.abs gives 0
    assert java_string_hash("é€😀") == (((0xE9 * 31 + 0x20AC) * 31 + 0xD83D) * 31 + 0xDE00)
    assert coordinator_partition("polygenelubricants") == 0


def test_one_probe_group_per_partition() -> None:
    groups = probe_groups()
    assert [coordinator_partition(g) for g in groups] == list(range(OFFSETS_TOPIC_PARTITIONS))
    assert len(set(groups)) == OFFSETS_TOPIC_PARTITIONS
    assert [coordinator_partition(g, 3) for g in probe_groups(3)] == [0, 1, 2]
