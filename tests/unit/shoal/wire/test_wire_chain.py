"""The WAL hash chain: chain_hash vectors and verify_chain."""

from __future__ import annotations

import dataclasses
import hashlib

import pyarrow as pa
import pytest

from shoal.errors import SchemaError, WireFormatError
from shoal.wire.arrow_ipc import encode_batch
from shoal.wire.avro import codec
from shoal.wire.records import GENESIS_HASH, Gtid, HashChainError, WalRecord, chain_hash, verify_chain

PID = "0123456789abcdef0123456789abcdef"


def make_chain(n: int = 5, rows: int = 3, epoch: int = 2) -> list[WalRecord]:
    records: list[WalRecord] = []
    prev = GENESIS_HASH
    for i in range(n):
        payload = encode_batch(pa.table({"k": pa.array(range(i * rows, (i + 1) * rows), pa.int64())}))
        rec = WalRecord.create(
            partition_id=PID,
            placement_id=5,
            gtid=Gtid(epoch, i * rows),
            row_count=rows,
            payload=payload,
            prev_hash=prev,
            created_at_ms=1_700_000_000_000 + i,
        )
        records.append(rec)
        prev = rec.hash
    return records


def rechain(records: list[WalRecord]) -> list[WalRecord]:
    """Recompute prev_hash/hash so the hashes are right and only the GTIDs or owners are under test."""
    out: list[WalRecord] = []
    prev = GENESIS_HASH
    for r in records:
        h = chain_hash(prev, r.gtid.epoch, r.gtid.seq, r.payload)
        out.append(dataclasses.replace(r, prev_hash=prev, hash=h))
        prev = h
    return out


# --- chain_hash ----------------------------------------------------------------------------------


def test_chain_hash_fixed_vectors() -> None:
    assert chain_hash(GENESIS_HASH, 0, 0, b"").hex() == hashlib.sha256(bytes(48)).hexdigest()
    assert (
        chain_hash(GENESIS_HASH, 1, 0, b"hello").hex()
        == "9f8fdfc1af46d56db99823a80826235c5b5f6bfa7ac523d28ed747a2ad279b8c"
    )
    prev = bytes(range(32))
    expected = hashlib.sha256(prev + (2**40).to_bytes(8, "big") + (7).to_bytes(8, "big") + b"\x00\xff").digest()
    assert chain_hash(prev, 2**40, 7, b"\x00\xff") == expected


def test_chain_hash_depends_on_every_input() -> None:
    base = chain_hash(GENESIS_HASH, 1, 2, b"p")
    assert len(base) == 32
    assert chain_hash(b"\x01" * 32, 1, 2, b"p") != base
    assert chain_hash(GENESIS_HASH, 2, 2, b"p") != base
    assert chain_hash(GENESIS_HASH, 1, 3, b"p") != base
    assert chain_hash(GENESIS_HASH, 1, 2, b"q") != base
    # fixed-width GTID fields: moving bytes between seq and payload changes the hash
    assert chain_hash(GENESIS_HASH, 0, 1, b"") != chain_hash(GENESIS_HASH, 0, 0, b"\x01")


@pytest.mark.parametrize(
    ("prev", "epoch", "seq", "payload"),
    [(b"short", 0, 0, b""), (GENESIS_HASH, -1, 0, b""), (GENESIS_HASH, 0, 2**63, b""), (GENESIS_HASH, 0, 0, "s")],
)
def test_chain_hash_rejects_bad_inputs(prev: bytes, epoch: int, seq: int, payload: bytes) -> None:
    with pytest.raises(SchemaError):
        chain_hash(prev, epoch, seq, payload)


# --- verify_chain: good chains -------------------------------------------------------------------


def test_good_chain_verifies() -> None:
    chain = make_chain()
    verify_chain(chain)
    verify_chain([])
    verify_chain(iter(chain))


def test_good_chain_verifies_after_the_wire() -> None:
    chain = [WalRecord.from_bytes(r.to_bytes()) for r in make_chain()]
    verify_chain(chain)
    verify_chain([codec("wal_record").decode(r.to_bytes()) for r in chain])  # raw dicts work too


def test_continuing_and_truncated_head() -> None:
    chain = make_chain(6)
    verify_chain(chain[3:], prev_hash=chain[2].hash)  # continuing a verified run
    verify_chain(chain[3:], prev_hash=None)  # after delete_records: the head is gone
    with pytest.raises(HashChainError) as info:
        verify_chain(chain[3:])  # not from genesis
    assert info.value.index == 0
    assert "genesis" in str(info.value)


def test_epoch_change_restarts_seq() -> None:
    a = make_chain(2, epoch=2)
    b = make_chain(2, epoch=3)
    verify_chain(rechain(a + b))


def test_empty_batches_still_need_increasing_gtids() -> None:
    chain = make_chain(3)
    chain = rechain([dataclasses.replace(r, row_count=0, gtid=Gtid(2, i)) for i, r in enumerate(chain)])
    verify_chain(chain)
    same = rechain([dataclasses.replace(r, row_count=0, gtid=Gtid(2, 0)) for r in chain])
    with pytest.raises(HashChainError, match="does not follow"):
        verify_chain(same)


# --- verify_chain: broken chains -----------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 2, 4])
def test_modified_payload_is_detected(index: int) -> None:
    chain = make_chain()
    other = encode_batch(pa.table({"k": pa.array([999, 0, 0], pa.int64())}))
    chain[index] = dataclasses.replace(chain[index], payload=other)
    with pytest.raises(HashChainError) as info:
        verify_chain(chain)
    assert info.value.index == index
    assert info.value.gtid == chain[index].gtid
    assert f"record {index} (gtid 2:{3 * index})" in str(info.value)
    assert "does not match its content" in str(info.value)


def test_modified_gtid_is_detected() -> None:
    chain = make_chain()
    chain[1] = dataclasses.replace(chain[1], gtid=Gtid(2, 4))
    with pytest.raises(HashChainError) as info:
        verify_chain(chain)
    assert info.value.index == 1


def test_modified_record_with_a_recomputed_hash_breaks_the_next_link() -> None:
    chain = make_chain()
    forged = WalRecord.create(
        partition_id=PID,
        placement_id=5,
        gtid=chain[2].gtid,
        row_count=3,
        payload=b"forged",
        prev_hash=chain[2].prev_hash,
        created_at_ms=0,
    )
    chain[2] = forged
    with pytest.raises(HashChainError) as info:
        verify_chain(chain)
    assert info.value.index == 3
    assert "prev_hash" in info.value.reason


def test_reordered_record_is_detected() -> None:
    chain = make_chain()
    chain[1], chain[2] = chain[2], chain[1]
    with pytest.raises(HashChainError) as info:
        verify_chain(chain)
    assert info.value.index == 1
    assert "prev_hash" in info.value.reason


@pytest.mark.parametrize("removed", [0, 2, 4])
def test_removed_record_is_detected(removed: int) -> None:
    chain = make_chain()
    del chain[removed]
    if removed == 4:  # the last record's removal leaves a valid, shorter chain: nothing points past the end
        verify_chain(chain)
        return
    with pytest.raises(HashChainError) as info:
        verify_chain(chain)
    assert info.value.index == removed


def test_duplicated_record_is_detected() -> None:
    chain = make_chain()
    chain.insert(2, chain[1])
    with pytest.raises(HashChainError) as info:
        verify_chain(chain)
    assert info.value.index == 2


def test_gtid_going_backwards_is_detected_even_with_good_hashes() -> None:
    chain = make_chain(3)
    chain[2] = dataclasses.replace(chain[2], gtid=Gtid(2, 4))  # overlaps record 1's rows 3..5
    with pytest.raises(HashChainError, match=r"2:3\.\.2:5") as info:
        verify_chain(rechain(chain))
    assert info.value.index == 2
    older_epoch = make_chain(3)
    older_epoch[1] = dataclasses.replace(older_epoch[1], gtid=Gtid(1, 100))
    with pytest.raises(HashChainError):
        verify_chain(rechain(older_epoch))


@pytest.mark.parametrize("change", [{"placement_id": 6}, {"partition_id": "f" * 32}])
def test_foreign_record_is_detected(change: dict[str, object]) -> None:
    chain = make_chain()
    chain[3] = dataclasses.replace(chain[3], **change)  # type: ignore[arg-type]
    with pytest.raises(HashChainError, match="belongs to") as info:
        verify_chain(rechain(chain))
    assert info.value.index == 3


def test_invalid_raw_record_is_a_chain_error() -> None:
    raw = [codec("wal_record").decode(r.to_bytes()) for r in make_chain(2)]
    raw[1]["partition_id"] = "../x"
    with pytest.raises(HashChainError, match="not a valid WAL record") as info:
        verify_chain(raw)
    assert info.value.index == 1
    assert info.value.gtid is None


def test_chain_error_is_a_wire_format_error() -> None:
    assert issubclass(HashChainError, WireFormatError)
