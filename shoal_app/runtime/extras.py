"""Optional dependencies (pip extras): ``shoal[spark]`` brings PySpark, ``shoal[docker]`` testcontainers.

Only ``spark_jobs`` and the docker test backend import them, and never at import time of anything
else: a command that needs a missing extra says so in one line (a :class:`MissingExtraError`, which
the CLI prints without a traceback and exits 2 on).
"""

from __future__ import annotations

import importlib

from shoal.errors import ShoalError

EXTRAS: dict[str, tuple[str, str]] = {
    "spark": ("Spark", "pyspark"),
    "docker": ("Docker", "testcontainers"),
}
"""extra -> (its name in messages, the module that tells whether it is installed)."""


class MissingExtraError(ShoalError):
    """``command`` needs the pip extra ``extra``, whose ``module`` cannot be imported."""

    def __init__(self, command: str, extra: str, module: str) -> None:
        self.command = command
        self.extra = extra
        self.module = module
        super().__init__(f"{command} needs the {EXTRAS[extra][0]} extra: pip install 'shoal[{extra}]'")


def has_extra(extra: str) -> bool:
    """Whether the module of ``extra`` imports."""
    try:
        importlib.import_module(EXTRAS[extra][1])
    except ImportError:
        return False
    return True


def require_extra(extra: str, command: str) -> None:
    """Raise :class:`MissingExtraError` unless the extra ``extra`` is installed (``command`` names the user's)."""
    if not has_extra(extra):
        raise MissingExtraError(command, extra, EXTRAS[extra][1])
