"""Compaction decisions: minor count, bytes, age; config validation."""

from __future__ import annotations

import pytest

from shoal.errors import ConfigError
from spark_jobs.compaction.policy import CompactionPolicy, MinorRun, decide, minor_run


def test_no_minor_means_no_compaction() -> None:
    assert decide(CompactionPolicy(min_minors=1), MinorRun(0, 0, None), 10**12) is None


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (MinorRun(3, 10, 1_000), "3 minors >= 3"),
        (MinorRun(1, 500, 1_000), "500 bytes of minors >= 500"),
        (MinorRun(1, 10, 1_000 - 60_000), "oldest minor is 60s old >= 60s"),
        (MinorRun(2, 499, 1_000 - 59_000), None),
    ],
)
def test_thresholds(run: MinorRun, expected: str | None) -> None:
    policy = CompactionPolicy(min_minors=3, min_bytes=500, max_age_s=60)
    assert decide(policy, run, 1_000) == expected


def test_minor_run_sums_and_takes_the_oldest() -> None:
    assert minor_run([(10, 5), (20, 3), (1, 9)]) == MinorRun(3, 31, 3)
    assert minor_run([]) == MinorRun(0, 0, None)


@pytest.mark.parametrize("kwargs", [{"min_minors": 0}, {"min_bytes": -1}, {"max_age_s": 0}, {"min_minors": True}])
def test_bad_policy_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        CompactionPolicy(**kwargs)  # type: ignore[arg-type]
