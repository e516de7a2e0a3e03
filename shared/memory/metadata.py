"""A memory's metadata: the caller's own JSON object, bounded so that a row stays
small and a filter's key path short.

The bounds: at most MAX_BYTES of compact JSON, objects nested at most MAX_DEPTH
deep (the top object is depth 1; an array counts as a level), keys of KEY_PATTERN
(a filter names them joined by dots), and every number finite. The API, the
import and the extraction config check them with `checked`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from shared.identifiers import encoding_problem

MAX_BYTES = 4096
MAX_DEPTH = 4
KEY_PATTERN = "^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
_KEY = re.compile(KEY_PATTERN)

_SCALARS: list[dict[str, Any]] = [
    {"type": "string", "pattern": "^[^\\u0000]*$"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "null"},
]


def _level(depth: int) -> dict[str, Any]:
    """The JSON Schema of a value at `depth` (the top object is depth 1)."""
    if depth > MAX_DEPTH:
        return {"anyOf": _SCALARS}
    inner = _level(depth + 1)
    nested: list[dict[str, Any]] = [
        {
            "type": "object",
            "propertyNames": {"pattern": KEY_PATTERN},
            "additionalProperties": inner,
        },
        {"type": "array", "items": inner},
    ]
    return {"anyOf": [*_SCALARS, *nested]}


# What the OpenAPI document says of it: all but the size, which is counted in
# bytes of compact JSON (a documented refusal: no schema can count it).
SCHEMA: dict[str, Any] = {
    "type": "object",
    "propertyNames": {"pattern": KEY_PATTERN},
    "additionalProperties": _level(2),
    "description": f"The caller's own JSON object: at most {MAX_BYTES} bytes as compact "
    f"JSON, objects and arrays nested at most {MAX_DEPTH} deep, keys matching {KEY_PATTERN}.",
}


def checked(value: Any) -> dict[str, Any]:
    """`value` if it is metadata within the bounds, else ValueError naming the part."""
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object")
    _walk(value, "", 1)
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_BYTES:
        raise ValueError(f"is {size} bytes, over the limit of {MAX_BYTES} (as compact JSON)")
    return value


def _walk(value: Any, path: str, depth: int) -> None:
    """Check `value`, found at `path` (dotted keys, `[i]` for an array's items)."""
    where = f"{path}: " if path else ""  # the API names the field before it
    if isinstance(value, dict | list) and depth > MAX_DEPTH:
        raise ValueError(f"{where}nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or not _KEY.match(key):
                raise ValueError(f"{where}key {key!r} does not match {KEY_PATTERN}")
            _walk(item, f"{path}.{key}" if path else key, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _walk(item, f"{path}[{index}]", depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}numbers must be finite")
    elif isinstance(value, str) and "\x00" in value:
        raise ValueError(f"{where}must not contain NUL characters")
    elif isinstance(value, str) and (problem := encoding_problem(value)):
        raise ValueError(f"{where}{problem}")  # a lone surrogate: no store takes it
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise ValueError(f"{where}not a JSON value")
