"""The context of a turn: the session's summary and recent turns, the pinned rules,
the memories, long-term summaries and archived turns relevant to the query, and
the `system_instruction` built from them within one budget
(shared.memory.context). A part whose store fails is left out and named in
`degraded`, never an error."""

from __future__ import annotations

import structlog
from fastapi import APIRouter, Response

from services.api import filter_models
from services.api.agents import KeyAgentDep, acting
from services.api.context_models import ContextRequest, ContextResponse, over_budget
from services.api.deps import ApiDep, AppIdDep
from services.api.errors import ApiError
from services.api.models import json_response
from services.api.routers.views import context_body
from shared.events import utcnow
from shared.memory.context import ContextQuery, build_context, recall_hits
from shared.memory.ranking import Scope
from shared.session_buffer import SessionOfAnotherAgent

log = structlog.get_logger("agent_memory.api")
router = APIRouter()

_WITHOUT = {
    "session": "context without the session",
    "profile": "context without the profile",
    "memories": "context without long-term memories",
    "recalled_turns": "context without recalled turns",
}


@router.post("/v1/context", response_model=ContextResponse)
async def context(
    body: ContextRequest, app_id: AppIdDep, key_agent: KeyAgentDep, api: ApiDep
) -> Response:
    settings = api.settings
    budget = body.token_budget or settings.context_token_budget
    caps = body.sections.given() if body.sections is not None else {}
    if body.sections is not None and body.token_budget is None:
        try:  # the request's own budget was checked with the body
            over_budget(body.sections, budget)
        except ValueError as exc:
            field, message = str(exc).split(": ", 1)
            raise ApiError(422, "invalid_request", f"{field}: {message}", field=field) from None
    query = ContextQuery(
        scope=Scope(
            app_id,
            body.user_id,
            body.project_id or "",
            body.session_id,
            body.time(),
            acting(key_agent, body.agent_id),
        ),
        prev_session_id=body.prev_session_id or "",
        query=body.query,
        k=body.k,
        budget=budget,
        recent_turns=settings.context_recent_turns,
        asked_at=body.asked_at or utcnow(),
        hits=recall_hits(budget, settings.context_recalled_turns),
        neighbours=settings.context_recall_neighbours,
        caps=caps,
        matching=filter_models.read(body.filter),
    )
    try:
        built = await build_context(query, api.buffer, api.search)
    except SessionOfAnotherAgent as exc:
        raise ApiError(404, "not_found", f"session_id: {exc}", field="session_id") from None
    for part, error in built.failures.items():
        log.warning(_WITHOUT[part], error=repr(error))
    # The fast path of services.api.models.json_response.
    return json_response(context_body(built))
