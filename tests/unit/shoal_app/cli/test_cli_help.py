"""Every command and group answers --help, and errors are one clear line."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from shoal_app.cli.main import cli


def _all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out += _all_commands(cmd, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


@pytest.mark.parametrize("path", _all_commands(cli), ids=lambda p: " ".join(p) or "shoal")
def test_help_everywhere(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_status_without_cluster_file_is_a_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "status"])
    assert result.exit_code == 2
    assert "no cluster file" in result.output and "shoal up" in result.output
