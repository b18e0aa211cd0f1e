"""What a segments channel's manifests say: acks per replica, minors awaiting compaction, WAL coverage."""

from __future__ import annotations

from monitor.segments import ChannelManifests, ManifestInfo


def m(offset: int, major: bool, covered: tuple[tuple[str, int, int], ...] = ()) -> ManifestInfo:
    return ManifestInfo(offset, f"{offset:032x}", major, None, 0, 10, 1, 1, covered)


def test_acks_minors_and_coverage() -> None:
    ch = ChannelManifests(
        "t", manifests=[m(0, True), m(2, False, (("w", 0, 5),)), m(4, False, (("w", 5, 9), ("x", 0, 1)))]
    )
    assert ch.majors == 1 and ch.minors_awaiting_compaction() == 2
    assert ch.unacked(None) == 3 and ch.unacked(3) == 1 and ch.unacked(5) == 0
    assert [ch.acked(3, x) for x in ch.manifests] == [True, True, False]
    assert ch.covered_end("w") == 9 and ch.covered_end("x") == 1 and ch.covered_end("y") is None


def test_no_major_yet_means_every_minor_awaits_compaction() -> None:
    assert ChannelManifests("t", manifests=[m(0, False), m(2, False)]).minors_awaiting_compaction() == 2
    assert ChannelManifests("t", manifests=[m(0, False), m(2, True)]).minors_awaiting_compaction() == 0
