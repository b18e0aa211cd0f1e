"""Durable, atomic creation of a file: temp file in the same directory, fsync, rename, fsync dir.

DESIGN.md section 4.3: a segment is fsynced before its entry is added to the segment list, so a
crash leaves either no file (and no entry) or a complete file. Readers never see a partial file
under its final name; a crash leaves at most a ``*.tmp`` file, removed by :func:`remove_temp_files`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

TEMP_SUFFIX = ".tmp"


class HashingWriter:
    """A write-only file object that hashes (sha256) and counts every byte it writes to ``raw``.

    Closing it does not close ``raw`` (the caller fsyncs and closes the real file).
    """

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._hash = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._hash.update(view)
        self._raw.write(view)
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._raw.flush()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def fsync_directory(directory: Path) -> None:
    """Make a rename or unlink in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(
    directory: Path,
    final_name: str,
    write: Callable[[HashingWriter], None],
    verify: Callable[[Path, HashingWriter], None] | None = None,
) -> tuple[Path, str, int]:
    """Create ``directory/final_name`` atomically with the bytes ``write`` produces.

    ``write`` gets a :class:`HashingWriter`; ``verify`` gets the fsynced temp file and the writer
    (digest, size) before the rename. Either may raise to abort: the temp file is removed and
    nothing appears. Returns (final path, sha256 hex, size in bytes). ``final_name`` must already
    be validated by the caller (it is never taken from the wire unchecked).
    """
    directory = Path(directory)
    final = directory / final_name
    tmp = directory / f".{final_name}.{os.getpid()}.{os.urandom(4).hex()}{TEMP_SUFFIX}"
    try:
        with open(tmp, "xb") as raw:
            writer = HashingWriter(raw)
            write(writer)
            raw.flush()
            os.fsync(raw.fileno())
        if verify is not None:
            verify(tmp, writer)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(directory)
    return final, writer.hexdigest(), writer.size


def remove_temp_files(directory: Path) -> list[Path]:
    """Delete temp files a crash left behind in ``directory``; return what was removed."""
    removed = []
    for p in Path(directory).glob(f".*{TEMP_SUFFIX}"):
        if p.is_file():
            p.unlink(missing_ok=True)
            removed.append(p)
    if removed:
        fsync_directory(Path(directory))
    return removed
