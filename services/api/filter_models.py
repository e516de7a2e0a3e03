"""The filter expression as the API takes it: a JSON object in a body's `filter`,
or the same JSON as `GET /v1/memories`'s `filter` query parameter, read by
`shared.memory.filters` (the grammar) and declared in the OpenAPI document as the
component `Filter`, whose schema is below.

The schema bounds how deep filters nest (one component per level, MAX_NESTING of
them); what it cannot say is checked when read and answered as a 422 naming the
part: how many conditions a filter holds (MAX_CONDITIONS).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, WithJsonSchema

from services.api.errors import ApiError
from shared.memory import filters
from shared.memory.metadata import KEY_PATTERN, MAX_DEPTH

_TEXT = {"type": "string", "maxLength": filters.MAX_TEXT, "pattern": "^[^\\u0000]*$"}
_TIME = {"type": "string", "format": "date-time"}
_SCALAR = {"anyOf": [_TEXT, {"type": "number"}, {"type": "boolean"}, {"type": "null"}]}


def _condition(kind: str, value: dict[str, Any]) -> dict[str, Any]:
    """A field's condition: a value (equal to it) or an object of operators."""
    operators: dict[str, Any] = {}
    for op in filters.OPERATORS[kind]:
        if op == "exists":
            operators[op] = {"type": "boolean"}
        elif op == "in":
            operators[op] = {"type": "array", "minItems": 1, "maxItems": filters.MAX_IN}
            operators[op]["items"] = value
        else:
            operators[op] = value
    spelled = {
        "type": "object",
        "minProperties": 1,
        "properties": operators,
        "additionalProperties": False,
    }
    return {"anyOf": [value, spelled]}


def _ref(level: int) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{_name(level)}"}


def _name(level: int) -> str:
    return "Filter" if level == 1 else f"FilterLevel{level}"


def _level(level: int) -> dict[str, Any]:
    """The filter at `level` (the top one is 1): one that nests (and, or, not) names
    the next level's schema, and the deepest nests none, so the document bounds the
    depth exactly without a recursive schema."""
    nesting: dict[str, Any] = {}
    if level < filters.MAX_NESTING:
        inner = _ref(level + 1)
        listed = {"type": "array", "minItems": 1, "maxItems": filters.MAX_ITEMS, "items": inner}
        nesting = {"and": listed, "or": listed, "not": inner}
    return {
        "title": _name(level),
        "type": "object",
        "minProperties": 1,
        "properties": {
            **nesting,
            **{name: _condition("text", _TEXT) for name in filters.TEXT_FIELDS},
            **{name: _condition("time", _TIME) for name in filters.TIME_FIELDS},
        },
        "patternProperties": {
            f"^metadata(\\.{_KEY}){{1,{MAX_DEPTH}}}$": _condition("metadata", _SCALAR)
        },
        "additionalProperties": False,
    }


_KEY = KEY_PATTERN.strip("^$")
SCHEMAS: dict[str, dict[str, Any]] = {
    _name(level): _level(level) for level in range(1, filters.MAX_NESTING + 1)
}
SCHEMAS["Filter"] |= {
    "description": "Every key must hold: `and`/`or` a list of filters, `not` a filter, "
    "or a field with its condition (a value it equals, or operators: eq, ne, in, gt, gte, "
    f"lt, lte, exists). At most {filters.MAX_NESTING} filters deep and "
    f"{filters.MAX_CONDITIONS} conditions (docs/api.md, Filters).",
    "examples": [{"and": [{"kind": {"in": ["fact", "rule"]}}, {"metadata.team": "infra"}]}],
}
REF = _ref(1)


def _checked(value: dict[str, Any]) -> dict[str, Any]:
    filters.parse(value)  # FilterError is a ValueError naming the part
    return value


FilterJson = Annotated[dict[str, Any], AfterValidator(_checked), WithJsonSchema(REF)]


def read(value: dict[str, Any] | None) -> filters.Node | None:
    """A body's checked `filter` as the tree the queries take."""
    return None if value is None else filters.parse(value)


def read_query(text: str | None) -> filters.Node | None:
    """The `filter` query parameter (JSON) as the tree, or a 422 naming the part."""
    if text is None:
        return None
    try:
        return filters.parse_json(text)
    except filters.FilterError as exc:
        field, problem = exc.under("filter")
        raise ApiError(422, "invalid_request", f"{field}: {problem}", field=field) from None


def declare_query(document: dict[str, Any]) -> None:
    """`GET /v1/memories`'s `filter` is JSON text: declared as such (a parameter's
    `content`), with the `Filter` schema."""
    operation = document.get("paths", {}).get("/v1/memories", {}).get("get", {})
    for parameter in operation.get("parameters", []):
        if parameter["name"] == "filter":
            parameter.pop("schema", None)
            parameter["content"] = {"application/json": {"schema": REF}}
