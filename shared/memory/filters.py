"""A filter expression over memories: the caller's JSON, read into a tree that
`shared.db.filter_sql` compiles to a WHERE clause of bound parameters.

The grammar (docs/api.md, Filters):

    filter    := { key: ..., ... }        every key must hold (AND), at least one
    key       := "and": [filter, ...]     all of them (1 to MAX_ITEMS)
               | "or":  [filter, ...]     any of them (1 to MAX_ITEMS)
               | "not": filter            not it
               | FIELD: condition
    condition := scalar                   equal to it
               | { op: value, ... }       every op must hold
    op        := eq | ne | in (a list of 1 to MAX_IN scalars) | gt | gte | lt | lte
               | exists (true or false)
    FIELD     := scope | kind | topic | entity_name | project_id | session_id | agent_id
               | created_at | updated_at | observed_at
               | metadata.KEY[.KEY...]     a key of the memory's metadata (at most
                                          MAX_DEPTH keys deep)

The text fields take eq, ne, in and exists (not empty); the times take eq, ne and
the ranges, with RFC 3339 values; metadata keys take them all, with scalar values
(ranges compare numbers with numbers and strings with strings, by code point; a
value of another type matches nothing, and `ne` matches a memory without the key
too, as `not` of a range does). A filter is
at most MAX_NESTING deep and holds at most MAX_CONDITIONS conditions. A problem is
a `FilterError` naming the part (`and[1].metadata.team.in`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError

from shared.identifiers import encoding_problem
from shared.memory.metadata import KEY_PATTERN, MAX_DEPTH

TEXT_FIELDS = ("scope", "kind", "topic", "entity_name", "project_id", "session_id", "agent_id")
TIME_FIELDS = ("created_at", "updated_at", "observed_at")
RANGES = ("gt", "gte", "lt", "lte")
OPERATORS = {
    "text": ("eq", "ne", "in", "exists"),
    "time": ("eq", "ne", *RANGES),
    "metadata": ("eq", "ne", "in", *RANGES, "exists"),
}
MAX_ITEMS = 20  # filters in one and/or
MAX_IN = 100  # values in one `in`
MAX_NESTING = 4  # filters within filters (the top one is the first)
MAX_CONDITIONS = 32
MAX_TEXT = 500  # characters of one value
_KEY = re.compile(KEY_PATTERN)
_TIME = TypeAdapter(datetime)


class FilterError(ValueError):
    """What is wrong with a filter, and where (`path`, dotted from the filter)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.problem = message

    def under(self, field: str) -> tuple[str, str]:
        """Where it is, named from the filter's own field (`filter.and[1].kind`), and
        what is wrong there."""
        return (f"{field}.{self.path}" if self.path else field), self.problem


@dataclass(frozen=True)
class Condition:
    """`field` (a built-in column, or a metadata key path) `op` `value`."""

    field: str
    keys: tuple[str, ...]  # the metadata key path; () for a built-in field
    op: str
    value: Any


@dataclass(frozen=True)
class All:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Any_:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    part: Node


Node = Condition | All | Any_ | Not


def parse(value: Any) -> Node:
    """The filter `value` (parsed JSON) as a tree, or FilterError."""
    return _Reader().filter(value, "", 1)


def parse_json(text: str) -> Node:
    """The filter written as JSON text (a query parameter, a form's field)."""
    return parse(load_json(text))


def load_json(text: str) -> Any:
    """A filter's JSON text as its value, unchecked; FilterError if it is no JSON. The
    standard library keeps a lone surrogate, which `parse` then names where it is."""
    try:
        return json.loads(text, parse_constant=_not_json)
    except RecursionError:
        raise FilterError("", "nests too deep") from None
    except ValueError:
        raise FilterError("", "is not JSON") from None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


class _Reader:
    def __init__(self) -> None:
        self.conditions = 0

    def filter(self, value: Any, path: str, nesting: int) -> Node:
        if nesting > MAX_NESTING:
            raise FilterError(path, f"nested more than {MAX_NESTING} filters deep")
        if not isinstance(value, dict) or not value:
            raise FilterError(path, "a filter is a JSON object of at least one key")
        parts = [self.key(name, item, path, nesting) for name, item in value.items()]
        return parts[0] if len(parts) == 1 else All(tuple(parts))

    def key(self, name: str, value: Any, parent: str, nesting: int) -> Node:
        path = _join(parent, name)
        if name in ("and", "or"):
            if not isinstance(value, list) or not 1 <= len(value) <= MAX_ITEMS:
                raise FilterError(path, f"must be a list of 1 to {MAX_ITEMS} filters")
            parts = tuple(
                self.filter(item, f"{path}[{i}]", nesting + 1) for i, item in enumerate(value)
            )
            return All(parts) if name == "and" else Any_(parts)
        if name == "not":
            return Not(self.filter(value, path, nesting + 1))
        kind, keys = _field(name, parent)
        if not isinstance(value, dict):
            return self.condition(name, keys, kind, "eq", value, path)
        if not value:
            raise FilterError(path, "a condition names at least one operator")
        parts = tuple(
            self.condition(name, keys, kind, op, item, _join(path, op))
            for op, item in value.items()
        )
        return parts[0] if len(parts) == 1 else All(parts)

    def condition(
        self, name: str, keys: tuple[str, ...], kind: str, op: str, value: Any, path: str
    ) -> Condition:
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise FilterError(path, f"more than {MAX_CONDITIONS} conditions in one filter")
        if op not in OPERATORS[kind]:
            allowed = ", ".join(OPERATORS[kind])
            raise FilterError(path, f"{name} takes {allowed}")
        if op == "exists":
            if not isinstance(value, bool):
                raise FilterError(path, "must be true or false")
            return Condition(name, keys, op, value)
        if op == "in":
            if not isinstance(value, list) or not 1 <= len(value) <= MAX_IN:
                raise FilterError(path, f"must be a list of 1 to {MAX_IN} values")
            values = tuple(_value(kind, item, f"{path}[{i}]") for i, item in enumerate(value))
            return Condition(name, keys, op, values)
        return Condition(name, keys, op, _value(kind, value, path))


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _field(name: str, parent: str) -> tuple[str, tuple[str, ...]]:
    """The field's kind (`text`, `time`, `metadata`) and its metadata key path; a
    name that is none is named in the message, at its filter's path."""
    if name in TEXT_FIELDS:
        return "text", ()
    if name in TIME_FIELDS:
        return "time", ()
    if name.startswith("metadata."):
        keys = tuple(name.split(".")[1:])
        if len(keys) > MAX_DEPTH or not all(_KEY.match(k) for k in keys):
            raise FilterError(
                parent,
                f"{name!r}: a metadata key path is 1 to {MAX_DEPTH} keys matching {KEY_PATTERN}",
            )
        return "metadata", keys
    known = ", ".join((*TEXT_FIELDS, *TIME_FIELDS, "metadata.KEY", "and", "or", "not"))
    raise FilterError(parent, f"{name!r} is not a field a filter knows ({known})")


def _value(kind: str, value: Any, path: str) -> Any:
    if kind == "time":
        return _time(value, path)
    if kind == "text":
        if not isinstance(value, str):
            raise FilterError(path, "must be a string")
        return _text(value, path)
    if isinstance(value, str):
        return _text(value, path)
    if isinstance(value, float) and not math.isfinite(value):
        raise FilterError(path, "must be a finite number")
    if value is None or isinstance(value, bool | int | float):
        return value
    raise FilterError(path, "must be a string, a number, true, false or null")


def _text(value: str, path: str) -> str:
    if len(value) > MAX_TEXT:
        raise FilterError(path, f"must be at most {MAX_TEXT} characters")
    if "\x00" in value:
        raise FilterError(path, "must not contain NUL characters")
    problem = encoding_problem(value)  # JSON text may hold a lone surrogate
    if problem:
        raise FilterError(path, problem)
    return value


def _time(value: Any, path: str) -> datetime:
    if not isinstance(value, str):
        raise FilterError(path, "must be an RFC 3339 date-time string")
    try:
        # Read as the API reads every other time (pydantic's RFC 3339 parser).
        parsed = _TIME.validate_python(value)
    except ValidationError:
        raise FilterError(path, "must be an RFC 3339 date-time string") from None
    try:
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except OverflowError:
        raise FilterError(path, "is out of range once converted to UTC") from None
