"""DESIGN.md section 1: dependencies point one way and no package has an import cycle.

The contracts live in ``pyproject.toml`` (``[tool.importlinter]``) and ``make lint`` runs them;
this test runs the same contracts so that a plain ``pytest`` catches a wrong-way import too.
"""

from __future__ import annotations

import os
from pathlib import Path

from importlinter import cli

ROOT = Path(__file__).resolve().parents[3]


def test_import_contracts_are_kept() -> None:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        assert cli.lint_imports(no_cache=True) == cli.EXIT_STATUS_SUCCESS
    finally:
        os.chdir(cwd)


def test_the_contracts_cover_every_top_level_package() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    packages = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").exists() and p.name not in {"bench"})
    for package in packages:
        assert f'"{package}"' in text.split("[tool.importlinter]")[1], package
