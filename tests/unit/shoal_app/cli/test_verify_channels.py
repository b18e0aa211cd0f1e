"""``shoal verify`` reads every channel that holds a partition's writes and fails on a WAL channel that
lost records no segment holds (DESIGN.md sections 6 and 10), without servers.

Each state here is wrong in a way the replicas cannot show (they all miss the same rows, or the rows
sit on a channel verify did not read), so only the channels can tell: verify must say MISMATCH.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from test_verify_coverage import _batch, _records, _replica, _segment
from test_verify_gtids import TOPICS, FakeChannels, _client, _file, _manifest, fake_metadata_client

from metadata.metadata_file import MetadataFile, Placement
from shoal.errors import KafkaOperationError
from shoal.kafka.readers import ChannelRecord
from shoal.wire.arrow_ipc import encode_batch
from shoal.wire.records import GENESIS_HASH, Gtid, WalRecord
from shoal_app.cli import verify as verify_module
from shoal_app.cli.verify import verify


def _described(pid: str, placement: int = 1, chain: tuple[str, ...] = ("s",)) -> dict[str, Any]:
    root = chain[-1] if chain else None
    return {
        "partition_id": pid,
        "placement_id": placement,
        "row_count": 1,
        "key_min": 1,
        "key_max": 1,
        "content_hash": "h",
        "chain": list(chain),
        "root": root,
    }


def verify_one_replica(channels: FakeChannels, file: MetadataFile, seq: int = 9) -> Any:
    """``verify`` of ``file``'s one partition, with one replica that holds key 9 at GTID (1, ``seq``)."""
    pid = file.partitions[0].partition_id
    return verify(
        _client(file),
        "events",
        channels=channels,
        describe=lambda _s: [_described(pid)],
        rows=lambda _s, _p: _replica([(9, "z", 1, seq)]),
    )


def test_a_wal_tail_above_what_segments_cover_is_a_mismatch() -> None:
    """Segments cover WAL offsets [0, 2); the Tail is 5: records 2..4 were deleted before any segment
    held them (retention, a hand-made delete_records, a wrong Tail). Every replica misses them alike."""
    file = _file()
    pid = file.partitions[0].partition_id
    seg, file0 = _segment(_manifest(pid, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 1)), is_major=False), [])
    wal = _records(pid, 1, [(Gtid(1, 9), _batch([9], ["z"], [False]))], first_offset=5)
    files = {seg.segment_id: file0}
    channels = FakeChannels({TOPICS.wal(pid, 1): (5, wal)}, {TOPICS.segments(pid, 1): [seg]}, files)

    def run(channels: FakeChannels) -> Any:
        return verify_one_replica(channels, file)

    report = run(channels)
    assert not report.ok
    (check,) = report.partitions[0].wal_channels
    assert not check.ok and "Tail 5 is above what segments cover of this channel (2)" in (check.error or "")
    # the same channel with segments up to its Tail agrees
    seg2 = _manifest(pid, 1, 1, (2, 5), (Gtid(1, 2), Gtid(1, 8)), segment_id="02" * 16, is_major=False)
    seg2, files[seg2.segment_id] = _segment(seg2, [])
    assert run(FakeChannels({TOPICS.wal(pid, 1): (5, wal)}, {TOPICS.segments(pid, 1): [seg, seg2]}, files)).ok
    # coverage by a segment another placement published (an adopted channel) counts too
    other = _manifest(pid, 2, 2, (0, 5), (Gtid(1, 0), Gtid(1, 8)), segment_id="03" * 16)
    other, files[other.segment_id] = _segment(replace(other, covered_wal_offsets=seg2.covered_wal_offsets), [])
    two = replace(file, partitions=(replace(file.partitions[0], servers_leaving=(Placement("node-2", 2),)),))
    adopted = FakeChannels(
        {TOPICS.wal(pid, 1): (5, wal)}, {TOPICS.segments(pid, 1): [seg], TOPICS.segments(pid, 2): [other]}, files
    )
    report = verify(
        _client(two),
        "events",
        channels=adopted,
        describe=lambda _s: [_described(pid)],
        rows=lambda _s, _p: _replica([(9, "z", 1, 9)]),
    )
    assert report.ok, report.to_json()


def test_the_tail_is_read_before_the_segments_channels() -> None:
    """A leader publishes a segment before it moves its Tail past it: a Tail read first is covered by what
    the segments channels hold when read after it, so a truncation racing verify is not a mismatch."""
    file = _file()
    pid = file.partitions[0].partition_id
    wal_topic = TOPICS.wal(pid, 1)
    seg = _manifest(pid, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 1)), is_major=False)

    class Racing(FakeChannels):
        def segments(self, topic: str, *, data: bool) -> Any:  # a segment up to 4 published, then the Tail moved to 4
            self.published[topic] = [
                seg,
                _manifest(pid, 1, 1, (2, 4), (Gtid(1, 2), Gtid(1, 3)), segment_id="02" * 16, is_major=False),
            ]
            self.wal[wal_topic] = (4, [])
            return super().segments(topic, data=data)

    channels = Racing({wal_topic: (2, [])}, {TOPICS.segments(pid, 1): [seg]})
    report = verify(_client(file), "events", channels=channels, describe=lambda _s: [_described(pid)])
    assert report.ok, report.to_json()


def test_a_wal_channel_gone_while_segments_cover_it_is_a_mismatch() -> None:
    file = _file()
    pid = file.partitions[0].partition_id
    seg = _manifest(pid, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 1)), is_major=False)
    report = verify(
        _client(file),
        "events",
        channels=FakeChannels({}, {TOPICS.segments(pid, 1): [seg]}),
        describe=lambda _s: [_described(pid)],
        rows=lambda _s, _p: _replica([]),
    )
    (check,) = report.partitions[0].wal_channels
    assert not report.ok and not check.ok
    assert check.error == "the channel is gone, but segments cover its offsets up to 2"
    # a placement that never led has neither: fine
    report = verify(_client(file), "events", channels=FakeChannels({}, {}), describe=lambda _s: [_described(pid)])
    assert report.ok and (report.partitions[0].wal_channels[0].error or "").startswith("no channel")


def test_a_channel_whose_metadata_has_an_error_is_an_error_not_a_missing_channel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A transient error (no leader for a moment after a broker went down) is asked again, with a
    fresh listing, until it clears or :attr:`KafkaChannels.transient_s` passed; any other error at once."""
    from confluent_kafka import KafkaError

    from shoal.kafka import admin

    def meta(code: int | None) -> Any:
        return type("Meta", (), {"error": None if code is None else KafkaError(code)})()

    listings: list[dict[str, Any]] = []

    class Admin:
        def list_topics(self, timeout: float) -> Any:
            return type("Listing", (), {"topics": listings.pop(0)})()

    monkeypatch.setattr(admin, "log_start_and_end", lambda _kafka, topic: (3, 9))
    channels = verify_module.KafkaChannels.__new__(verify_module.KafkaChannels)
    channels.kafka, channels._admin, channels._topics = None, Admin(), None
    channels.transient_pause_s = 0.0
    leaderless, healthy = meta(KafkaError.LEADER_NOT_AVAILABLE), meta(None)
    listings[:] = [{"t": leaderless}, {"t": leaderless}, {"t": healthy}]
    assert channels.bounds("t") == (3, 9) and not listings  # listed three times
    assert channels.bounds("absent") is None
    channels._topics, channels.transient_s = None, 0.0
    listings[:] = [{"t": leaderless}, {"t": leaderless}]
    with pytest.raises(KafkaOperationError, match="t: "):
        channels.bounds("t")  # still leaderless once transient_s passed
    channels._topics, channels.transient_s = None, 60.0
    listings[:] = [{"t": meta(KafkaError.TOPIC_AUTHORIZATION_FAILED)}, {"t": healthy}]
    with pytest.raises(KafkaOperationError, match="t: "):
        channels.bounds("t")  # not transient: no second listing
    assert len(listings) == 1


def _leaving(file: MetadataFile) -> MetadataFile:
    entry = file.partitions[0]
    return replace(file, partitions=(replace(entry, servers_leaving=(Placement("node-3", 3),)),))


def test_the_channels_of_a_leaving_placement_are_read() -> None:
    """Placement 3 is leaving (it led before): its WAL channel holds k=7, which no replica has; and it
    wrote with epoch 1, which placement 1 used too."""
    file = _leaving(_file())
    pid = file.partitions[0].partition_id
    own = _records(pid, 1, [(Gtid(1, 0), _batch([1], ["a"], [False]))])
    leaver = _records(pid, 3, [(Gtid(2, 0), _batch([7], ["kept"], [False]))])
    channels = FakeChannels({TOPICS.wal(pid, 1): (0, own), TOPICS.wal(pid, 3): (0, leaver)}, {})

    def run(rows: list[tuple[int, str, int, int]], channels: FakeChannels = channels) -> Any:
        return verify(
            _client(file),
            "events",
            channels=channels,
            describe=lambda _s: [_described(pid)],
            rows=lambda _s, _p: _replica(rows),
        )

    report = run([(1, "a", 1, 0)])
    part = report.partitions[0]
    assert [c.topic for c in part.wal_channels] == [TOPICS.wal(pid, 1), TOPICS.wal(pid, 3)]
    assert not report.ok and part.covered is False and "k=7 written at gtid 2:0" in (part.coverage_error or "")
    assert run([(1, "a", 1, 0), (7, "kept", 2, 0)]).ok
    shared = _records(pid, 3, [(Gtid(1, 5), _batch([7], ["kept"], [False]))])
    channels = FakeChannels({TOPICS.wal(pid, 1): (0, own), TOPICS.wal(pid, 3): (0, shared)}, {})
    report = run([(1, "a", 1, 0), (7, "kept", 1, 5)], channels)
    assert not report.ok and "epoch 1 was used by two leaders" in (report.partitions[0].gtid_error or "")


def test_a_record_whose_header_says_no_rows_is_decoded_too() -> None:
    file = _file()
    pid = file.partitions[0].partition_id
    record = WalRecord.create(
        partition_id=pid,
        placement_id=1,
        gtid=Gtid(1, 0),
        row_count=0,
        payload=encode_batch(_batch([4], ["x"], [False])),
        prev_hash=GENESIS_HASH,
    )
    report = verify(
        _client(file),
        "events",
        channels=FakeChannels({TOPICS.wal(pid, 1): (0, [ChannelRecord(0, record)])}, {}),
        describe=lambda _s: [_described(pid)],
        rows=lambda _s, _p: _replica([]),
    )
    part = report.partitions[0]
    assert not report.ok and "undecodable WAL record" in (part.coverage_error or ""), part


def test_the_text_output_says_when_chains_differ(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    from click.testing import CliRunner

    file = replace(
        _file(), partitions=(replace(_file().partitions[0], servers=(Placement("node-1", 1), Placement("node-2", 2))),)
    )
    pid = file.partitions[0].partition_id
    described = {"node-1": [_described(pid, 1, ("s1", "s2"))], "node-2": [_described(pid, 2, ("s1",))]}

    monkeypatch.setattr(verify_module, "MetadataClient", fake_metadata_client(file))
    monkeypatch.setattr(verify_module, "KafkaChannels", lambda _kafka: FakeChannels({}, {}))
    monkeypatch.setattr("metadata.node_registry.lookup_node", lambda _zk, _layout, server: server)
    monkeypatch.setattr("shoal.scan.describe_remote", lambda server, _t: described[server])
    monkeypatch.setattr("shoal.scan.scan_remote", lambda *_a, **_k: _replica([]))
    res = CliRunner().invoke(verify_module.verify_command, ["events", "--zk", "z:1", "--bootstrap-servers", "b:1"])
    assert "segment chains differ" in res.output, res.output


def test_a_record_naming_another_channel_and_a_segment_published_twice_with_other_bytes_are_errors() -> None:
    from shoal_app.cli.verify_gtids import GtidOrderError, check_manifests, check_wal_records

    pid = "cd" * 16
    foreign = _records(pid, 2, [(Gtid(1, 0), _batch([1], ["a"], [False]))])
    with pytest.raises(GtidOrderError, match=r"names partition .* placement 2, not this channel's"):
        check_wal_records(iter(foreign), topic="w", tail=0, owner=(pid, 1))
    assert check_wal_records(iter(foreign), topic="w", tail=0, owner=(pid, 2)).records == 1
    seg = _manifest(pid, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 1)))
    order = check_manifests(enumerate([seg, seg]), topic="s", placement_id=1, own_wal_topic=TOPICS.wal(pid, 1))
    assert order.manifests == 2 and order.covered_end(TOPICS.wal(pid, 1)) == 2
    other = replace(seg, checksum="1" * 64)
    with pytest.raises(GtidOrderError, match="published again with another checksum"):
        check_manifests(enumerate([seg, other]), topic="s", placement_id=1, own_wal_topic=TOPICS.wal(pid, 1))


def test_a_topic_kafka_deletes_by_time_or_size_is_a_mismatch() -> None:
    """A channel whose records Kafka deletes by ``retention.ms`` looks exactly like one the Tail
    truncated: every other check passes on what is left. Verify asks Kafka about every topic shoal
    truncates itself (ingest, WAL and segments of every placement, in every METADATA version)."""
    file = _file()
    pid = file.partitions[0].partition_id
    asked: list[list[str]] = []

    def retention(topics: Any) -> dict[str, str]:
        asked.append(list(topics))
        return {TOPICS.wal(pid, 1): "retention.ms=604800000"} if len(asked) == 1 else {}

    def run() -> Any:
        return verify(
            _client(file),
            "events",
            channels=FakeChannels({}, {}),
            describe=lambda _s: [_described(pid)],
            retention=retention,
        )

    report = run()
    assert not report.ok and report.time_retained == {TOPICS.wal(pid, 1): "retention.ms=604800000"}
    assert all(p.agree and p.wal_chains_ok and p.gtids_ok for p in report.partitions)  # nothing else shows it
    placements = [p.placement_id for p in file.partitions[0].all_placements()]
    expected = {TOPICS.ingest(pid)} | {t for p in placements for t in (TOPICS.wal(pid, p), TOPICS.segments(pid, p))}
    assert set(asked[0]) == expected
    assert run().ok  # the same table once the topic keeps its records


def test_the_text_output_names_a_topic_kafka_deletes_by_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    file = _file()
    pid = file.partitions[0].partition_id
    channels = FakeChannels({}, {})
    channels.retained = {TOPICS.ingest(pid): "retention.ms=604800000, retention.bytes=1073741824"}
    monkeypatch.setattr(verify_module, "MetadataClient", fake_metadata_client(file))
    monkeypatch.setattr(verify_module, "KafkaChannels", lambda _kafka: channels)
    monkeypatch.setattr("metadata.node_registry.lookup_node", lambda _zk, _layout, server: server)
    monkeypatch.setattr("shoal.scan.describe_remote", lambda server, _t: [_described(pid)])
    monkeypatch.setattr("shoal.scan.scan_remote", lambda *_a, **_k: _replica([]))
    res = CliRunner().invoke(verify_module.verify_command, ["events", "--zk", "z:1", "--bootstrap-servers", "b:1"])
    assert res.exit_code == 1, res.output
    assert "table events: MISMATCH" in res.output
    assert f"topic {TOPICS.ingest(pid)}: Kafka deletes its records by retention.ms=604800000" in res.output
