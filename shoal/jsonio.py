"""Reading JSON from outside (files, stdin, environment) without letting a traceback out.

``json.loads`` raises more than ``JSONDecodeError``: a document nested deeper than the interpreter's
recursion limit raises ``RecursionError``, an integer of more than 4300 digits raises a plain
``ValueError`` (``sys.int_max_str_digits``), and bytes that are not UTF-8 raise ``UnicodeDecodeError``.
:func:`loads_checked` turns all of them into one :class:`BadJson` that carries the reason, and each
caller re-raises it as its own error type (``ConfigError``, ``ClusterFileError``...).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shoal.errors import ShoalError


class BadJson(ShoalError, ValueError):
    """Text that is not a JSON document shoal can read; ``reason`` is one short line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def loads_checked(data: str | bytes, *, parse_float: Callable[[str], Any] | None = None) -> Any:
    """``json.loads(data)``, with every way it fails raised as :class:`BadJson`."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise BadJson(f"not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    try:
        return json.loads(text, parse_float=parse_float)
    except json.JSONDecodeError as exc:
        raise BadJson(f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise BadJson("not readable JSON: nested too deeply") from None
    except ValueError as exc:  # a number of more than sys.int_max_str_digits digits
        raise BadJson(f"not readable JSON: {str(exc)[:120]}") from None


def read_checked(path: Path) -> Any:
    """The JSON document in the file at ``path``: OSError as is, anything unreadable as BadJson."""
    return loads_checked(path.read_bytes())
