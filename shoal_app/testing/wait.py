"""Polling helper for tests that wait on real servers."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(pred: Callable[[], bool], timeout: float = 30.0, interval: float = 0.05) -> bool:
    """Poll ``pred`` until it is true or ``timeout`` passes; return its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()
