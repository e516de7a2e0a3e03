"""Rules for identifiers and texts that a schema cannot express.

The same functions guard the HTTP API (a 422 naming the field) and the event
decoder (a dead-lettered message with the reason).
"""

from __future__ import annotations

import re

MAX_IDENTIFIER_LENGTH = 256

# Exactly Unicode's category Cc (control characters): U+0000-U+001F, U+007F-U+009F.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def encoding_problem(value: str) -> str | None:
    # A lone surrogate (JSON "\ud800") is valid JSON but not UTF-8: nothing
    # downstream (Pub/Sub, Postgres, Valkey) can store it.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (it contains a lone surrogate)"
    return None


def identifier_problem(value: object) -> str | None:
    """Why `value` is not a valid identifier, or None if it is."""
    if not isinstance(value, str):
        return "must be a string"
    if not value:
        return "must not be empty"
    if len(value) > MAX_IDENTIFIER_LENGTH:
        return f"must be at most {MAX_IDENTIFIER_LENGTH} characters"
    if _CONTROL.search(value):
        return "must not contain control characters"
    return encoding_problem(value)


def text_problem(value: str, max_bytes: int | None = None) -> str | None:
    """Why `value` cannot be stored as a message text (or is over `max_bytes`), or None."""
    problem = encoding_problem(value)
    if problem:
        return problem
    if "\x00" in value:
        return "must not contain NUL characters"
    if max_bytes is not None:
        size = len(value.encode("utf-8"))
        if size > max_bytes:
            return f"is {size} bytes, over the limit of {max_bytes} bytes"
    return None
