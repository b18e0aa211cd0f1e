"""How the full demo talks while it runs: numbered step headers and progress lines.

Progress goes to stderr (so ``--output json`` leaves stdout to the one summary object); the
summary at the end is printed by ``shoal demo`` (:mod:`shoal_app.cli.demo`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from shoal_app.demo.observe import Lag

Echo = Callable[[str], None]


def fmt_count(value: int | None) -> str:
    """A count for people: thousands separated, n/a when unknown."""
    return "n/a" if value is None else f"{value:,}"


class Console:
    def __init__(self, echo: Echo, steps: int) -> None:
        self.echo = echo
        self.steps = steps
        self.started = time.monotonic()
        self._step = 0

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def step(self, title: str) -> None:
        self._step += 1
        self.echo(f"[{self._step}/{self.steps}] {title}")

    def info(self, text: str) -> None:
        self.echo(f"      {text}")

    def warn(self, text: str) -> None:
        self.echo(f"      !! {text}")

    def progress(
        self, generated: int, acked: int, in_shoal: int | None, per_node: dict[str, int | None], lag: Lag | None
    ) -> None:
        """Two lines: rows (generated, in shoal, held per node), then lag and what each replica has not acked."""
        nodes = ", ".join(f"{s} {fmt_count(v)}" for s, v in per_node.items()) or "n/a"
        self.echo(
            f"      [{self.elapsed():5.0f}s] generated {generated:,} (acked by Kafka {acked:,}) | rows in shoal "
            f"{fmt_count(in_shoal)} | rows held per node: {nodes}"
        )
        if lag is None:
            self.echo("              lag: n/a (the monitor has no snapshot yet)")
            return
        servers = sorted(set(lag.wal_lag_records) | set(lag.unacked_segments))
        behind = ", ".join(
            f"{s} {lag.wal_lag_records.get(s, 0):,} WAL records / {lag.unacked_segments.get(s, 0)} segments"
            for s in servers
        )
        self.echo(
            f"              lag: spark ingest {fmt_count(lag.spark_lag_records)} records, leaders' ingest "
            f"{lag.ingest_lag_records:,} | not yet acked: {behind or 'nothing'} | monitor status {lag.status}"
        )
