"""MonitorConfig validation: each bad value is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.config import MonitorConfig
from shoal.errors import ConfigError


def test_defaults_and_derived_values(tmp_path: Path) -> None:
    c = MonitorConfig("h:1", history_dir=str(tmp_path))  # type: ignore[arg-type]
    assert c.window_s == 300 and c.warn_after == 15 and c.history_dir == tmp_path
    assert MonitorConfig("h:1", window_samples=3).warn_after == 2
    assert MonitorConfig("h:1", window_samples=8, warn_samples=8).warn_after == 8


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"kafka": " "}, "bootstrap_servers"),
        ({"interval_s": 0}, "interval_s"),
        ({"window_samples": 1}, "window_samples"),
        ({"window_samples": True}, "window_samples"),
        ({"warn_samples": 31}, "warn_samples"),
        ({"recent_segments": -1}, "recent_segments"),
        ({"fetch_timeout_s": 0}, "fetch_timeout_s"),
        ({"topic_prefix": "a..b"}, "topic prefix"),
    ],
)
def test_bad_values_are_named(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"kafka": "h:1", **kwargs}
    with pytest.raises(ConfigError, match=field):
        MonitorConfig(**args)  # type: ignore[arg-type]
