"""Parameter types the CLI checks while parsing, before it connects anywhere.

- :class:`FiniteFloatRange`: a float option that refuses ``nan`` and the infinities.
  ``click.FloatRange`` compares, and NaN fails no comparison: ``--timeout nan`` would make a wait loop
  that never gives up (``Deadline(nan)`` never expires).
- :data:`TABLE_NAME`, :data:`SERVER_ID`: an id checked by :mod:`shoal.ids` at the edge, so a hostile
  name is refused at once instead of after a ZooKeeper connection (or its timeout).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import click

from shoal import ids
from shoal.errors import InvalidIdError


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan``, ``inf`` and ``-inf``."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        result = super().convert(value, param, ctx)
        if isinstance(result, float) and not math.isfinite(result):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return result


def timeout_option(default: float, help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--timeout SECONDS``: a finite number of seconds > 0."""
    return click.option(
        "--timeout", type=FiniteFloatRange(0, min_open=True), default=default, show_default=True, help=help
    )


class _IdType(click.ParamType):
    def __init__(self, name: str, check: Callable[[object], Any]) -> None:
        self.name = name
        self._check = check

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return self._check(value)
        except InvalidIdError as exc:
            self.fail(str(exc), param, ctx)


TABLE_NAME = _IdType("table", ids.validate_table_name)
SERVER_ID = _IdType("server", ids.validate_server_id)
