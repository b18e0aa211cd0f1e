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


def test_scan_json_values_are_read_back_unchanged_by_write() -> None:
    """``shoal scan -o json`` prints what ``shoal write`` stores unchanged: timestamps in ISO 8601 with
    milliseconds (``str()`` gave a form the write refused), binary as its UTF-8 text, and binary that
    is not UTF-8 as ``{"base64": ...}``, which the write refuses instead of storing the text ``b'..'``."""
    import datetime as dt
    import json

    from metadata.table import Column, ColumnType, TableDefinition
    from producer.errors import RowValidationError
    from producer.validation import validate_rows
    from shoal_app.cli.node import _json_value

    table = TableDefinition(
        "t",
        (Column("k", ColumnType.UINT64, False), Column("at", ColumnType.TIMESTAMP_MS), Column("b", ColumnType.BINARY)),
        ("k",),
        "k",
        1,
    )
    stored = [
        {"k": 1, "at": dt.datetime(1, 1, 1, tzinfo=dt.UTC), "b": b"text"},
        {"k": 2, "at": dt.datetime(1969, 12, 31, 23, 59, 59, 998000, tzinfo=dt.UTC), "b": b""},
        {"k": 3, "at": dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC), "b": None},
    ]
    lines = [json.dumps({k: _json_value(v) for k, v in row.items()}) for row in stored]
    assert validate_rows(table, [json.loads(line) for line in lines]).to_pylist() == stored
    printed = json.loads(json.dumps({"k": 4, "b": _json_value(b"\xff\x00")}))
    assert printed["b"] == {"base64": "/wA="}
    with pytest.raises(RowValidationError):
        validate_rows(table, [printed])
