"""A leader in its own process, for kill -9 tests: ``python node_leader_proc.py BOOTSTRAP PREFIX PID DATA_DIR``.

Prints ``READY`` once it leads, then runs until killed. Flushes a segment every 7 rows.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from node_it_support import LeaderFixture


def main() -> None:
    bootstrap, prefix, partition_id, data_dir = sys.argv[1:5]
    f = LeaderFixture(bootstrap, prefix, Path(data_dir), max_rows=7)
    f.partition_id = partition_id
    leader = f.start(epoch=1)
    print("READY", flush=True)
    while not leader.stopped.is_set():
        time.sleep(0.1)
    sys.exit(1)


if __name__ == "__main__":
    main()
