"""The JSON Schemas of every JSON document shoal writes or prints, generated from their models.

``python -m shoal_app.schemas --write`` regenerates ``docs/schemas/<name>.json``; ``--check``
exits 1 when a committed schema differs from its model (the unit tests check the same), and
:func:`validate` checks a real document against a committed schema.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from monitor import models as monitor_models
from shoal import cluster_file
from shoal_app.cli import models as cli

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "docs" / "schemas"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _model(model: type[BaseModel]) -> Callable[[], dict[str, Any]]:
    return model.model_json_schema


SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "cluster-file": cluster_file.json_schema,
    **{name: _model(m) for name, m in monitor_models.SCHEMAS.items()},
    "cli-status": _model(cli.ClusterStatus),
    "cli-stopped": _model(cli.Stopped),
    "cli-started": _model(cli.Started),
    "cli-admin-fix-replication": _model(cli.ReplicationFix),
    "cli-jars": _model(cli.Jars),
    "cli-table-describe": _model(cli.TableDescription),
    "cli-acl-plan": _model(cli.AclPlan),
    "cli-table-list": _model(cli.TableList),
    "cli-table-history": _model(cli.TableHistory),
    "cli-table-rebalance": _model(cli.TableRebalance),
    "cli-table-split": _model(cli.SplitResult),
    "cli-table-replica-change": _model(cli.ReplicaChange),
    "cli-node-drain": _model(cli.DrainResult),
    "cli-write": _model(cli.WriteResult),
    "cli-verify": _model(cli.Verification),
    "cli-spark-ingest": _model(cli.IngestSummary),
    "cli-spark-compact": _model(cli.Compactions),
    "cli-demo-roundtrip": _model(cli.Roundtrip),
    "cli-demo": _model(cli.DemoSummary),
}
"""Schema name -> its generator. ``shoal up`` prints a ``cluster-file``, ``shoal offsets`` a
``monitor-snapshot``, ``shoal down`` and ``shoal demo --stop`` a ``cli-stopped``."""


def schema(name: str) -> dict[str, Any]:
    """The schema ``name`` as committed: with its dialect and id."""
    return {"$schema": DIALECT, "$id": f"{name}.json", **SCHEMAS[name]()}


def render(name: str) -> str:
    return json.dumps(schema(name), indent=2, sort_keys=True) + "\n"


def stale(directory: Path = SCHEMA_DIR) -> list[str]:
    """Names whose committed file is missing or differs from the model, and files of no model."""
    out = [n for n in SCHEMAS if not (directory / f"{n}.json").is_file()]
    out += [n for n in SCHEMAS if n not in out and (directory / f"{n}.json").read_text(encoding="utf-8") != render(n)]
    out += [p.stem for p in directory.glob("*.json") if p.stem not in SCHEMAS]
    return out


def write(directory: Path = SCHEMA_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    for p in directory.glob("*.json"):
        if p.stem not in SCHEMAS:
            p.unlink()
    paths = []
    for name in SCHEMAS:
        path = directory / f"{name}.json"
        path.write_text(render(name), encoding="utf-8")
        paths.append(path)
    return paths


def validate(name: str, document: Any, directory: Path = SCHEMA_DIR) -> None:
    """Check ``document`` against the committed schema ``name`` (for tests; needs the dev extra).

    Raises ``jsonschema.ValidationError`` naming the first field that does not match."""
    import jsonschema

    committed = json.loads((directory / f"{name}.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(committed).validate(document)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shoal_app.schemas", description=__doc__)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="regenerate docs/schemas/*.json")
    action.add_argument("--check", action="store_true", help="exit 1 if a committed schema is stale")
    parser.add_argument("--dir", type=Path, default=SCHEMA_DIR, help="the schema directory")
    args = parser.parse_args(argv)
    if args.write:
        for path in write(args.dir):
            print(path)
        return 0
    if not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: no such directory")
    bad = stale(args.dir)
    for name in bad:
        print(f"stale: {name} (run python -m shoal_app.schemas --write)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
