"""Which agent a request acts as: the `agent_id` it names, checked against its
key's. A key limited to an agent (`agent-memory keys create --agent`) acts as
that agent when the request names none, is refused (403 naming the field) when
it names another, and is refused on the routes that have no agent dimension
(`AGENT_ROUTES` lists those that do): exports, imports and deletes cover every
agent of the user, and a merge changes an entity every agent of the user sees,
so only a key of the whole app reaches them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from services.api.errors import ApiError

# The routes a key limited to an agent may call (method, path template): those
# whose reads and writes name the agent (an operation is read as the agent that
# started it), what reads no memory (an app's configuration, a permission check),
# and the user's profile, which every agent's context carries.
AGENT_ROUTES = frozenset(
    {
        ("POST", "/v1/sessions/{session_id}/turns"),
        ("GET", "/v1/sessions/{session_id}"),
        ("POST", "/v1/sessions/{session_id}:flush"),
        ("DELETE", "/v1/sessions/{session_id}"),
        ("POST", "/v1/memories:search"),
        ("GET", "/v1/memories"),
        ("POST", "/v1/memories"),
        ("GET", "/v1/memories/{memory_id}"),
        ("PATCH", "/v1/memories/{memory_id}"),
        ("DELETE", "/v1/memories/{memory_id}"),
        ("POST", "/v1/memories/{memory_id}:rollback"),
        ("POST", "/v1/memories/{memory_id}:feedback"),
        ("POST", "/v1/memories:delete"),
        ("POST", "/v1/memories:generate"),
        ("GET", "/v1/operations/{name:path}"),
        ("POST", "/v1/context"),
        ("POST", "/v1/archive:search"),
        ("GET", "/v1/entities"),
        ("GET", "/v1/entities/{entity_id}"),
        ("POST", "/v1/permissions:evaluate"),
        ("GET", "/v1/config/ttl"),
        ("GET", "/v1/config/extraction"),
        ("GET", "/v1/config/agents"),
        ("GET", "/v1/config/profile"),
        # The user's profile: every agent's context carries it, and extraction from
        # any agent's turns fills it, so an agent reads and changes it too.
        ("GET", "/v1/users/{user_id:path}/profile"),
        ("PATCH", "/v1/users/{user_id:path}/profile"),
        ("GET", "/v1/users/{user_id:path}/profile/revisions"),
        ("POST", "/v1/users/{user_id:path}/profile:rollback"),
    }
)

# Why a route outside `AGENT_ROUTES` is refused, where the whole user or app is not
# the whole story: an entity is the user's, whichever agent's rows named it.
_MERGE = "changes an entity that every agent of the user sees"
_WHY_REFUSED = {
    "/v1/entities/{entity_id}:merge": _MERGE,
    "/v1/entities/{entity_id}:unmerge": _MERGE,
}


def key_agent(request: Request) -> str:
    """The agent the request's key is limited to ('' none)."""
    return str(getattr(request.state, "agent_id", "") or "")


def refuse_outside_agent_routes(request: Request) -> None:
    """403 for a key limited to an agent on a route outside `AGENT_ROUTES`."""
    agent = key_agent(request)
    if not agent:
        return
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    if (request.method, path) not in AGENT_ROUTES:
        why = _WHY_REFUSED.get(path, "serves the whole user or app")
        shown = path.replace(":path}", "}")  # the route's template as the docs write it
        raise ApiError(
            403,
            "forbidden",
            f"this key is limited to agent {agent}; {request.method} {shown} {why}, which "
            "needs a key that is not limited to an agent",
        )


def acting(key_agent_id: str, named: str | None, field: str = "agent_id") -> str:
    """The agent a request acts as ('' none): the one it names, or its key's when it
    names none; 403 naming `field` when a limited key names another agent."""
    if not key_agent_id:
        return named or ""
    if named and named != key_agent_id:
        raise ApiError(
            403,
            "forbidden",
            f"{field}: this key is limited to agent {key_agent_id}, not {named}",
            field=field,
        )
    return key_agent_id


async def get_key_agent(request: Request) -> str:
    return key_agent(request)


KeyAgentDep = Annotated[str, Depends(get_key_agent)]
