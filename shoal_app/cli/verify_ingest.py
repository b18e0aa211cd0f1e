"""``shoal verify``'s check that the leaders accepted every write Kafka acknowledged (DESIGN.md section 4.2).

A write is acknowledged when its ingest topic took it (the producer's delivery report), and accepted
when the partition's leader committed the WAL record that holds it together with the leader group's
offset past it. Everything else verify checks starts at the channels, so a write acknowledged but
never accepted (no leader running, a leader or a split forwarder that retries one message for ever)
is on no channel and in no replica, and a quiet table and a stuck one would both pass.

So for each ingest topic of the table (listed partitions and retired split parents, whose
stragglers the forwarder takes under the parent's leader group): its high watermark (every write
acknowledged so far is below it) is read, then its last stable offset (the end a ``read_committed``
reader, the leader, sees) must reach it: a transaction still open holds back every record after its
first one, non-transactional writes too, and verify waits for it to end. Then the group's committed
offset is read; the committed records between it and the high watermark (transaction markers and
aborted records are not records) are read back from the end, a window at a time, for the last one;
and the group must commit past it. Each wait takes up to ``settle_s`` (writes in flight are accepted
in a moment), the accept wait of a held-back topic from the moment its records became readable. A
topic that does not get there is listed (:class:`~shoal_app.cli.models.UnacceptedIngest`,
with ``held_back_from`` when a transaction still held its records back), and ``ok`` is false:
acknowledged writes that no replica holds yet; verify again once its leader runs, or once the open
transaction ends (an orphaned one is aborted at its ``transaction.timeout.ms``). One that cannot be
read is listed with the error: an unchecked topic does not pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from shoal.errors import KafkaOperationError
from shoal.kafka.settings import KafkaSettings
from shoal_app.cli.models import UnacceptedIngest

WINDOW = 256
"""How far back from the end a check reads first for the last record (then 16 times as far, and so on)."""


@dataclass(frozen=True)
class IngestTopic:
    """An ingest topic to check, its partition and the leader group that accepts from it."""

    partition_id: str
    topic: str
    group: str


@dataclass
class IngestReader:
    """What the check reads (Kafka by default, :func:`kafka_reader`; tests pass their own)."""

    stable_end: Callable[[str], int]
    """The topic's last stable offset."""
    committed: Callable[[str, str], int | None]
    """(group, topic) -> the group's committed offset, None when it has none."""
    last_record: Callable[[str, int, int], int | None]
    """(topic, start, end) -> the offset of the last committed record in [start, end), or None."""
    high_water: Callable[[str], int] | None = None
    """The topic's high watermark (None: the last stable offset stands for it)."""
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def unaccepted(
    targets: Iterable[IngestTopic], reader: IngestReader, *, settle_s: float = 15.0, poll_s: float = 0.5
) -> list[UnacceptedIngest]:
    """The ingest topics of ``targets`` holding an acknowledged record their leader group has not
    committed past within ``settle_s`` (module docstring), or that could not be read."""
    held: dict[str, tuple[IngestTopic, int, int]] = {}
    """topic -> (target, its last stable offset, the high watermark it must reach)"""
    waiting: dict[str, tuple[IngestTopic, int | None, int]] = {}
    out: list[UnacceptedIngest] = []
    for t in targets:
        try:
            high = reader.high_water(t.topic) if reader.high_water is not None else None
            end = reader.stable_end(t.topic)
            if high is not None and end < high:
                held[t.topic] = (t, end, high)
            else:
                _judge(reader, t, end, waiting)
        except KafkaOperationError as exc:
            out.append(_error(t, exc))
    deadline = reader.clock() + settle_s
    last_look = deadline
    """When the accept wait ends: a topic judged once its transaction ended gets ``settle_s`` from then
    (its leader could not read the records before), so a late end does not read as a stuck leader
    (each topic extends it once at most)."""
    while held or waiting:
        for topic, (t, _end, high) in list(held.items()):
            try:
                end = reader.stable_end(topic)
                if end >= high:
                    _judge(reader, t, high, waiting)
                    del held[topic]  # only once judged: a read that failed leaves it held
                    if topic in waiting:
                        last_look = max(last_look, reader.clock() + settle_s)
                else:
                    held[topic] = (t, end, high)
            except KafkaOperationError:
                continue  # asked again until the deadline: judged on the last answer
        for topic, (t, _before, last) in list(waiting.items()):
            try:
                now = reader.committed(t.group, topic)
            except KafkaOperationError:
                continue
            if now is not None and now > last:
                del waiting[topic]
            else:
                waiting[topic] = (t, now, last)
        at = reader.clock()
        if not (held or waiting) or (at >= deadline and (not waiting or at >= last_look)):
            break
        reader.sleep(poll_s)
    for topic, (t, end, high) in held.items():
        try:
            accepted = reader.committed(t.group, topic)
        except KafkaOperationError:
            accepted = None
        out.append(
            UnacceptedIngest(
                partition_id=t.partition_id, topic=topic, accepted_to=accepted, held_back_from=end, high_water=high
            )
        )
    out += [
        UnacceptedIngest(partition_id=t.partition_id, topic=t.topic, accepted_to=accepted, last_unaccepted=last)
        for t, accepted, last in waiting.values()
    ]
    return sorted(out, key=lambda u: u.topic)


def _judge(
    reader: IngestReader, t: IngestTopic, end: int, waiting: dict[str, tuple[IngestTopic, int | None, int]]
) -> None:
    """Add ``t`` to ``waiting`` when a committed record below ``end`` (readable by its leader) is above
    its group's committed offset (KafkaOperationError when it cannot be read)."""
    accepted = reader.committed(t.group, t.topic)
    start = 0 if accepted is None else accepted
    if start >= end:
        return
    last = _last_record(reader, t.topic, start, end)
    if last is not None:
        waiting[t.topic] = (t, accepted, last)


def _last_record(reader: IngestReader, topic: str, start: int, end: int) -> int | None:
    """The last committed record in [start, end), read back from the end :data:`WINDOW` offsets at a
    time, the window growing 16-fold while it holds none (aborted records and markers only: a
    fenced transaction's records are no write, and the leader's offset stays below them)."""
    size, upper = WINDOW, end
    while upper > start:
        lower = max(start, upper - size)
        last = reader.last_record(topic, lower, upper)
        if last is not None:
            return last
        upper, size = lower, size * 16
    return None


def _error(t: IngestTopic, exc: KafkaOperationError) -> UnacceptedIngest:
    return UnacceptedIngest(partition_id=t.partition_id, topic=t.topic, error=f"{type(exc).__name__}: {exc}")


def kafka_reader(kafka: KafkaSettings, admin: Any) -> IngestReader:
    """:class:`IngestReader` over Kafka: last stable offsets and committed offsets through ``admin``
    (made by :func:`shoal.kafka.clients.admin`), records with a ``read_committed`` consumer."""
    from shoal.kafka.indexes import committed_offsets, high_watermarks, stable_ends
    from shoal.kafka.readers import read_to_end

    def stable_end(topic: str) -> int:
        ends = stable_ends(admin, [(topic, 0)], timeout_s=15)
        if (topic, 0) not in ends:
            raise KafkaOperationError(f"{topic}: no last stable offset")
        return ends[(topic, 0)]

    def high_water(topic: str) -> int:
        ends = high_watermarks(admin, [(topic, 0)], timeout_s=15)
        if (topic, 0) not in ends:
            raise KafkaOperationError(f"{topic}: no high watermark")
        return ends[(topic, 0)]

    def committed(group: str, topic: str) -> int | None:
        # not ``stable``: a leader group has a transaction pending most of the time under load
        return (
            committed_offsets(admin, {group: [(topic, 0)]}, timeout_s=15, stable=False).get(group, {}).get((topic, 0))
        )

    def last_record(topic: str, start: int, end: int) -> int | None:
        last = None
        for msg in read_to_end(kafka, topic, start, what="ingest topic", group_id="shoal-verify", timeout_s=15):
            offset = int(msg.offset() or 0)
            if offset >= end:
                break
            last = offset
        return last

    return IngestReader(stable_end, committed, last_record, high_water=high_water)
