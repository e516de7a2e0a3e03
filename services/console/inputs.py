"""What the console takes from a query string or a posted form, each value checked
by the API's own rules (shared.identifiers) before anything is called with it.

A value that breaks one is a 422 page naming its field; a missing one that the
page needs is a 422 page saying so. Nothing the console is sent reaches the API's
client unchecked: an id of 70,000 characters would not even make a URL.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from services.console.access import Refused
from shared.identifiers import MAX_IDENTIFIER_LENGTH, identifier_problem, text_problem

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


def text(source: Source, field: str, *, required: bool = False, limit: int = MAX_TEXT) -> str:
    """Free text (a query, a pattern, a tool's arguments): no NUL, at most `limit`
    characters; blank counts as missing."""
    value = _raw(source, field)
    if not value.strip():
        if required:
            raise Refused(422, f"{field}: is required")
        return ""
    if len(value) > limit:
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


def json_object(source: Source, field: str) -> dict[str, Any]:
    """A JSON object typed into a form (blank: the empty one); the API checks the rest."""
    value = text(source, field)
    if not value:
        return {}
    try:
        parsed = json.loads(value)
    except ValueError:
        raise Refused(422, f"{field}: is not JSON") from None
    if not isinstance(parsed, dict):
        raise Refused(422, f"{field}: must be a JSON object")
    return parsed


def number(source: Source, field: str, *, default: int | None = None) -> int:
    """A whole number from 1 (a page of a list, a revision); `default` when not
    given, or Refused(422) if there is none."""
    value = _raw(source, field).strip()
    if not value:
        if default is None:
            raise Refused(422, f"{field}: is required")
        return default
    if not (value.isascii() and value.isdigit() and len(value) <= 6) or int(value) > MAX_NUMBER:
        raise Refused(422, f"{field}: must be a whole number from 1 to {MAX_NUMBER}")
    if int(value) < 1:
        raise Refused(422, f"{field}: must be a whole number from 1 to {MAX_NUMBER}")
    return int(value)
