"""DESIGN.md section 1: dependencies point one way.

spark_jobs and producer use metadata and the core; storage_node uses metadata and the core; nothing
imports storage_node except its own entry point (``shoal node``) and tests. The core (``shoal``)
imports none of the component packages except in the CLI, the demo, the local runtime (which
starts nodes and waits for their registration) and the test fixtures: the entry points.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
COMPONENTS = ("metadata", "producer", "storage_node", "spark_jobs", "monitor")

# package -> top-level packages it must not import
FORBIDDEN = {
    "metadata": {"producer", "storage_node", "spark_jobs", "monitor"},
    "producer": {"storage_node", "spark_jobs", "monitor"},
    "spark_jobs": {"storage_node", "monitor"},
    "monitor": {"storage_node", "spark_jobs", "producer"},
    "storage_node": {"producer", "spark_jobs"},
}
ENTRY_POINTS = {ROOT / "shoal" / "cli" / "node.py"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_component_imports_point_one_way(package: str) -> None:
    bad = {
        str(p.relative_to(ROOT)): sorted(_imports(p) & FORBIDDEN[package])
        for p in _files(package)
        if _imports(p) & FORBIDDEN[package]
    }
    assert not bad, f"{package} must not import {sorted(FORBIDDEN[package])}: {bad}"


def test_only_the_node_entry_point_imports_storage_node_from_the_core() -> None:
    core = [p for p in _files("shoal") if p not in ENTRY_POINTS]
    bad = [str(p.relative_to(ROOT)) for p in core if "storage_node" in _imports(p)]
    assert not bad, f"only shoal/cli/node.py may import storage_node: {bad}"


def test_the_core_library_imports_no_component() -> None:
    library = [
        p
        for p in _files("shoal")
        if not any(part in {"cli", "demo", "testing", "runtime"} for part in p.relative_to(ROOT / "shoal").parts)
    ]
    bad = {
        str(p.relative_to(ROOT)): sorted(_imports(p) & set(COMPONENTS))
        for p in library
        if _imports(p) & set(COMPONENTS)
    }
    assert not bad, f"the core must not depend on the components: {bad}"
