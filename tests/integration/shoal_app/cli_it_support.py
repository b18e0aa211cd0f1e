"""The CLI run in-process against a local cluster's data dir (for the slow shoal_app tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from shoal_app.cli.main import cli
from shoal_app.schemas import validate


def run(data: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> Result:
    """``shoal --data-dir DATA ARGS`` (output captured, never raises)."""
    return CliRunner().invoke(cli, ["--data-dir", str(data), *args], env=env or {}, input=stdin)


def checked(schema: str, result: Result) -> Any:
    """The JSON a command printed, checked against its committed schema (docs/schemas/)."""
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    validate(schema, document)
    return document


def create_table(data: Path, servers: list[str], replication_factor: int, env: dict[str, str] | None = None) -> None:
    """Table ``ev`` (k uint64 primary and partition key, v string), one partition on ``servers``."""
    placement = [arg for server in servers for arg in ("--server", server)]
    created = run(
        data,
        *("table", "create", "ev", "--column", "k:uint64:not_null", "--column", "v:string"),
        *("--primary-key", "k", "--partition-key", "k", "--replication-factor", str(replication_factor)),
        *placement,
        env=env,
    )
    assert created.exit_code == 0, created.output


def rows(first: int, n: int) -> str:
    """JSON lines of rows ``first`` .. ``first + n - 1`` of table ``ev``."""
    return "".join(json.dumps({"k": k, "v": f"v{k}"}) + "\n" for k in range(first, first + n))
