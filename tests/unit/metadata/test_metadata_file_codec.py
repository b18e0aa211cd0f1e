from __future__ import annotations

import dataclasses

import pytest
from helpers_metadata import Ids, new_file

from metadata.errors import MetadataDecodeError
from metadata.keyspace import Keyspace
from metadata.metadata_file import (
    ChangeType,
    MetadataFile,
    PartitionEntry,
    Placement,
    new_txnid,
    parse_store_key,
    store_key,
    validate_txnid,
)
from metadata.operations import JoinServer, SplitPartition
from shoal.errors import InvalidIdError
from shoal.wire.avro import codec


def test_roundtrip_every_field() -> None:
    ids = Ids()
    f = new_file(Keyspace.STRING, rf=2, split_points=(b"m",), ids=ids)
    f = SplitPartition(
        f.partitions[1].partition_id, b"t", ids.place("node-1", "node-2"), ids.place("node-2", "node-1")
    ).apply(f)
    f = JoinServer(f.partitions[0].partition_id, ids.place("node-3")[0]).apply(f)
    data = f.encode()
    assert data[:2] == b"\xc3\x01"
    back = MetadataFile.decode(data)
    assert back == f
    assert back.sequence == 3 and back.change is ChangeType.JOIN_SERVER
    assert back.partitions[1].splitting and back.partitions[1].split_point == b"t"


def test_txnid_is_random_sha1() -> None:
    a, b = new_txnid(), new_txnid()
    assert a != b and len(a) == 40
    assert validate_txnid(a) == a
    for bad in ("", "A" * 40, "0" * 39, None, "../../etc/passwd"):
        with pytest.raises(InvalidIdError):
            validate_txnid(bad)


def test_store_key() -> None:
    t = new_txnid()
    assert parse_store_key(store_key("events", t)) == ("events", t)
    for bad in (None, b"events", b"ev/ents/x", b"\xff/abc", b"1x/" + t.encode()):
        with pytest.raises(MetadataDecodeError):
            parse_store_key(bad)


@pytest.mark.parametrize(
    "data",
    [None, b"", b"garbage", b"\xc3\x01" + b"\x00" * 8 + b"xx"],
)
def test_garbage_does_not_decode(data: bytes | None) -> None:
    with pytest.raises(MetadataDecodeError):
        MetadataFile.decode(data)


def test_truncated_and_trailing_bytes_rejected() -> None:
    data = new_file().encode()
    with pytest.raises(MetadataDecodeError):
        MetadataFile.decode(data[:-3])
    with pytest.raises(MetadataDecodeError):
        MetadataFile.decode(data + b"\x00")


def _encode_raw(rec: dict) -> bytes:
    return codec("metadata_file").encode(rec)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda r: r.update(format_version=2),
        lambda r: r.update(txnid="nothex"),
        lambda r: r.update(sequence=0),
        lambda r: r.update(sequence=2),  # no parent
        lambda r: r.update(partitions=[]),
        lambda r: r["partitions"][0].update(begin=b"\x00" * 8),  # first begin not empty
        lambda r: r["partitions"][0].update(partition_id="../x"),
        lambda r: r["partitions"][0].update(servers=[]),
        lambda r: r["partitions"][0]["servers"][0].update(server_id="Bad Name"),
        lambda r: r["partitions"][0]["servers"][0].update(placement_id=0),
        lambda r: r["partitions"].append(dict(r["partitions"][0])),  # overlap / duplicate
        lambda r: r["partitions"][0].update(splitting=True),  # split without fields
        lambda r: r["table"].update(keyspace="STRING"),  # does not match the key type
        lambda r: r["table"]["columns"][0].update(type="decimal"),
        lambda r: r["partitions"][0]["servers"].append(dict(r["partitions"][0]["servers"][0])),
    ],
)
def test_inconsistent_files_fail_to_decode(mutate) -> None:
    rec = new_file().to_record()
    mutate(rec)
    with pytest.raises(MetadataDecodeError):
        MetadataFile.decode(_encode_raw(rec))


def test_validate_refuses_bad_uint64_boundary() -> None:
    f = new_file(split_points=(Keyspace.UINT64.encode(5),))
    bad = dataclasses.replace(f.partitions[1], begin=b"\x01\x02")
    g = dataclasses.replace(f, partitions=(f.partitions[0], bad))
    with pytest.raises(MetadataDecodeError):
        g.validate()
    with pytest.raises(MetadataDecodeError):
        g.encode()


def test_placements_unique_across_file() -> None:
    f = new_file(rf=1, split_points=(b"\x00" * 7 + b"\x05",))
    p = f.partitions[0].servers[0]
    dup = dataclasses.replace(f.partitions[1], servers=(Placement("node-9", p.placement_id),))
    with pytest.raises(MetadataDecodeError, match="placement id"):
        dataclasses.replace(f, partitions=(f.partitions[0], dup)).validate()
    assert isinstance(f.partitions[0], PartitionEntry)
