"""Errors of the monitor (one subclass of :class:`~shoal.errors.ShoalError`)."""

from __future__ import annotations

from shoal.errors import ShoalError


class MonitorError(ShoalError):
    """Offset monitoring could not collect, persist or serve what it was asked for."""


class HistoryFileError(MonitorError):
    """The history file is unreadable or not a monitor history (names the file and why)."""
