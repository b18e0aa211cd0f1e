"""Receiving a segment (seed 000, section 3.5) and the ABA scenarios (section 3.6), over Kafka."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from shoal.errors import InvalidIdError
from shoal.segments.chain import MAX_SEGMENT_HISTORY, SegmentChain, SegmentEntry
from shoal.segments.errors import SegmentArgumentError
from shoal.segments.receive import (
    PlainManifest,
    ReceiveOutcome,
    decide_leader_receive,
    decide_receive,
    decide_receive_detailed,
)
from shoal.segments.replicate import ActionKind, follower_replication

P = "ab" * 16
OTHER_P = "cd" * 16
LEADER = 7
SHA = "0" * 64
MB = 1 << 20


def sid(n: int) -> str:
    return f"{n:032x}"


def entry(n: int, base: int | None, *, major: bool = False, included: tuple[int, ...] = ()) -> SegmentEntry:
    return SegmentEntry(
        segment_id=sid(n),
        base_segment_id=None if base is None else sid(base),
        placement_id=LEADER,
        epoch=1,
        is_major=major,
        included_segment_ids=tuple(sid(i) for i in included),
    )


def manifest(e: SegmentEntry, *, sender: int = LEADER, size: int = MB, partition: str = P) -> PlainManifest:
    return PlainManifest.for_entry(
        e, partition_id=partition, sender_placement_id=sender, size_bytes=size, row_count=10, sha256=SHA
    )


def decide(chain: SegmentChain, m: PlainManifest, *, in_flight: int = 0, limit: int = 64 * MB) -> ReceiveOutcome:
    return decide_receive(
        chain,
        m,
        expected_partition_id=P,
        expected_placement_id=LEADER,
        in_flight_bytes=in_flight,
        max_in_flight_bytes=limit,
    )


def chain_1_2_3() -> SegmentChain:
    return SegmentChain().fast_forward(entry(1, None, major=True)).fast_forward(entry(2, 1)).fast_forward(entry(3, 2))


class TestFollowerReceive:
    def test_fast_forward_when_base_is_root(self) -> None:
        assert decide(chain_1_2_3(), manifest(entry(4, 3))) is ReceiveOutcome.FAST_FORWARD

    def test_first_segment_onto_null_root_is_fast_forward(self) -> None:
        assert decide(SegmentChain(), manifest(entry(1, None, major=True))) is ReceiveOutcome.FAST_FORWARD

    def test_segment_exists_when_referenced(self) -> None:
        assert decide(chain_1_2_3(), manifest(entry(2, 1))) is ReceiveOutcome.SEGMENT_EXISTS

    def test_segment_exists_through_included_ids(self) -> None:
        chain = chain_1_2_3().fast_forward(entry(10, 3, major=True, included=(3, 2, 1)))
        chain = chain.without([sid(1), sid(2), sid(3)])
        assert decide(chain, manifest(entry(2, 1))) is ReceiveOutcome.SEGMENT_EXISTS

    def test_exists_is_answered_even_when_overloaded(self) -> None:
        out = decide(chain_1_2_3(), manifest(entry(2, 1)), in_flight=100 * MB, limit=MB)
        assert out is ReceiveOutcome.SEGMENT_EXISTS

    def test_fast_forward_add_for_unreferenced_major(self) -> None:
        assert decide(chain_1_2_3(), manifest(entry(20, 19, major=True))) is ReceiveOutcome.FAST_FORWARD_ADD

    def test_out_of_order_for_unreferenced_minor_not_on_root(self) -> None:
        d = decide_receive_detailed(
            chain_1_2_3(),
            manifest(entry(5, 4)),
            expected_partition_id=P,
            expected_placement_id=LEADER,
            in_flight_bytes=0,
            max_in_flight_bytes=MB,
        )
        assert d.outcome is ReceiveOutcome.OUT_OF_ORDER
        assert not d.outcome.acks
        assert "local root" in d.reason

    def test_overloaded_only_when_something_is_in_flight(self) -> None:
        m = manifest(entry(4, 3), size=10 * MB)
        assert decide(chain_1_2_3(), m, in_flight=1, limit=8 * MB) is ReceiveOutcome.OVERLOADED
        assert decide(chain_1_2_3(), m, in_flight=0, limit=8 * MB) is ReceiveOutcome.FAST_FORWARD  # never stuck
        assert decide(chain_1_2_3(), manifest(entry(20, 19, major=True)), in_flight=64 * MB) is (
            ReceiveOutcome.OVERLOADED
        )

    @pytest.mark.parametrize(
        "bad",
        [
            {"partition_id": OTHER_P},  # foreign partition
            {"sender_placement_id": 8},  # not the leader placement we follow
            {"segment_id": "../../../etc/passwd"},  # never becomes a path
            {"base_segment_id": "xyz"},
            {"base_segment_id": None},  # a minor without base
            {"included_segment_ids": ("nothex",)},
            {"included_segment_ids": tuple(sid(100 + i) for i in range(MAX_SEGMENT_HISTORY + 1))},
            {"included_segment_ids": sid(1)},  # a string, not a list
            {"epoch": -1},
            {"placement_id": 0},
            {"size_bytes": -1},
            {"row_count": True},
            {"sha256": "nothex"},
            {"covered": ("garbage",)},
        ],
    )
    def test_invalid(self, bad: dict[str, object]) -> None:
        m = replace(manifest(entry(4, 3)), **bad)  # type: ignore[arg-type]
        d = decide_receive_detailed(
            chain_1_2_3(),
            m,
            expected_partition_id=P,
            expected_placement_id=LEADER,
            in_flight_bytes=0,
            max_in_flight_bytes=MB,
        )
        assert d.outcome is ReceiveOutcome.INVALID, d
        assert not d.outcome.acks and not d.outcome.needs_data

    def test_invalid_when_id_exists_with_other_fields(self) -> None:
        conflicting = SegmentEntry(segment_id=sid(3), base_segment_id=sid(1), placement_id=LEADER, epoch=1)
        assert decide(chain_1_2_3(), manifest(conflicting)) is ReceiveOutcome.INVALID

    def test_invalid_wins_over_overloaded(self) -> None:
        m = manifest(entry(4, 3), partition=OTHER_P)
        assert decide(chain_1_2_3(), m, in_flight=100 * MB, limit=MB) is ReceiveOutcome.INVALID

    def test_bad_arguments(self) -> None:
        with pytest.raises(SegmentArgumentError):
            decide(chain_1_2_3(), manifest(entry(4, 3)), in_flight=-1)
        with pytest.raises(SegmentArgumentError):
            decide(chain_1_2_3(), manifest(entry(4, 3)), limit=0)
        with pytest.raises(InvalidIdError):
            decide_receive(
                SegmentChain(),
                manifest(entry(4, 3)),
                expected_partition_id="nope",
                expected_placement_id=LEADER,
                in_flight_bytes=0,
                max_in_flight_bytes=1,
            )

    def test_outcome_flags(self) -> None:
        assert {o for o in ReceiveOutcome if o.acks} == {
            ReceiveOutcome.SEGMENT_EXISTS,
            ReceiveOutcome.FAST_FORWARD,
            ReceiveOutcome.FAST_FORWARD_ADD,
            ReceiveOutcome.MERGE,
        }
        assert not ReceiveOutcome.SEGMENT_EXISTS.needs_data


class TestLeaderReceive:
    def leader(
        self, chain: SegmentChain, m: PlainManifest, *, loading: bool = False, in_flight: int = 0
    ) -> ReceiveOutcome:
        return decide_leader_receive(
            chain,
            m,
            expected_partition_id=P,
            replica_placement_ids=frozenset({3, 4}),
            loading=loading,
            in_flight_bytes=in_flight,
            max_in_flight_bytes=8 * MB,
        ).outcome

    def test_loading_with_null_root_fast_forward_adds(self) -> None:
        m = manifest(entry(5, 4), sender=3)
        assert self.leader(SegmentChain(), m, loading=True) is ReceiveOutcome.FAST_FORWARD_ADD
        assert self.leader(SegmentChain(), m, loading=False) is ReceiveOutcome.MERGE

    def test_referenced_is_exists_else_merge(self) -> None:
        assert self.leader(chain_1_2_3(), manifest(entry(2, 1), sender=4)) is ReceiveOutcome.SEGMENT_EXISTS
        assert self.leader(chain_1_2_3(), manifest(entry(9, 2), sender=4)) is ReceiveOutcome.MERGE

    def test_detached_awaiting_merge_is_exists(self) -> None:
        chain = chain_1_2_3().add_detached(entry(9, 2))
        assert self.leader(chain, manifest(entry(9, 2), sender=4)) is ReceiveOutcome.SEGMENT_EXISTS

    def test_unknown_or_own_placement_is_invalid(self) -> None:
        assert self.leader(chain_1_2_3(), manifest(entry(9, 2), sender=LEADER)) is ReceiveOutcome.INVALID
        assert self.leader(chain_1_2_3(), manifest(entry(9, 2), sender=99)) is ReceiveOutcome.INVALID

    def test_overloaded(self) -> None:
        m = manifest(entry(9, 2), sender=3, size=8 * MB)
        assert self.leader(chain_1_2_3(), m, in_flight=1) is ReceiveOutcome.OVERLOADED


# -- a follower consuming a leader's segments channel, as DESIGN.md section 6 describes -----------


@dataclass
class Follower:
    """Chain + committed offsets, one consumer group per followed placement (DESIGN.md section 3)."""

    chain: SegmentChain = field(default_factory=SegmentChain)
    committed: dict[int, int] = field(default_factory=dict)  # placement -> committed offset

    def consume(self, placement: int, channel: list[PlainManifest], max_steps: int = 50) -> list[ReceiveOutcome]:
        pos = self.committed.get(placement, 0)
        replayed_from: set[int] = set()
        seen: list[ReceiveOutcome] = []
        for _ in range(max_steps):
            if pos >= len(channel):
                break
            m = channel[pos]
            d = decide_receive_detailed(
                self.chain,
                m,
                expected_partition_id=P,
                expected_placement_id=placement,
                in_flight_bytes=0,
                max_in_flight_bytes=64 * MB,
            )
            seen.append(d.outcome)
            if d.outcome is ReceiveOutcome.FAST_FORWARD:
                assert d.entry is not None
                self.chain = self.chain.fast_forward(d.entry)
            elif d.outcome is ReceiveOutcome.FAST_FORWARD_ADD:
                assert d.entry is not None
                self.chain = self.chain.fast_forward_add(d.entry)
            elif d.outcome is ReceiveOutcome.SEGMENT_EXISTS:
                pass  # skip the chunks, ack
            elif d.outcome is ReceiveOutcome.OUT_OF_ORDER:
                # no ack; seek back to the latest major manifest at or before pos and replay
                majors = [i for i in range(pos + 1) if channel[i].is_major]
                if not majors or majors[-1] in replayed_from:
                    break  # stuck until the leader publishes a new major
                pos = majors[-1]
                replayed_from.add(pos)
                continue
            else:
                break  # INVALID / OVERLOADED: no ack, stop
            pos += 1
            # ack only after the data is durable; a replay never moves the ack index back
            self.committed[placement] = max(pos, self.committed.get(placement, 0))
        return seen


class TestABAScenarios:
    def test_first_aba_major_minor_major_then_minor_on_the_old_minor(self) -> None:
        """Source 3.6, first case: the follower got M1, m1, then another major M2, then m2 (base m1).

        The sender's ack index says m1 is acked; the receiver's root is M2. The receiver answers
        OUT_OF_ORDER (no ack), seeks back to the latest major of the sender's channel, and converges.
        """
        m1_major, m1 = entry(1, None, major=True), entry(2, 1)
        m2 = entry(3, 2)
        other_major = SegmentEntry(segment_id=sid(50), base_segment_id=sid(49), placement_id=8, epoch=1, is_major=True)
        leader_channel = [manifest(m1_major), manifest(m1), manifest(m2)]
        f = Follower()
        f.consume(LEADER, leader_channel[:2])  # M1 and m1, acked
        assert f.committed[LEADER] == 2
        f.consume(8, [manifest(other_major, sender=8)])  # another major M2 arrives (another placement)
        assert f.chain.root == sid(50)

        outcomes = f.consume(LEADER, leader_channel)
        assert outcomes == [
            ReceiveOutcome.OUT_OF_ORDER,  # m2 is not based on the local root M2
            ReceiveOutcome.FAST_FORWARD_ADD,  # replay from M1: an unreferenced major again
            ReceiveOutcome.FAST_FORWARD,  # m1 re-attached
            ReceiveOutcome.FAST_FORWARD,  # m2
        ]
        assert f.chain.root == sid(3) and f.committed[LEADER] == 3
        assert [e.segment_id for e in f.chain.walk()] == [sid(3), sid(2), sid(1)]
        # M2 is now off the chain and the leader never acked it: the follower pushes it (merge).
        actions = {
            a.segment_id: a.kind for a in follower_replication(f.chain, acked_by_leader={sid(1), sid(2), sid(3)})
        }
        assert actions[sid(50)] is ActionKind.PUSH

    def test_out_of_order_waits_for_a_new_major_when_chains_diverged(self) -> None:
        # The follower holds a segment the leader never had on top of a shared base: replaying from
        # the shared major cannot fix it; it waits (no ack) until the leader's next major.
        base, shared = entry(1, None, major=True), entry(2, 1)
        f = Follower()
        f.consume(LEADER, [manifest(base), manifest(shared)])
        f.chain = f.chain.fast_forward(
            SegmentEntry(segment_id=sid(90), base_segment_id=sid(2), placement_id=3, epoch=1)
        )
        channel = [manifest(base), manifest(shared), manifest(entry(3, 2))]
        assert f.consume(LEADER, channel)[-1] is ReceiveOutcome.OUT_OF_ORDER
        assert f.committed[LEADER] == 2
        channel.append(manifest(entry(4, 3, major=True, included=(3, 2, 1))))
        channel.append(manifest(entry(5, 4)))
        f.committed[LEADER] = 3
        assert f.consume(LEADER, channel) == [ReceiveOutcome.FAST_FORWARD_ADD, ReceiveOutcome.FAST_FORWARD]
        assert f.chain.root == sid(5)

    def test_second_aba_reassigned_leader_gets_a_new_placement(self) -> None:
        """Source 3.6, second case: R leads (placement 5), everyone pushed to it, R is unassigned,
        later re-assigned and leads again with an empty partition.

        With a new placement id (11) R publishes on a new channel, read by a new consumer group that
        has no acks; manifests of the old placement are refused; and the followers' segments, acked
        by placement 5 only, are pushed again instead of being dropped.
        """
        a, b = entry(1, None, major=True), entry(2, 1)
        follower = Follower()
        follower.consume(5, [manifest(a, sender=5), manifest(b, sender=5)])
        acks = {5: {sid(1), sid(2)}}  # what placement 5 acknowledged (its group's offsets)

        empty_major = SegmentEntry(segment_id=sid(70), base_segment_id=None, placement_id=11, epoch=4, is_major=True)
        # The old channel's manifests are foreign to the new placement.
        assert follower.consume(11, [manifest(a, sender=5)]) == [ReceiveOutcome.INVALID]
        assert 11 not in follower.committed  # a new group starts with no acks
        assert follower.consume(11, [manifest(empty_major, sender=11)]) == [ReceiveOutcome.FAST_FORWARD_ADD]
        acks[11] = {sid(70)}

        by_placement = {x.segment_id: x.kind for x in follower_replication(follower.chain, acked_by_leader=acks[11])}
        assert by_placement[sid(1)] is ActionKind.PUSH and by_placement[sid(2)] is ActionKind.PUSH

        # Without placement ids (acks kept per *server*), R would look as if it had a and b:
        by_server = follower_replication(follower.chain, acked_by_leader=acks[5] | acks[11])
        assert all(x.kind is not ActionKind.PUSH for x in by_server)  # the data would never reach R again
