"""An entity as the console shows it, reached from a memory that mentions it: its
aliases and how each was taken, its facts over time, the memories and the turns
that mention it. Read through the API (services.console.pages.client), as the
signed-in key, as the memory's agent when the link names one (the memory's page
does): what that agent's rows and the user's say of it."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from services.console import access, inputs, queries
from services.console.pages import client, page

router = APIRouter(include_in_schema=False)
ENTITY = f"{access.PREFIX}/user/entity"


@router.get(ENTITY, response_class=HTMLResponse)
async def entity(request: Request) -> HTMLResponse:
    query = request.query_params
    user_id, entity_id = inputs.identifier(query, "user"), inputs.identifier(query, "id")
    project = inputs.identifier(query, "project", required=False) or None
    agent = inputs.identifier(query, "agent", required=False) or None
    if queries.event_uuid(entity_id) is None:
        raise access.Refused(422, "id: an entity id is a UUID")
    async with client(request) as api:
        detail = await api.get_entity(user_id, entity_id, project_id=project, agent_id=agent)
    return page(request, "entity.html", user_id=user_id, entity=detail)
