"""Strict reading of a model's JSON reply: a field that is missing or of the wrong
type, or a value that is not one of the allowed ones, raises `MalformedReply`
with its fault, which the model providers ask again about (`shared.llm.asking`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from shared.llm.base import Fault, MalformedReply


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


def choice(
    value: Any,
    name: str,
    allowed: tuple[str, ...],
    where: str,
    fault: Fault = Fault.UNKNOWN_VALUE,
) -> str:
    """A field whose value must be one of `allowed`: an enum's value, or (`fault`
    UNKNOWN_ID) the label of a turn or candidate the request named."""
    found = field(value, name, str, where)
    if found not in allowed:
        raise MalformedReply(
            f"{where}: {name!r} is {found!r}, not one of {', '.join(allowed)}", fault
        )
    return found


def objects(value: Any, name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each item of the reply's list `name`, an object, with where it is (`name[3]`)."""
    for index, item in enumerate(field(value, name, list, "the reply")):
        where = f"{name}[{index}]"
        if not isinstance(item, dict):
            raise MalformedReply(f"{where} is not an object")
        yield where, item
