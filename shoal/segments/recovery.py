"""Make the segment files agree with the segment list after a crash.

DESIGN.md section 4.4 and the LinDB recovery it cites: reload the segment list, then make the
directory match it. Writers keep this order (segment_list.py): a file is durable before its entry
is committed, and an entry is removed before its file is unlinked. So after any crash:

* temp files (an interrupted write) are garbage;
* a file without an entry (crash after the rename, or after removing the entry) is garbage;
* an entry without a file cannot happen, short of losing the disk; it is reported, not repaired
  (the replica must re-fetch the segment from the segments channel).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shoal.segments.atomic import remove_temp_files
from shoal.segments.chain import SegmentChain
from shoal.segments.parquet_io import delete_segment_file, list_segment_files


@dataclass(frozen=True, slots=True)
class Reconciliation:
    removed_temp_files: tuple[Path, ...]
    orphan_files: tuple[str, ...]
    """Segment files without an entry (deleted if ``delete_orphans``)."""
    missing_files: tuple[str, ...]
    """Entries without a file: the list is ahead of the disk; re-fetch these segments."""

    @property
    def consistent(self) -> bool:
        return not self.missing_files


def reconcile(chain: SegmentChain, directory: Path, *, delete_orphans: bool = True) -> Reconciliation:
    """Remove temp files and (optionally) orphan segment files; report entries whose file is missing."""
    temps = tuple(remove_temp_files(directory))
    files = list_segment_files(directory)
    orphans = tuple(sorted(files - set(chain.entries)))
    missing = tuple(sid for sid in chain.entries if sid not in files)
    if delete_orphans:
        for sid in orphans:
            delete_segment_file(directory, sid)
    return Reconciliation(temps, orphans, missing)
