"""The base of every JSON shape shoal writes or prints: a pydantic model with a JSON Schema.

A shape refuses unknown keys (a new field is added to its model, and so to its schema under
``docs/schemas/``, first) and turns into JSON with :meth:`Shape.to_json`. A field that the JSON
leaves out when it has no value (rather than writing ``null``) is declared with :func:`omitted`.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

T = TypeVar("T")


class Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def to_json(self) -> dict[str, Any]:
        """The JSON object (enums as their values, tuples as lists)."""
        return self.model_dump(mode="json")


class ShapeRoot(RootModel[T], Generic[T]):
    """A shape whose JSON is not an object (a list, or a map of shapes)."""

    def to_json(self) -> Any:
        return self.model_dump(mode="json")


def validation_summary(exc: ValidationError, limit: int = 5) -> str:
    """A pydantic ValidationError on one line: ``field.path: message`` for each error (the first
    ``limit``), without pydantic's documentation links or the input values it echoes."""
    parts = [f"{'.'.join(str(p) for p in e['loc']) or '(document)'}: {e['msg']}" for e in exc.errors(include_url=False)]
    more = f" (and {len(parts) - limit} more)" if len(parts) > limit else ""
    return "; ".join(parts[:limit]) + more


def _is_none(value: object) -> bool:
    return value is None


def omitted() -> Any:
    """A field that is absent from the JSON while it is None (and optional in the schema)."""
    return Field(default=None, exclude_if=_is_none)
