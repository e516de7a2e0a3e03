"""The Avro schemas in `schemas/events/`: the single source of truth for event fields.

The same files are attached to the Pub/Sub topics (JSON encoding), so Pub/Sub
refuses a bad publish, and validate here before publishing and on receipt.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import fastavro
from fastavro.validation import ValidationError


def schemas_dir() -> Path:
    """The `schemas/` folder: packaged inside a wheel, or the repository's own."""
    package = Path(__file__).resolve().parents[1]
    bundled = package / "_schemas"
    return bundled if bundled.is_dir() else package.parent / "schemas"


def schema_path(event_type: str) -> Path:
    return schemas_dir() / "events" / f"{event_type}.avsc"


@cache
def schema_definition(event_type: str) -> str:
    """The schema's JSON text exactly as stored in the repository."""
    return schema_path(event_type).read_text(encoding="utf-8")


@cache
def _schema_json(event_type: str) -> Any:
    return json.loads(schema_definition(event_type))


@cache
def _parsed(event_type: str) -> Any:
    return fastavro.parse_schema(_schema_json(event_type))


def schema_problem(event_type: str, record: Any) -> str | None:
    """Why `record` does not conform to the event's schema, or None if it does.

    Stricter than Avro on one point: a field the schema does not name is refused,
    so a typo in a producer is caught instead of silently dropped.
    """
    if not isinstance(record, dict):
        return "body is not a JSON object"
    try:
        fastavro.validation.validate(record, _parsed(event_type), raise_errors=True)
    except ValidationError as exc:
        return "schema: " + "; ".join(str(e) for e in exc.errors)
    extra = _field_checker(event_type)(record, "")
    if extra:
        return "schema: unknown field(s) " + ", ".join(extra)
    return None


@cache
def _field_checker(event_type: str) -> Callable[[Any, str], list[str]]:
    """A function listing the fields of a record that its schema does not name,
    built once per event type (this runs on every message)."""
    return _checker(_schema_json(event_type))


def _checker(schema: Any) -> Callable[[Any, str], list[str]]:
    if isinstance(schema, dict) and schema.get("type") == "record":
        fields = {f["name"]: _checker(f["type"]) for f in schema["fields"]}

        def record(value: Any, path: str) -> list[str]:
            if not isinstance(value, dict):
                return []
            found = [f"{path}{k}" for k in value if k not in fields]
            for name, check in fields.items():
                if name in value and check is not _nothing:
                    found += check(value[name], f"{path}{name}.")
            return found

        return record
    if isinstance(schema, dict) and schema.get("type") == "array":
        item = _checker(schema["items"])
        if item is _nothing:
            return _nothing

        def array(value: Any, path: str) -> list[str]:
            if not isinstance(value, list):
                return []
            found: list[str] = []
            for i, element in enumerate(value):
                found += item(element, f"{path.rstrip('.')}[{i}].")
            return found

        return array
    return _nothing


def _nothing(value: Any, path: str) -> list[str]:
    return []
