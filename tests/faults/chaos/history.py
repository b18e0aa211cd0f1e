"""What the writers did: every row write or delete (key, version) and whether it was acknowledged.

A value is ``"<key>:<version>"``: version 0 creates the key, each overwrite or delete takes the next
version (a delete is a version without a value: the key is absent while it is the newest). One
producer writes each key, in version order: the two versions of a key in one write are its rows in
that order, and a delete sent after a write follows it. An idempotent producer keeps order per
partition, so the versions of a key reach the ingest topic in version order. Hence the newest
version that landed must win: after convergence a replica holds the newest acknowledged version of
every key written with an acknowledgement, or a newer uncertain one (absent when that is a delete).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field


def encode_value(key: int, version: int) -> str:
    return f"{key}:{version}"


def decode_value(key: int, value: str | None) -> int | None:
    """The version in ``value`` if it is exactly a value written for ``key`` (:func:`encode_value`),
    else None: ``"7:01"`` or full-width digits are no value any writer wrote, though ``int()`` reads
    them as a version."""
    if value is None:
        return None
    head, sep, tail = value.partition(":")
    if not sep or head != str(key) or not tail.isascii() or not tail.isdigit():
        return None
    version = int(tail)
    return version if value == encode_value(key, version) else None


@dataclass
class KeyWrites:
    """The versions of one key: acknowledged, and uncertain (sent; delivery or acceptance unknown)."""

    acked: set[int] = field(default_factory=set)
    uncertain: set[int] = field(default_factory=set)
    sent: int = 0
    """How many versions were sent (the next version to write)."""
    deletes: set[int] = field(default_factory=set)
    """The versions that are deletes (acknowledged or uncertain)."""

    def allowed(self) -> set[int]:
        """Versions a converged replica may end at: the newest acknowledged one and newer uncertain
        ones, or any uncertain one when none was acknowledged."""
        if not self.acked:
            return set(self.uncertain)
        newest = max(self.acked)
        return {newest} | {v for v in self.uncertain if v > newest}

    def may_hold(self) -> set[int]:
        """The versions whose value a converged replica may hold (the allowed ones that are not deletes)."""
        return self.allowed() - self.deletes

    def may_be_absent(self) -> bool:
        """No version acknowledged, or an allowed version is a delete."""
        return not self.acked or bool(self.allowed() & self.deletes)

    def describe(self, versions: set[int], key: int) -> list[str]:
        return [f"{key}:{v}" + (" (deleted)" if v in self.deletes else "") for v in sorted(versions)]


class History:
    """Thread-safe record of every write (shared by the writer threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.keys: dict[int, KeyWrites] = {}

    def sent(self, key: int, *, delete: bool = False) -> int:
        """Record that the next version of ``key`` (a delete if ``delete``) is being sent as uncertain;
        returns that version."""
        with self._lock:
            writes = self.keys.setdefault(key, KeyWrites())
            version = writes.sent
            writes.sent += 1
            writes.uncertain.add(version)
            if delete:
                writes.deletes.add(version)
            return version

    def acknowledge(self, writes: Iterable[tuple[int, int]]) -> None:
        """(key, version) pairs whose delivery succeeded and that a later ``sync()`` covered."""
        with self._lock:
            for key, version in writes:
                entry = self.keys[key]
                entry.uncertain.discard(version)
                entry.acked.add(version)

    def snapshot(self) -> dict[int, KeyWrites]:
        with self._lock:
            return {k: KeyWrites(set(w.acked), set(w.uncertain), w.sent, set(w.deletes)) for k, w in self.keys.items()}
