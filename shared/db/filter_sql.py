"""A filter expression (`shared.memory.filters`) as a WHERE clause over memories
(alias `m`): its values and metadata key paths are bound parameters, so no text
of the caller's reaches the statement.

A metadata equality or `in` is a containment test (`m.metadata @> '{"team": "x"}'`)
and an existence test a JSON path one (`@? '$."team"'`), both of which the GIN
index `memories_metadata` (jsonb_path_ops) answers (a selective search reads its
equalities through `shared.db.scoped_metadata` instead). A range is a strict JSON path
filter (`@? 'strict $ ? (@."level" >= 5)'`): it compares numbers with numbers and
strings with strings (by Unicode code point), and a value of another type, an
array among them, or a missing key is no match (false, never NULL, so that NOT
of it holds).

Every metadata test is an operator that the planner estimates from the column's
statistics (`matchingsel`: the test applied to the sampled values), so it knows
about how many rows a filter admits, which decides how the search's vector
ranking reads them (`shared.db.search`). A range written as the key's value
(`#>`) compared with a bound one was estimated at 0.17% of the rows whatever it
admitted: the planner sorted half of a scope by exact distance where the HNSW
walk needed a few dozen rows (x7 the unfiltered search at 100,000 memories,
bench/filtered_search.py).
"""

from __future__ import annotations

import json
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


def bind(params: dict[str, Any], value: Any) -> str:
    """A placeholder for `value`, added to `params` under a name not yet taken."""
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
        return f"{column} = ANY({bind(params, list(c.value))})"
    return f"{column} {_COMPARE[c.op]} {bind(params, c.value)}"


def _metadata(c: Condition, params: dict[str, Any]) -> str:
    if c.op in ("eq", "ne"):
        test = _contains(c.keys, c.value, params)
        return test if c.op == "eq" else f"(NOT {test})"
    if c.op == "in":
        return "(" + " OR ".join(_contains(c.keys, v, params) for v in c.value) + ")"
    if c.op == "exists":
        has = f"m.metadata @? {bind(params, '$' + _path(c.keys))}::jsonpath"
        return has if c.value else f"(NOT {has})"
    # The value is a JSON literal in the bound path (json.dumps: quoted and escaped).
    compared = f"@{_path(c.keys)} {_COMPARE[c.op]} {json.dumps(c.value, ensure_ascii=False)}"
    return f"m.metadata @? {bind(params, f'strict $ ? ({compared})')}::jsonpath"


def _path(keys: tuple[str, ...]) -> str:
    return "".join(f'."{key}"' for key in keys)  # keys match metadata.KEY_PATTERN


def _contains(keys: tuple[str, ...], value: Any, params: dict[str, Any]) -> str:
    nested: Any = value
    for key in reversed(keys):
        nested = {key: nested}
    return f"m.metadata @> {bind(params, Jsonb(nested))}"
