"""``bench/`` is not an installed package (benchmarks are scripts run from the repository root): make it importable."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[3])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
