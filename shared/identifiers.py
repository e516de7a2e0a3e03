"""Rules for identifiers and texts that a schema cannot express.

The same functions guard the HTTP API (a 422 naming the field) and the event
decoder (a dead-lettered message with the reason).
"""

from __future__ import annotations

import unicodedata

MAX_IDENTIFIER_LENGTH = 256


def identifier_problem(value: object) -> str | None:
    """Why `value` is not a valid identifier, or None if it is."""
    if not isinstance(value, str):
        return "must be a string"
    if not value:
        return "must not be empty"
    if len(value) > MAX_IDENTIFIER_LENGTH:
        return f"must be at most {MAX_IDENTIFIER_LENGTH} characters"
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        return "must not contain control characters"
    return None


def text_problem(value: str, max_bytes: int) -> str | None:
    """Why `value` is too large a message text, or None if it fits."""
    size = len(value.encode("utf-8"))
    if size > max_bytes:
        return f"is {size} bytes, over the limit of {max_bytes} bytes"
    return None
