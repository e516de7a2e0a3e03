"""What the console takes from a query string or a posted form, each value checked
by the API's own rules (shared.identifiers, a memory's metadata and the filter
expression of shared.memory) before anything is called with it.

A value that breaks one is a 422 page naming its field; a missing one that the
page needs is a 422 page saying so. Nothing the console is sent reaches the API's
client unchecked: an id of 70,000 characters would not even make a URL.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from services.console.access import Refused
from shared.identifiers import MAX_IDENTIFIER_LENGTH, identifier_problem, text_problem
from shared.memory.filters import FilterError, Node
from shared.memory.filters import load_json as load_filter
from shared.memory.filters import parse as parse_filter
from shared.memory.metadata import MAX_DEPTH
from shared.memory.metadata import checked as checked_metadata

MAX_TEXT = 4000  # a search query's limit in the API, and any other text's here
MAX_NUMBER = 100_000


# A query string's parameters or a posted form.
Source = Mapping[str, object]


def _raw(source: Source, field: str) -> str:
    value = source.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Refused(422, f"{field}: must be text, not a file")
    return value


def identifier(source: Source, field: str, *, required: bool = True) -> str:
    """An id (a user's, a session's, a project's…): what the API takes as one.
    Empty is allowed only when not `required` (a filter left blank)."""
    value = _raw(source, field).strip()
    if not value:
        if required:
            raise Refused(422, f"{field}: is required")
        return ""
    problem = identifier_problem(value)
    if problem is not None:
        if len(value) > MAX_IDENTIFIER_LENGTH:
            problem = f"must be at most {MAX_IDENTIFIER_LENGTH} characters"
        raise Refused(422, f"{field}: {problem}")
    return value


def text(
    source: Source, field: str, *, required: bool = False, limit: int | None = MAX_TEXT
) -> str:
    """Free text (a query, a pattern, a tool's arguments): no NUL, at most `limit`
    characters (None: JSON whose own bounds the caller checks); blank counts as missing."""
    value = _raw(source, field)
    if not value.strip():
        if required:
            raise Refused(422, f"{field}: is required")
        return ""
    if limit is not None and len(value) > limit:
        raise Refused(422, f"{field}: must be at most {limit} characters")
    problem = text_problem(value)
    if problem is not None:
        raise Refused(422, f"{field}: {problem}")
    return value


def choice(source: Source, field: str, options: Collection[str], *, default: str = "") -> str:
    """One of `options` (or `default` when not given)."""
    value = _raw(source, field).strip()
    if not value:
        return default
    if value not in options:
        raise Refused(422, f"{field}: must be one of {', '.join(sorted(options))}")
    return value


def metadata(source: Source, field: str) -> dict[str, Any]:
    """A memory's metadata typed into a form (blank: the empty object), within the
    API's own bounds (shared.memory.metadata: its size is bytes of compact JSON,
    whatever the characters typed)."""
    value = text(source, field, limit=None)
    if not value:
        return {}
    try:
        return checked_metadata(json.loads(value))
    except RecursionError:  # arrays in arrays past what the parser takes
        raise Refused(422, f"{field}: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        # json's own error says where the text stops being JSON; checked's, what is wrong.
        problem = "is not JSON" if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise Refused(422, f"{field}: {problem}") from None


def filter_expression(source: Source, field: str) -> tuple[Any, Node] | None:
    """A filter expression as JSON text (blank: none), read as the API reads its
    `filter` (shared.memory.filters): its JSON value, for the API's search, and its
    tree, for the console's own list; a bad one is a 422 naming the part."""
    value = text(source, field, limit=None)
    if not value:
        return None
    try:
        expression = load_filter(value)
        return expression, parse_filter(expression)
    except FilterError as exc:
        where, problem = exc.under(field)
        raise Refused(422, f"{where}: {problem}") from None


def number(
    source: Source,
    field: str,
    *,
    default: int | None = None,
    least: int = 1,
    most: int = MAX_NUMBER,
) -> int:
    """A whole number from `least` to `most` (a page of a list, a revision, seconds);
    `default` when not given, or Refused(422) if there is none."""
    value = _raw(source, field).strip()
    if not value:
        if default is None:
            raise Refused(422, f"{field}: is required")
        return default
    digits = value.isascii() and value.isdigit() and len(value) <= len(str(most))
    if not digits or not least <= int(value) <= most:
        raise Refused(422, f"{field}: must be a whole number from {least} to {most}")
    return int(value)


def time(source: Source, field: str) -> datetime | None:
    """A time as a form's `datetime-local` field sends it, or RFC 3339; without a
    zone it is UTC, as the console shows every time. None when not given."""
    value = text(source, field).strip()
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise Refused(422, f"{field}: must be a time such as 2030-01-31T09:00 (UTC)") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
