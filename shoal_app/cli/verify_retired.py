"""``shoal verify`` of a table's retired partitions: a split parent's channels after SPLIT_FINALIZE.

SPLIT_FINALIZE replaces a partition by its two children once every child placement acknowledged
the parent's data up to the parent's last accepted GTID (EventQL seed 000 section 3.8, table
partitioning seed 002 section 4.1; DESIGN.md section 8). From then on the table's METADATA no
longer lists the parent, but its channels stay until each of its replicas reaches UNLOAD_FINAL and
deletes its own. Every write still on them is a write the table must hold: a row the copy or the
freeze missed would be gone without any replica of a listed partition disagreeing.

So each partition an earlier METADATA version listed and the current one does not is read like a
listed one (:func:`shoal_app.cli.verify.read_channels`: hash chains, GTID order, every write kept as
a *floor*, :mod:`~shoal_app.cli.verify_coverage`), and each floor is checked on every replica of the
listed partition whose key range holds its partition key, with the same rule: the key at the floor's
GTID with the values written, or a newer version (pieces keep the parent's GTIDs, and each child's
first leader stamps GTIDs above them). A floor whose key no listed partition holds is a mismatch
too. A channel that is gone is nothing left to check (UNLOAD_FINAL ran; the replicas of a parent
delete theirs one after another, so a gone WAL channel that another placement's segments cover is
expected here, unlike on a listed partition).

Epochs go up across a split: the splitter seeds each child's epoch with the parent's before
SPLIT_FINALIZE, so every leader of a child (and of its own children) stamps with an epoch above
every epoch of the parent. A listed partition holding a retired partition's keys whose WAL channels
show an epoch at or below one on the retired partition's channels wrote GTIDs that lose to the
pieces' older rows (:func:`epochs_not_above`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata.keyspace import KeyRange, Keyspace
from shoal.segments.versioned import EPOCH_COLUMN, SEQ_COLUMN
from shoal_app.cli.models import ReplicaDescription
from shoal_app.cli.verify_coverage import Rows, WalFloors, floor_problems, replicas_missing, show
from shoal_app.cli.verify_newer import accounted, known_epoch, newer_than_floors
from storage_node.replication.split import key_range_mask


def retired_coverage(
    floors: WalFloors,
    listed: Sequence[tuple[KeyRange, Sequence[ReplicaDescription]]],
    rows: Rows,
    keyspace: Keyspace,
    retired_range: KeyRange | None = None,
    first_seq: Mapping[int, int] | None = None,
) -> str | None:
    """Which replicas of the listed partitions miss a write still on a retired partition's channels
    (each write checked where its partition key lies now), or hold a version of a key in
    ``retired_range`` newer than the retired channels' newest of it at a GTID the retired WAL
    channels account for (:func:`phantoms`; ``first_seq``: the epochs judged, :attr:`WalFloors.first_seq`
    by default); None when neither."""
    newest, problems = floor_problems(floors)
    if newest is not None:
        keys = list(floors.table.primary_key)
        column = newest.column(floors.table.partition_key)
        placed = pa.chunked_array([pa.array(np.zeros(newest.num_rows, np.bool_))])
        for key_range, replicas in listed:
            mask = key_range_mask(column, key_range, keyspace)
            holds = pc.any(mask).as_py()
            if not holds and (retired_range is None or not key_range.overlaps(retired_range)):
                continue  # holds none of the retired keys, or no write of them is left to compare with
            placed = pc.or_(placed, mask)
            found: list[str] = []

            def seen(who: str, scan: pa.Table, found: list[str] = found) -> None:
                if retired_range is not None:
                    mine = scan.filter(key_range_mask(scan.column(floors.table.partition_key), retired_range, keyspace))
                    firsts = floors.first_seq if first_seq is None else first_seq
                    found.extend(phantoms(who, mine, newest, firsts, keys))

            found += replicas_missing(newest.filter(mask), replicas, rows, keys, seen=seen)
            problems += [f"{p} (now in {key_range.describe(keyspace)})" for p in found]
        unplaced = newest.num_rows - int(pc.sum(placed.cast(pa.int64())).as_py() or 0)
        if unplaced:
            problems.append(f"{unplaced} write(s) on the channels lie in no listed partition's key range")
    return "; ".join(problems) if problems else None


def phantoms(
    who: str, scan: pa.Table, newest: pa.Table, first_seq: Mapping[int, int], key_columns: Sequence[str]
) -> list[str]:
    """A problem when ``scan`` (a listed partition's replica, its keys of the retired partition's
    range) holds a version newer than the retired channels' newest of its key (``newest``) at a
    GTID a retired WAL channel accounts for (``first_seq``, :func:`~shoal_app.cli.verify_newer.accounted`):
    the retired leader wrote every GTID of that epoch from there on to that channel, and nothing
    writes to it any more, so the version was never written; or at an epoch of that channel below
    its first record (:func:`~shoal_app.cli.verify_newer.known_epoch`): truncated by the Tail, it is
    in a segment the retired channels hold, or replaced there. A child's own writes carry epochs
    above the parent's (:func:`epochs_not_above`) and are not judged here."""
    newer = newer_than_floors(scan, newest, key_columns)
    wrong = newer.filter(pc.or_(accounted(newer, first_seq), known_epoch(newer, first_seq)))
    if wrong.num_rows == 0:
        return []
    shown = "; ".join(
        ", ".join(f"{k}={show(r[k])}" for k in key_columns) + f" at gtid {r[EPOCH_COLUMN]}:{r[SEQ_COLUMN]}"
        for r in wrong.slice(0, 3).to_pylist()
    )
    return [
        f"{who} holds {wrong.num_rows} version(s) newer than the retired partition's channels at GTIDs "
        f"its WAL channels hold every write of, which they do not ({shown})"
    ]


def epochs_not_above(
    retired_range: KeyRange,
    retired_epochs: Iterable[set[int]],
    listed: Sequence[tuple[KeyRange, str, Iterable[set[int]]]],
    keyspace: Keyspace,
) -> str | None:
    """The first listed partition over ``retired_range`` whose WAL channels show an epoch at or below
    the highest one on the retired partition's channels, as a reason (None: all above, or nothing
    observed to compare). ``listed``: (key range, partition id, epochs per WAL channel)."""
    highest = max((e for seen in retired_epochs for e in seen), default=None)
    if highest is None:
        return None
    for key_range, partition_id, epochs in listed:
        lowest = min((e for seen in epochs for e in seen), default=None)
        if lowest is not None and lowest <= highest and key_range.overlaps(retired_range):
            return (
                f"partition {partition_id} (now holding keys of {retired_range.describe(keyspace)}) wrote with "
                f"epoch {lowest}, not above this partition's epoch {highest}: its writes lose to older rows"
            )
    return None
