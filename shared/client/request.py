"""The pieces every route's request is built from, for both clients: a path
segment, the options that are set, a time, the events of `generate`; and how an
answer's body is read into the API's models (shared.client.models)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, TypedDict, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Discriminator


class ApiModel(BaseModel):
    """Base of the API's models as the client reads them: tolerant of a newer server.

    Fields it does not know are kept (`extra="allow"`) and enumerations are plain
    strings (their values are in each field's docstring), so an answer with more
    in it still parses. Times are parsed into timezone-aware datetimes.
    """

    model_config = ConfigDict(extra="allow")


M = TypeVar("M", bound=BaseModel)

# The tag of a tagged union's member that takes what no other does: a plain ApiModel.
OTHER_TAG = "*"


def by_tag(field: str, *known: str) -> Discriminator:
    """How an answer's tagged union (the document's `oneOf` with a `discriminator`)
    picks its member: by the value of `field`, a value the client does not know
    (a newer server's) read as a plain `ApiModel` rather than refused."""

    def tag(value: Any) -> str:
        found = value.get(field) if isinstance(value, Mapping) else getattr(value, field, None)
        return found if isinstance(found, str) and found in known else OTHER_TAG

    return Discriminator(tag)


class MemoryFilters(TypedDict, total=False):
    """Which live memories a listing holds (`list_memories`, `iter_memories`), and
    how many a page."""

    project_id: str | None
    agent_id: str | None
    scope: str | None
    kind: str | None
    topic: str | None
    filter: dict[str, Any] | None
    limit: int | None


class SearchOptions(TypedDict, total=False):
    """What both searches (`search`, `archive_search`) take beside the query: the
    scope searched and how many hits at most (`k`)."""

    project_id: str | None
    agent_id: str | None
    k: int | None


# `{role, text}` mappings or `(role, text)` pairs.
Event = Mapping[str, str] | tuple[str, str]


def segment(value: str) -> str:
    """One path segment: an identifier may hold `/`, `?`, `#` or `%`, or be `.` or
    `..` (escaped, so that no URL library reads them as the path's own steps)."""
    if value in (".", ".."):
        return "%2E" * len(value)
    return quote(value, safe="")


def present(**values: Any) -> dict[str, Any]:
    """The options that are set: an unset one takes the server's default."""
    return {k: v for k, v in values.items() if v is not None}


def rfc3339(value: datetime | str | None) -> str | None:
    """A time as the API reads it (a naive datetime is taken as UTC by the API)."""
    return value.isoformat() if isinstance(value, datetime) else value


def search_body(user_id: str, query: str, **options: Any) -> dict[str, Any]:
    """The body of a route that finds memories or turns by `query` (a search, or
    `memories:delete`): the query, and the options that are set."""
    return {"user_id": user_id, "query": query} | present(**options)


def tool_call(
    user_id: str, session_id: str, tool_name: str, tool_args: Mapping[str, Any], **options: Any
) -> dict[str, Any]:
    """The body of a permission's route: the tool call, and the options that are set."""
    call = {"user_id": user_id, "session_id": session_id, "tool_name": tool_name}
    return call | {"tool_args": dict(tool_args)} | present(**options)


def one(model: type[M]) -> Callable[[Any], M]:
    """The reader of a body that is one `model`."""
    return model.model_validate


def listed(model: type[M], key: str) -> Callable[[Any], list[M]]:
    """The reader of a body holding a list of `model` under `key`."""
    return lambda body: [model.model_validate(item) for item in body[key]]


def events_body(events: Iterable[Event]) -> list[dict[str, str]]:
    """The API's events of `memories:generate`."""
    out = []
    for event in events:
        if isinstance(event, Mapping):
            out.append({"role": event["role"], "text": event["text"]})
        else:
            role, text = event
            out.append({"role": role, "text": text})
    return out
