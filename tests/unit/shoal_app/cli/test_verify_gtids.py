"""``shoal verify`` checks the GTID order of every channel, streamed (DESIGN.md section 10), without servers."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from metadata.metadata_file import MetadataFile, Placement
from metadata.operations import create_file
from metadata.table import Column, ColumnType, TableDefinition
from shoal.kafka.readers import ChannelRecord
from shoal.topics import TopicNames
from shoal.wire.records import GENESIS_HASH, Gtid, IngestOffset, WalOffsetRange, WalRecord
from shoal.wire.records import ManifestRecord as WireManifest
from shoal_app.cli import verify as verify_module
from shoal_app.cli.verify import verify, verify_command
from shoal_app.cli.verify_coverage import ChannelSegment
from shoal_app.cli.verify_gtids import (
    GtidOrderError,
    WalOrder,
    accept_order,
    check_manifests,
    check_wal_records,
    shared_epochs,
)

TOPICS = TopicNames("shoal")
TABLE = TableDefinition(
    "events", (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING)), ("k",), "k", 1
)


def _file() -> MetadataFile:
    return create_file(TABLE, [(Placement("node-1", 1),)])


def _wal(pid: str, placement: int, gtids: list[tuple[int, int, int]], first_offset: int = 0) -> list[ChannelRecord]:
    """Records (epoch, seq, rows) chained from genesis, at consecutive offsets from ``first_offset``."""
    out, prev = [], GENESIS_HASH
    for i, (epoch, seq, n) in enumerate(gtids):
        rec = WalRecord.create(
            partition_id=pid, placement_id=placement, gtid=Gtid(epoch, seq), row_count=n, payload=b"x", prev_hash=prev
        )
        out.append(ChannelRecord(first_offset + i, rec))
        prev = rec.hash
    return out


def _manifest(
    pid: str, placement: int, epoch: int, covered: tuple[int, int], gtids: tuple[Gtid, Gtid], **kw: Any
) -> WireManifest:
    fields: dict[str, Any] = {
        "table": "events",
        "partition_id": pid,
        "segment_id": kw.pop("segment_id", "ab" * 16),
        "base_segment_id": None,
        "included_segment_ids": (),
        "is_major": kw.pop("is_major", True),
        "placement_id": placement,
        "epoch": epoch,
        "checksum": "0" * 64,
        "size_bytes": 10,
        "row_count": 20,
        "chunk_count": 1,
        "covered_wal_offsets": (WalOffsetRange(TOPICS.wal(pid, placement), *covered),),
        "latest_major_offset": None,
        "created_at_ms": 1,
        "min_gtid": gtids[0],
        "max_gtid": gtids[1],
    }
    return WireManifest(**fields)


class FakeChannels:
    """A ChannelSource over lists; every read is an iterator (nothing is handed over as a list)."""

    def __init__(
        self,
        wal: dict[str, tuple[int, list[ChannelRecord]]],
        segments: dict[str, list[WireManifest]],
        files: dict[str, bytes] | None = None,
    ) -> None:
        self.wal, self.published, self.files = wal, segments, files or {}
        self.retained: dict[str, str] = {}
        """Topics that Kafka deletes records of by time or size (``KafkaChannels.time_retained``)."""
        self.listed: set[str] | None = None
        """The topics as listed at the first ``bounds`` since ``refresh`` (``KafkaChannels`` lists once)."""
        self.ingest: Any = None
        """The ingest topics' reader (``KafkaChannels.ingest_reader``); None: not checked."""

    def refresh(self) -> None:
        self.listed = None

    def ingest_reader(self) -> Any:
        return self.ingest

    def time_retained(self, topics: Iterable[str]) -> dict[str, str]:
        return {t: s for t, s in self.retained.items() if t in set(topics)}

    def bounds(self, topic: str) -> tuple[int, int] | None:
        if self.listed is None:
            self.listed = {*self.wal, *self.published}
        if topic not in self.listed:
            return None
        if topic in self.wal:
            tail, records = self.wal[topic]
            return tail, (records[-1].offset + 1 if records else tail)
        if topic in self.published:
            return 0, len(self.published[topic]) * 2
        return None

    def wal_records(self, topic: str, start: int) -> Iterator[ChannelRecord]:
        return (r for r in self.wal[topic][1] if r.offset >= start)

    def segments(self, topic: str, *, data: bool) -> Iterator[ChannelSegment]:
        """Each manifest at an even offset, its file (``files`` by segment id) when asked for."""
        for i, m in enumerate(self.published[topic]):
            file = self.files.get(m.segment_id) if data else None
            missing = "no chunks" if data and file is None else None
            yield ChannelSegment(2 * i, m, file, missing)


def _client(file: MetadataFile) -> Any:
    return SimpleNamespace(
        coordinator=SimpleNamespace(current=lambda _table: file, history=lambda _table: [file]),
        config=SimpleNamespace(topic_prefix="shoal", kafka=None),
    )


def fake_metadata_client(file: MetadataFile) -> Any:
    """A stand-in for ``MetadataClient`` whose coordinator answers ``file`` (for the CLI command)."""

    class FakeMetadataClient:
        def __init__(self, _config: object) -> None:
            self.config = SimpleNamespace(topic_prefix="shoal", kafka=None)
            self.coordinator = SimpleNamespace(current=lambda _table: file, history=lambda _table: [file])
            self.zk, self.layout = None, None

        def __enter__(self) -> FakeMetadataClient:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    return FakeMetadataClient


def _described(file: MetadataFile) -> Any:
    pid = file.partitions[0].partition_id
    return lambda _server: [
        {
            "partition_id": pid,
            "placement_id": 1,
            "row_count": 20,
            "key_min": 1,
            "key_max": 1,
            "content_hash": "h",
            "chain": ["s"],
            "root": "s",
        }
    ]


def _reused_gtid_after_truncation(pid: str) -> FakeChannels:
    """A segment holds GTIDs 1:0..1:19 and covers WAL offsets [0, 2); the WAL was truncated to 2 and the
    next leader role of the same epoch restarted at seq 0 (a fresh hash chain: the link is gone)."""
    seg = _manifest(pid, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 19)))
    return FakeChannels(
        {TOPICS.wal(pid, 1): (2, _wal(pid, 1, [(1, 0, 5)], first_offset=2))}, {TOPICS.segments(pid, 1): [seg]}
    )


def test_a_wal_record_reusing_a_gtid_below_its_segments_makes_verify_disagree() -> None:
    file = _file()
    pid = file.partitions[0].partition_id
    report = verify(_client(file), "events", channels=_reused_gtid_after_truncation(pid), describe=_described(file))
    assert not report.ok
    part = report.to_json()["partitions"][0]
    assert part["agree"] and not part["gtids_ok"] and not part["wal_chains_ok"]
    (wal,) = part["wal_channels"]
    assert not wal["ok"] and "GtidOrderError" in wal["error"] and "not above 1:19" in wal["error"], wal
    # the same channels in order pass
    good = _reused_gtid_after_truncation(pid)
    good.wal[TOPICS.wal(pid, 1)] = (2, _wal(pid, 1, [(2, 0, 5)], first_offset=2))
    assert verify(_client(file), "events", channels=good, describe=_described(file)).ok


def test_verify_json_output_says_why_the_gtids_are_out_of_order(monkeypatch: pytest.MonkeyPatch) -> None:
    file = _file()
    pid = file.partitions[0].partition_id

    monkeypatch.setattr(verify_module, "MetadataClient", fake_metadata_client(file))
    monkeypatch.setattr(verify_module, "KafkaChannels", lambda _kafka: _reused_gtid_after_truncation(pid))
    monkeypatch.setattr("metadata.node_registry.lookup_node", lambda *_a: "grpc://x")
    monkeypatch.setattr("shoal.scan.describe_remote", lambda _loc, _t: _described(file)("node-1"))
    res = CliRunner().invoke(
        verify_command, ["events", "--output", "json", "--zk", "z:1", "--bootstrap-servers", "b:1"]
    )
    assert res.exit_code == 1, (res.output, res.exception)
    doc = json.loads(res.output)
    assert doc["ok"] is False
    assert "not above 1:19" in doc["partitions"][0]["wal_channels"][0]["error"]


def test_lower_gtids_inside_one_channel_and_epochs_shared_by_two_channels_are_reported() -> None:
    pid = "ab" * 16
    with pytest.raises(Exception, match="gtid does not follow"):
        check_wal_records(iter(_wal(pid, 1, [(2, 0, 3), (2, 1, 1)])), topic="w", tail=0)
    with pytest.raises(Exception, match="gtid does not follow"):
        check_wal_records(iter(_wal(pid, 1, [(3, 0, 1), (2, 5, 1)])), topic="w", tail=0)
    order = check_wal_records(iter(_wal(pid, 1, [(2, 0, 3), (2, 3, 1), (4, 0, 1)])), topic="w", tail=0)
    assert (order.records, order.epochs) == (3, {2, 4})
    assert shared_epochs({"a": {1, 2}, "b": {3}}) is None
    assert "epoch 2" in str(shared_epochs({"a": {1, 2}, "b": {2, 3}}))


def test_segments_channel_order() -> None:
    pid = "cd" * 16
    own = TOPICS.wal(pid, 1)
    first = _manifest(pid, 1, 1, (0, 2), (Gtid(1, 0), Gtid(1, 19)), segment_id="01" * 16)
    second = _manifest(pid, 1, 1, (2, 4), (Gtid(1, 20), Gtid(1, 29)), segment_id="02" * 16, is_major=False)
    order = check_manifests(enumerate([first, second, second]), topic="s", placement_id=1, own_wal_topic=own)
    assert order.manifests == 3 and order.floor_at(3) == Gtid(1, 19) and order.floor_at(4) == Gtid(1, 29)
    reused = _manifest(pid, 1, 1, (4, 6), (Gtid(1, 5), Gtid(1, 9)), segment_id="03" * 16, is_major=False)
    with pytest.raises(GtidOrderError, match="previous flushed segment"):
        check_manifests(enumerate([first, second, reused]), topic="s", placement_id=1, own_wal_topic=own)
    older = _manifest(pid, 1, 0, (4, 6), (Gtid(0, 50), Gtid(0, 59)), segment_id="04" * 16, is_major=False)
    with pytest.raises(GtidOrderError, match="leader term went back"):
        check_manifests(enumerate([first, older]), topic="s", placement_id=1, own_wal_topic=own)
    future = _manifest(pid, 1, 1, (4, 6), (Gtid(1, 30), Gtid(2, 0)), segment_id="05" * 16, is_major=False)
    with pytest.raises(GtidOrderError, match="epoch after its writer's"):
        check_manifests(enumerate([first, future]), topic="s", placement_id=1, own_wal_topic=own)


def test_replicas_that_agree_on_keys_outside_their_range_are_a_mismatch() -> None:
    """Two partitions split at 100: a replica of the low one holding key 150 (rows a split left in the wrong
    child, or a misrouted write) makes verify fail although its replicas agree (EventQL partitioning, s. 2)."""
    from metadata.keyspace import KeyRange, Keyspace
    from shoal_app.cli.models import ReplicaDescription
    from shoal_app.cli.verify import outside_range

    def replica(lo: int | None, hi: int | None, rows: int = 2) -> ReplicaDescription:
        return ReplicaDescription(
            server_id="node-1",
            placement_id=1,
            partition_id="p",
            root=None,
            chain=[],
            row_count=rows,
            content_hash="h",
            key_min=lo,
            key_max=hi,
        )

    low = KeyRange(b"", Keyspace.UINT64.encode(100))
    high = KeyRange(Keyspace.UINT64.encode(100), b"")
    assert outside_range([replica(0, 99), replica(None, None, rows=0)], low, Keyspace.UINT64) is None
    # a replica with rows whose node leaves out its bounds cannot be checked, so it does not pass
    error = outside_range([replica(0, 99), replica(None, None)], low, Keyspace.UINT64)
    assert error is not None and "holds 2 rows but does not say its lowest and highest keys" in error
    error = outside_range([replica(3, 150)], low, Keyspace.UINT64)
    assert error is not None and "highest key 150" in error and "node-1#1" in error
    assert outside_range([replica(100, 2**64 - 1)], high, Keyspace.UINT64) is None
    assert "lowest key 99" in (outside_range([replica(99, 120)], high, Keyspace.UINT64) or "")
    assert outside_range([replica(-1, 5)], low, Keyspace.UINT64) is not None  # not a key at all

    file = _file()
    pid = file.partitions[0].partition_id
    good = _reused_gtid_after_truncation(pid)
    good.wal[TOPICS.wal(pid, 1)] = (2, _wal(pid, 1, [(2, 0, 5)], first_offset=2))
    described = _described(file)("node-1")
    assert verify(_client(file), "events", channels=good, describe=lambda _s: described).ok
    report = verify(
        _client(file), "events", channels=good, describe=lambda _s: [{**described[0], "key_min": "x", "key_max": "y"}]
    )
    part = report.to_json()["partitions"][0]
    assert not report.ok and part["agree"] and not part["in_range"] and "lowest key 'x'" in part["range_error"]


def test_an_own_segment_merged_back_by_a_later_term_keeps_its_gtids_without_breaking_the_order() -> None:
    """The sequence of a CI run (kill the leader twice under writes): placement 1 flushed WAL [4, 6) just
    before it was killed, published it again when it came back as a follower, and, leading again in
    epoch 4, merged that unreferenced segment back (source 3.5, ``merge_detached``): a new segment of
    placement 1 with the same own-WAL range and the rows' old GTIDs. It is not a flush, so it is not
    ordered against the flushes; a later flush of new offsets still is."""
    pid = "cd" * 16
    own = TOPICS.wal(pid, 1)
    first = _manifest(pid, 1, 1, (0, 4), (Gtid(1, 0), Gtid(1, 19)), segment_id="01" * 16)
    last_flush = _manifest(pid, 1, 1, (4, 6), (Gtid(1, 20), Gtid(1, 29)), segment_id="02" * 16, is_major=False)
    merged_back = _manifest(pid, 1, 4, (4, 6), (Gtid(1, 20), Gtid(1, 29)), segment_id="03" * 16, is_major=False)
    next_flush = _manifest(pid, 1, 4, (6, 8), (Gtid(4, 0), Gtid(4, 9)), segment_id="04" * 16, is_major=False)
    channel = [first, last_flush, merged_back, next_flush, merged_back]
    order = check_manifests(enumerate(channel), topic="s", placement_id=1, own_wal_topic=own)
    assert order.manifests == 5 and order.floor_at(7) == Gtid(1, 29) and order.floor_at(8) == Gtid(4, 9)
    stale = _manifest(pid, 1, 4, (8, 10), (Gtid(1, 25), Gtid(4, 12)), segment_id="05" * 16, is_major=False)
    with pytest.raises(GtidOrderError, match="previous flushed segment"):  # new offsets: a flush, ordered
        check_manifests(enumerate([*channel, stale]), topic="s", placement_id=1, own_wal_topic=own)


def _accepting(pid: str, placement: int, records: list[tuple[int, int, int, int]]) -> list[ChannelRecord]:
    """A leader's WAL records (epoch, seq, rows, the ingest offset each accepted), chained from genesis
    at WAL offsets 0, 1, ..."""
    out, prev = [], GENESIS_HASH
    for i, (epoch, seq, n, ingest) in enumerate(records):
        rec = WalRecord.create(
            partition_id=pid,
            placement_id=placement,
            gtid=Gtid(epoch, seq),
            row_count=n,
            payload=b"x",
            prev_hash=prev,
            ingest_offsets=(IngestOffset(TOPICS.ingest(pid), 0, ingest),),
        )
        out.append(ChannelRecord(i, rec))
        prev = rec.hash
    return out


def test_a_leader_that_accepts_after_its_predecessor_with_an_older_epoch_is_out_of_order() -> None:
    """Placement 1 accepted ingest offsets 0-1 with epoch 5, then placement 2 took over from offset 2
    with epoch 4: each channel is in order alone and no epoch is shared, but the later writes have
    the lower GTIDs, so every replica keeps the older values of their keys alike."""
    file = replace(_file(), partitions=(replace(_file().partitions[0], servers_leaving=(Placement("node-2", 2),)),))
    pid = file.partitions[0].partition_id
    first = _accepting(pid, 1, [(5, 0, 10, 0), (5, 10, 10, 1)])

    def run(second: list[ChannelRecord]) -> Any:
        channels = FakeChannels({TOPICS.wal(pid, 1): (0, first), TOPICS.wal(pid, 2): (0, second)}, {})
        return verify(_client(file), "events", channels=channels, describe=lambda _s: [])

    assert run(_accepting(pid, 2, [(6, 0, 5, 2), (6, 5, 5, 3)])).partitions[0].gtids_ok
    part = run(_accepting(pid, 2, [(4, 0, 5, 2), (4, 5, 5, 3)])).partitions[0]
    assert not part.gtids_ok and part.wal_chains_ok
    assert "ingest offset 2 was accepted with gtid 4:0" in (part.gtid_error or ""), part.gtid_error
    assert "not above gtid 5:19 of ingest offset 1" in (part.gtid_error or "")
    # an ingest offset accepted by two leaders (a zombie committed after its successor started)
    part = run(_accepting(pid, 2, [(6, 0, 5, 1), (6, 5, 5, 2)])).partitions[0]
    assert not part.gtids_ok and "ingest offset 1 was accepted twice" in (part.gtid_error or ""), part.gtid_error
    # records of another ingest topic (none in shoal today) are not ordered with these
    assert accept_order([WalOrder()]) is None


def test_accept_order_sorts_by_ingest_offset_across_truncated_channels() -> None:
    pid = _file().partitions[0].partition_id
    orders = []
    for placement, records in ((2, [(7, 0, 1, 5), (7, 1, 1, 9)]), (1, [(6, 3, 2, 3), (6, 5, 1, 4)])):
        out = WalOrder()
        check_wal_records(
            _accepting(pid, placement, records), topic=f"w{placement}", tail=0, out=out, ingest_topic=TOPICS.ingest(pid)
        )
        orders.append(out)
    assert [a.ingest_offset for o in orders for a in o.accepted] == [5, 9, 3, 4]
    assert accept_order(orders) is None
    # the same records named with another ingest topic are not kept
    out = WalOrder()
    check_wal_records(_accepting(pid, 1, [(6, 3, 2, 3)]), topic="w", tail=0, out=out, ingest_topic="other")
    assert out.accepted == [] and out.records == 1
