"""`shoal write` refuses undecodable input with one line naming the line, exit code 2, nothing sent."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from shoal_app.cli.main import cli

UNREACHABLE = ["--bootstrap-servers", "127.0.0.1:1", "--zk", "127.0.0.1:1"]


@pytest.mark.parametrize(
    ("stdin", "expected"),
    [
        (b'{"k": 1}\n{"k": 2, "v": "\xff\xfe"}\n', "line 2: not valid UTF-8 (byte 0xff at byte 16)"),
        (b"\xc3\x28\n", "line 1: not valid UTF-8 (byte 0xc3 at byte 1)"),
        (b'{"k": 1}\n\n{"k": 3, "v": "\\ud800"}\n', "line 3: not valid Unicode text"),
        (b'{"k": 1, "x": 1e400}\n', "line 1: the number 1e400 is beyond a float64's range"),
    ],
)
def test_undecodable_input_is_one_line_and_exit_2(stdin: bytes, expected: str) -> None:
    result = CliRunner().invoke(cli, ["write", "events", "-", *UNREACHABLE], input=stdin)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "nothing was sent" in lines[0]
    assert "Traceback" not in result.output
