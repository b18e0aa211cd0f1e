"""The checker (pure functions): did the converged cluster keep every acknowledged write, once,
with its newest value, on every live replica, and were GTIDs never reused or out of order?

DESIGN.md section 10: no acknowledged write is lost; all live replicas converge to the same rows;
GTIDs of a partition strictly increase; no two leaders share an epoch. The inputs are plain data
(the writers' :class:`~chaos.history.History`, each replica's scanned rows, what a WAL observer
read from every WAL channel before Tail truncated it, ``shoal verify``'s verdict), so the rules are
unit-tested with fakes (``tests/unit/faults/test_chaos_checker.py``).
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from chaos.history import KeyWrites, decode_value
from chaos.models import ChannelSummary, ChaosCounts, CheckResult, GtidViolation, KeyViolation

Gtid = tuple[int, int]


@dataclass(frozen=True)
class WalObservation:
    """One WAL record as the observer read it: where, its first GTID, the (key, value) of each row (value
    None for a delete), the offset of its partition's ingest topic it accepted (None when it names
    none), and the partition whose channel it is on."""

    channel: str
    offset: int
    epoch: int
    seq: int
    rows: tuple[tuple[int, str | None], ...]
    ingest_offset: int | None = None
    partition_id: str = ""

    @property
    def first(self) -> Gtid:
        return (self.epoch, self.seq)

    @property
    def last(self) -> Gtid:
        return (self.epoch, self.seq + max(len(self.rows) - 1, 0))


def check_replica(
    server_id: str, rows: Sequence[tuple[int, str | None]], history: Mapping[int, KeyWrites]
) -> list[KeyViolation]:
    """Every violation on one replica: lost, duplicated, stale or unexpected keys. A key whose newest
    acknowledged version is a delete must be absent (or hold a newer uncertain version): holding an
    older value is stale, a deleted row that came back."""
    out: list[KeyViolation] = []
    values: dict[int, list[str | None]] = defaultdict(list)
    for key, value in rows:
        values[key].append(value)
    for key, found in values.items():
        shown = [str(v) for v in found]
        writes = history.get(key)
        if writes is None:
            out.append(KeyViolation(server_id=server_id, key=key, problem="unexpected", found=shown, expected=[]))
            continue
        expected = writes.describe(writes.allowed(), key)
        if len(found) > 1:
            out.append(KeyViolation(server_id=server_id, key=key, problem="duplicated", found=shown, expected=expected))
            continue
        version = decode_value(key, found[0])
        if version in writes.may_hold():
            continue
        written = version is not None and (version in writes.acked or version in writes.uncertain)
        problem = "stale" if written else "unexpected"
        out.append(KeyViolation(server_id=server_id, key=key, problem=problem, found=shown, expected=expected))
    for key, writes in history.items():
        if key not in values and not writes.may_be_absent():
            expected = writes.describe(writes.allowed(), key)
            out.append(KeyViolation(server_id=server_id, key=key, problem="lost", found=[], expected=expected))
    return out


def check_channels(observations: Sequence[WalObservation]) -> list[GtidViolation]:
    """GTID rules over every WAL record observed on the table's channels.

    Per partition (epochs and ingest offsets belong to one partition):

    - on each channel, each record's first GTID is above the previous record's last one: the same
      epoch going back is ``gtid_reused``, an older epoch is ``out_of_order``;
    - an epoch belongs to one leader role, so to one channel: ``epoch_shared`` otherwise;
    - the leaders accept the ingest topic in offset order, each from its predecessor's committed
      offset (DESIGN.md section 4): ordered by the ingest offset each record accepted, GTIDs
      increase (``accept_inverted`` otherwise: a leader wrote with an epoch older than its
      predecessor's) and no ingest offset is accepted twice (``accepted_twice``).

    Across partitions (a split moves keys to children whose epochs start above the parent's): the
    versions of a key are written in order, so their GTIDs must increase with the version:
    ``version_inverted`` otherwise (the newer write would lose to the older one), ``restamped`` when
    one version got two GTIDs. Deletes carry no version and are left to the replicas' check.
    """
    out: list[GtidViolation] = []
    by_partition: dict[str, list[WalObservation]] = defaultdict(list)
    for obs in observations:
        by_partition[obs.partition_id].append(obs)
    for records in by_partition.values():
        out += _channel_order(records)
        out += _accept_order(records)
    out += _version_order(observations)
    return out


def _channel_order(observations: Sequence[WalObservation]) -> list[GtidViolation]:
    out: list[GtidViolation] = []
    by_channel: dict[str, list[WalObservation]] = defaultdict(list)
    for obs in observations:
        by_channel[obs.channel].append(obs)
    epochs: dict[int, set[str]] = defaultdict(set)
    for channel, records in sorted(by_channel.items()):
        records.sort(key=lambda r: r.offset)
        previous: WalObservation | None = None
        for rec in records:
            epochs[rec.epoch].add(channel)
            if previous is not None and rec.first <= previous.last:
                problem = "gtid_reused" if rec.epoch == previous.epoch else "out_of_order"
                out.append(
                    GtidViolation(
                        problem=problem,
                        detail=f"{channel} offset {rec.offset}: gtid {rec.first} after {previous.last} "
                        f"(offset {previous.offset})",
                    )
                )
            previous = rec
    for epoch, channels in sorted(epochs.items()):
        if len(channels) > 1:
            out.append(GtidViolation(problem="epoch_shared", detail=f"epoch {epoch} on {sorted(channels)}"))
    return out


def _accept_order(observations: Sequence[WalObservation]) -> list[GtidViolation]:
    accepted = sorted((o for o in observations if o.ingest_offset is not None), key=lambda o: o.ingest_offset or 0)
    out: list[GtidViolation] = []
    for before, after in itertools.pairwise(accepted):
        where = f"ingest offset {after.ingest_offset} ({after.channel}@{after.offset}, gtid {after.first})"
        after_what = f"ingest offset {before.ingest_offset} ({before.channel}@{before.offset}, gtid {before.last})"
        if after.ingest_offset == before.ingest_offset:
            out.append(GtidViolation(problem="accepted_twice", detail=f"{where} and {after_what}"))
        elif after.first <= before.last:
            out.append(GtidViolation(problem="accept_inverted", detail=f"{where} not above {after_what}"))
    return out


def _version_order(observations: Sequence[WalObservation]) -> list[GtidViolation]:
    stamped: dict[int, list[tuple[Gtid, int, str]]] = defaultdict(list)
    for obs in observations:
        for i, (key, value) in enumerate(obs.rows):
            version = decode_value(key, value)
            if version is not None:
                stamped[key].append(((obs.epoch, obs.seq + i), version, f"{obs.channel}@{obs.offset}"))
    out: list[GtidViolation] = []
    for key, rows in sorted(stamped.items()):
        counts = Counter(version for _, version, _ in rows)
        for version, n in sorted(counts.items()):
            if n > 1:
                where = [f"{g} {at}" for g, v, at in rows if v == version]
                out.append(GtidViolation(problem="restamped", detail=f"key {key} version {version} stamped {where}"))
        rows.sort()
        for (g1, v1, at1), (g2, v2, at2) in itertools.pairwise(rows):
            if v2 < v1 or (g1 == g2 and v1 != v2):  # a tie is as bad: last-writer-wins cannot order them
                out.append(
                    GtidViolation(
                        problem="version_inverted",
                        detail=f"key {key}: version {v1} has gtid {g1} ({at1}), version {v2} has {g2} ({at2})",
                    )
                )
    return out


def summarize_channels(observations: Sequence[WalObservation]) -> list[ChannelSummary]:
    by_channel: dict[str, list[WalObservation]] = defaultdict(list)
    for obs in observations:
        by_channel[obs.channel].append(obs)
    out = []
    for channel, records in sorted(by_channel.items()):
        records = sorted(records, key=lambda r: r.offset)
        out.append(
            ChannelSummary(
                channel=channel,
                records=len(records),
                epochs=sorted({r.epoch for r in records}),
                first=f"{records[0].first}@{records[0].offset}",
                last=f"{records[-1].last}@{records[-1].offset}",
            )
        )
    return out


def accepted(
    history: Mapping[int, KeyWrites], observations: Sequence[WalObservation]
) -> tuple[dict[int, KeyWrites], int]:
    """``history`` with every uncertain version a committed WAL record holds moved to acknowledged,
    and how many were. A writer that never got its delivery report (a message timeout while a
    broker restarts, a producer closed with messages in flight) does not know its write landed; the
    leader that committed its WAL record accepted it, and an accepted write is never lost. A delete
    row carries no version: it stands for the first delete version after the value version stamped
    before it on the key."""
    landed: dict[int, set[int]] = defaultdict(set)
    stamped: dict[int, list[tuple[Gtid, int | None]]] = defaultdict(list)
    for obs in observations:
        for i, (key, value) in enumerate(obs.rows):
            version = decode_value(key, value)
            if version is not None:
                landed[key].add(version)
            if value is None or version is not None:
                stamped[key].append(((obs.epoch, obs.seq + i), version))
    # a delete row carries no version: it is the first delete version after the value stamped before
    # it (one writer per key, versions stamped in order); the smallest such is the safe choice
    for key, rows in stamped.items():
        writes = history.get(key)
        if writes is None:
            continue
        before = -1
        for _gtid, version in sorted(rows, key=lambda r: r[0]):
            if version is not None:
                before = max(before, version)
                continue
            later = sorted(d for d in writes.deletes if d > before)
            if later:
                landed[key].add(later[0])
                before = later[0]
    out = dict(history)
    promoted = 0
    for key, versions in landed.items():
        writes = history.get(key)
        moved = versions & writes.uncertain if writes is not None else set()
        if writes is None or not moved:
            continue
        out[key] = KeyWrites(writes.acked | moved, writes.uncertain - moved, writes.sent, set(writes.deletes))
        promoted += len(moved)
    return out, promoted


def check(
    history: Mapping[int, KeyWrites],
    replicas: Mapping[str, Sequence[tuple[int, str | None]] | None],
    observations: Sequence[WalObservation] = (),
    *,
    misplaced: Mapping[str, Sequence[tuple[str, int]]] | None = None,
    verify_ok: bool | None = None,
    limit: int = 20,
) -> CheckResult:
    """The verdict on a converged cluster. ``replicas`` maps every live replica to its rows (None:
    it could not be scanned, which counts every acknowledged key as lost there). A version a
    committed WAL record in ``observations`` holds counts as acknowledged (:func:`accepted`).
    ``misplaced`` maps a replica to the (partition id, key) of each row a partition returned outside
    its key range: the rows of every partition are judged together (a split moves keys between
    them), so a key held only by the wrong partition, which routing and reads never ask for, would
    otherwise pass."""
    history, promoted = accepted(history, observations)
    key_violations: list[KeyViolation] = []
    for server_id, rows in sorted(replicas.items()):
        key_violations += check_replica(server_id, rows if rows is not None else [], history)
    for server_id, wrong in sorted((misplaced or {}).items()):
        key_violations += [
            KeyViolation(server_id=server_id, key=key, problem="misplaced", found=[f"in partition {pid}"], expected=[])
            for pid, key in wrong
        ]
    gtid_violations = check_channels(observations)
    problems = Counter(v.problem for v in key_violations)
    states = {tuple(sorted(rows, key=lambda r: r[0])) if rows is not None else None for rows in replicas.values()}
    identical = len(states) == 1 and None not in states  # no replica at all is no evidence
    counts = ChaosCounts(
        runs=1,
        writes=sum(w.sent for w in history.values()),
        deletes=sum(len(w.deletes) for w in history.values()),
        acked=sum(len(w.acked) for w in history.values()) - promoted,
        uncertain=sum(len(w.uncertain) for w in history.values()) + promoted,
        uncertain_accepted=promoted,
        keys=len(history),
        lost=problems["lost"],
        duplicated=problems["duplicated"],
        stale=problems["stale"],
        unexpected=problems["unexpected"],
        misplaced=problems["misplaced"],
        gtid_violations=len(gtid_violations),
        wal_records_observed=len(observations),
        verify_failures=int(verify_ok is False),
    )
    ok = not key_violations and not gtid_violations and identical and verify_ok is not False
    counts = counts.model_copy(update={"failed_runs": int(not ok)})
    return CheckResult(
        ok=ok,
        counts=counts,
        key_violations=key_violations[:limit],
        gtid_violations=gtid_violations[:limit],
        replicas_identical=identical,
        verify_ok=verify_ok,
        channels=summarize_channels(observations),
    )
