"""A filter expression (`shared.memory.filters`) as a WHERE clause over memories
(alias `m`): its values and metadata key paths are bound parameters, so no text
of the caller's reaches the statement.

A metadata equality or `in` is a containment test (`m.metadata @> '{"team": "x"}'`)
and an existence test a JSON path one (`@? '$."team"'`), both of which the GIN
index `memories_metadata` (jsonb_path_ops) answers; a range compares the key's
value (`#>`) with the bound one when both are of one JSON type (a value of
another type, an array among them, matches nothing).
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from shared.memory.filters import All, Any_, Condition, Node, Not

_COMPARE = {"eq": "=", "ne": "<>", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def where(node: Node, params: dict[str, Any]) -> str:
    """The clause of `node`, its parameters added to `params` (named `f0`, `f1`...)."""
    if isinstance(node, All):
        return "(" + " AND ".join(where(part, params) for part in node.parts) + ")"
    if isinstance(node, Any_):
        return "(" + " OR ".join(where(part, params) for part in node.parts) + ")"
    if isinstance(node, Not):
        return f"(NOT {where(node.part, params)})"
    if node.keys:
        return _metadata(node, params)
    return _column(node, params)


def _bind(params: dict[str, Any], value: Any) -> str:
    name = f"f{len(params)}"
    while name in params:  # a caller's own parameter of that name
        name += "_"
    params[name] = value
    return f"%({name})s"


def _column(c: Condition, params: dict[str, Any]) -> str:
    column = f"m.{c.field}"  # one of filters.TEXT_FIELDS or TIME_FIELDS, not the caller's text
    if c.op == "exists":
        return f"{column} {'<>' if c.value else '='} ''"
    if c.op == "in":
        return f"{column} = ANY({_bind(params, list(c.value))})"
    return f"{column} {_COMPARE[c.op]} {_bind(params, c.value)}"


def _metadata(c: Condition, params: dict[str, Any]) -> str:
    if c.op in ("eq", "ne"):
        test = _contains(c.keys, c.value, params)
        return test if c.op == "eq" else f"(NOT {test})"
    if c.op == "in":
        return "(" + " OR ".join(_contains(c.keys, v, params) for v in c.value) + ")"
    if c.op == "exists":
        path = "$" + "".join(f'."{key}"' for key in c.keys)  # keys match metadata.KEY_PATTERN
        has = f"m.metadata @? {_bind(params, path)}::jsonpath"
        return has if c.value else f"(NOT {has})"
    # jsonb orders values of different types by type: the type test keeps a range
    # to the value's own type (a string is never "greater" than a number).
    value = f"(m.metadata #> {_bind(params, list(c.keys))}::text[])"
    return (
        f"(jsonb_typeof{value} = {_bind(params, _json_type(c.value))} "
        f"AND {value} {_COMPARE[c.op]} {_bind(params, Jsonb(c.value))})"
    )


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else "string"


def _contains(keys: tuple[str, ...], value: Any, params: dict[str, Any]) -> str:
    nested: Any = value
    for key in reversed(keys):
        nested = {key: nested}
    return f"m.metadata @> {_bind(params, Jsonb(nested))}"
