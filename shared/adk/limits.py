"""Turns cut to the API's size rules before they are sent.

The API refuses a whole turn (422) when a text is over `AM_MAX_MESSAGE_BYTES`,
the tool events together are over `AM_MAX_TOOL_EVENTS_BYTES`, or a text holds a
NUL or a lone surrogate. An agent's shell output easily breaks one of these, and
losing the turn for it would be worse than keeping its start: so texts are
cleaned and cut (marked), and tool events share the budget.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

TRUNCATED = " …[truncated]"
MAX_QUERY_CHARS = 4000  # the API's limit on a context or search query
MAX_TOOL_NAME_BYTES = 256


@dataclass(frozen=True)
class TurnLimits:
    """The API's limits (its defaults here); set them to the deployment's values."""

    max_message_bytes: int = 32 * 1024  # AM_MAX_MESSAGE_BYTES
    max_tool_events_bytes: int = 256 * 1024  # AM_MAX_TOOL_EVENTS_BYTES


API_DEFAULTS = TurnLimits()


def clean_text(text: str) -> str:
    """`text` without NUL characters, lone surrogates replaced."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "")


def cut_text(text: str, max_bytes: int) -> str:
    """`text` cleaned, and cut to at most `max_bytes` of UTF-8 (marked as cut)."""
    text = clean_text(text)
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    marker = TRUNCATED.encode("utf-8")
    if max_bytes <= len(marker):
        return data[:max_bytes].decode("utf-8", "ignore")
    return data[: max_bytes - len(marker)].decode("utf-8", "ignore") + TRUNCATED


def json_text(value: Any) -> str:
    """A tool event's argument or output as the API stores it: JSON text (a string
    as it is)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, default=str)


def fit_tool_events(events: list[dict[str, Any]], max_bytes: int) -> list[dict[str, Any]]:
    """`events` as they are when they fit, else each cut to an equal share of
    `max_bytes` (its arguments first, its output the rest of its share)."""
    raw = [(str(e["name"]), json_text(e["arguments"]), json_text(e["output"])) for e in events]
    texts = [tuple(clean_text(part) for part in t) for t in raw]
    size = sum(len(part.encode("utf-8")) for t in texts for part in t)
    if size <= max_bytes and texts == raw:
        return events
    share = max_bytes // max(len(events), 1) if size > max_bytes else max_bytes
    fitted = []
    for name, arguments, output in texts:
        name = cut_text(name, min(MAX_TOOL_NAME_BYTES, share))
        rest = share - len(name.encode("utf-8"))
        arguments = cut_text(arguments, max(rest // 2, rest - len(output.encode("utf-8"))))
        output = cut_text(output, rest - len(arguments.encode("utf-8")))
        fitted.append({"name": name, "arguments": arguments, "output": output})
    return fitted


def query_text(text: str) -> str:
    """A query the API accepts: cleaned, at most `MAX_QUERY_CHARS` characters."""
    return clean_text(text)[:MAX_QUERY_CHARS]
