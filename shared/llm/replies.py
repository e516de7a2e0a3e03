"""Strict reading of a model's JSON reply: a field that is missing, of the wrong
type or not one of the allowed values raises `MalformedReply`, which the
`gemini` provider retries."""

from __future__ import annotations

from typing import Any

from shared.llm.base import MalformedReply


def field(value: Any, name: str, kind: type, where: str) -> Any:
    if not isinstance(value, dict):
        raise MalformedReply(f"{where} is not an object")
    if name not in value:
        raise MalformedReply(f"{where} has no {name!r}")
    found = value[name]
    if not isinstance(found, kind):
        raise MalformedReply(f"{where}: {name!r} is not a {kind.__name__}")
    return found


def text(value: dict[str, Any], name: str, where: str) -> str:
    found = field(value, name, str, where).strip()
    if not found:
        raise MalformedReply(f"{where}: {name!r} is empty")
    return found


def choice(value: Any, name: str, allowed: tuple[str, ...], where: str) -> str:
    found = field(value, name, str, where)
    if found not in allowed:
        raise MalformedReply(f"{where}: {name!r} is {found!r}, not one of {', '.join(allowed)}")
    return found
