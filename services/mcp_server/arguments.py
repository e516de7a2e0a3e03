"""The MCP tools' arguments that several tools take, each with the description the
SDK puts into the tools' input schemas.

No `from __future__ import annotations`: the SDK reads the tools' signatures.
"""

from typing import Annotated, Any, Literal, TypedDict

from pydantic import Field

Kind = Literal["preference", "fact", "rule", "event"]
Scope = Literal["global", "project", "session"]

UserId = Annotated[
    str | None,
    Field(description="The user the memory belongs to (default: the server's configured user)"),
]
SessionId = Annotated[
    str | None,
    Field(description="The conversation's id (default: the server's configured session)"),
]
ProjectId = Annotated[
    str | None,
    Field(description="A project to scope to (default: the server's configured project, if any)"),
]
Query = Annotated[str, Field(description="What to look for, in natural language")]
K = Annotated[int | None, Field(description="How many results at most (1-100)")]
Filter = Annotated[
    dict[str, Any] | None,
    Field(
        description='Only the memories this filter expression admits, e.g. {"metadata.team": '
        '"infra"} or {"and": [{"kind": {"in": ["fact", "rule"]}}, {"not": {"topic": "x"}}]}'
    ),
]
MemoryId = Annotated[str, Field(description="The memory's id (from a search or list)")]
Metadata = Annotated[
    dict[str, Any] | None,
    Field(description='Your own JSON object kept with the memory, e.g. {"team": "infra"}'),
]
ExpireAt = Annotated[
    str | None,
    Field(description="When it expires, RFC 3339 with zone (or give ttl_seconds instead)"),
]
TtlSeconds = Annotated[
    int | None, Field(description="It expires this many seconds from now (or give expire_at)")
]


class Scoped(TypedDict):
    """The project and the agent a tool's call is scoped to."""

    project_id: str | None
    agent_id: str | None
