"""``python -m chaos`` (with ``tests/faults`` on ``PYTHONPATH``; ``make chaos``): long chaos runs.

Each run starts its own local cluster in a temporary directory (or ``--data-dir``/run-N), runs the
seed's schedule for ``--duration`` seconds of faults, heals, waits for convergence and checks.
``--runs N`` runs seeds S, S+1, ... The seed and schedule go to stderr; ``--output json`` prints a
:class:`~chaos.models.ChaosReport` on stdout. Exit code 0 when every run passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import tempfile
import time
from pathlib import Path

from chaos.models import ChaosCounts, ChaosReport, FaultKind
from chaos.runner import run_once, stderr_log
from chaos.schedule import ALL_KINDS

MEAN_FAULT_S = 15.0
"""A fault's gap, hold and restart take about this long: ``--duration`` / this = the faults planned."""


def _kinds(text: str) -> list[FaultKind]:
    return list(ALL_KINDS) if text == "all" else [FaultKind(k.strip()) for k in text.split(",") if k.strip()]


def _positive(text: str) -> int:
    """A count of at least 1: zero runs or zero faults would pass without testing anything."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: from the clock, printed)")
    parser.add_argument("--runs", type=_positive, default=1)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of faults per run")
    parser.add_argument("--faults", type=_positive, default=None, help="faults planned per run (default: duration/15)")
    parser.add_argument("--kinds", default="all", help=f"comma-separated, of: {', '.join(k.value for k in ALL_KINDS)}")
    parser.add_argument("--converge-timeout", type=float, default=300.0)
    parser.add_argument("--data-dir", type=Path, default=None, help="keep the clusters (and node logs) here")
    parser.add_argument("--prefix", default="chaos")
    parser.add_argument("--output", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    faulthandler.enable(all_threads=True)  # a crash inside a native client prints every thread's stack
    seed = args.seed if args.seed is not None else time.time_ns() % 1_000_000
    faults = args.faults if args.faults is not None else max(1, int(args.duration / MEAN_FAULT_S))
    kinds = _kinds(args.kinds)
    runs = []
    with tempfile.TemporaryDirectory(prefix="shoal-chaos-") as tmp:
        base = args.data_dir or Path(tmp)
        for n in range(args.runs):
            runs.append(
                run_once(
                    seed + n,
                    faults=faults,
                    kinds=kinds,
                    data_dir=base / f"run-{seed + n}",
                    prefix=args.prefix,
                    duration_s=args.duration,
                    converge_timeout_s=args.converge_timeout,
                )
            )
    counts = ChaosCounts()
    for r in runs:
        counts = counts.add(r.result.counts)
    report = ChaosReport(ok=bool(runs) and all(r.ok for r in runs), counts=counts, runs=runs)
    if args.output == "json":
        print(json.dumps(report.to_json(), indent=2))
    else:
        for r in runs:
            print(f"seed {r.seed}: {'OK' if r.ok else 'FAILED'} ({len(r.events)} faults, {r.wall_s:.0f} s)")
            for v in r.result.key_violations + r.result.gtid_violations:
                print(f"  {v.to_json()}")
            for e in r.errors:
                print(f"  error: {e}")
        print(f"total: {counts.to_json()}")
        stderr_log("done")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
