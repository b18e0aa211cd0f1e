"""What the writers did: every row write (key, version) and whether it was acknowledged.

A value is ``"<key>:<version>"``: version 0 creates the key, each overwrite takes the next version.
A writer overwrites a key only after the outcome of its previous write of that key is known, and one
producer writes each key, so the versions of a key reach the ingest topic in version order (an
idempotent producer keeps order per partition). Hence the newest version that landed must win:
after convergence a replica holds the newest acknowledged version of every key written with an
acknowledgement, or a newer uncertain one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field


def encode_value(key: int, version: int) -> str:
    return f"{key}:{version}"


def decode_value(key: int, value: str | None) -> int | None:
    """The version in ``value`` if it is a value written for ``key``, else None."""
    if value is None:
        return None
    head, sep, tail = value.partition(":")
    if not sep or head != str(key) or not tail.isdigit():
        return None
    return int(tail)


@dataclass
class KeyWrites:
    """The versions of one key: acknowledged, and uncertain (sent; delivery or acceptance unknown)."""

    acked: set[int] = field(default_factory=set)
    uncertain: set[int] = field(default_factory=set)
    sent: int = 0
    """How many versions were sent (the next version to write)."""

    def allowed(self) -> set[int]:
        """Versions a converged replica may hold (and it may lack the key when :meth:`may_be_absent`)."""
        if not self.acked:
            return set(self.uncertain)
        newest = max(self.acked)
        return {newest} | {v for v in self.uncertain if v > newest}

    def may_be_absent(self) -> bool:
        return not self.acked


class History:
    """Thread-safe record of every write (shared by the writer threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.keys: dict[int, KeyWrites] = {}

    def sent(self, key: int) -> int:
        """Record that the next version of ``key`` is being sent as uncertain; returns that version."""
        with self._lock:
            writes = self.keys.setdefault(key, KeyWrites())
            version = writes.sent
            writes.sent += 1
            writes.uncertain.add(version)
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
            return {k: KeyWrites(set(w.acked), set(w.uncertain), w.sent) for k, w in self.keys.items()}
