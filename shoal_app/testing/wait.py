"""Polling helper for tests that wait on real servers."""

from __future__ import annotations

from collections.abc import Callable

from shoal.worker import poll_until


def wait_until(pred: Callable[[], bool], timeout: float = 30.0, interval: float = 0.05) -> bool:
    """Poll ``pred`` until it is true or ``timeout`` passes; return its last answer."""
    return poll_until(pred, timeout, interval)
