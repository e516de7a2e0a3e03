"""The context of a turn: the session's summary and recent turns, the pinned rules
and the memories relevant to the query, and the `system_instruction` built from
them (shared.memory.context). Either part may be missing when its store fails:
the answer names it in `degraded`, never an error."""

from __future__ import annotations

import structlog
from fastapi import APIRouter, Response

from services.api.deps import ApiDep, AppIdDep
from services.api.memory_models import ContextRequest, ContextResponse
from services.api.models import json_response
from services.api.routers.views import context_body
from shared.memory.context import ContextQuery, build_context
from shared.memory.search import Scope

log = structlog.get_logger("agent_memory.api")
router = APIRouter()

_WITHOUT = {
    "session": "context without the session",
    "memories": "context without long-term memories",
}


@router.post("/v1/context", response_model=ContextResponse)
async def context(body: ContextRequest, app_id: AppIdDep, api: ApiDep) -> Response:
    settings = api.settings
    query = ContextQuery(
        scope=Scope(app_id, body.user_id, body.project_id or "", body.session_id),
        prev_session_id=body.prev_session_id or "",
        query=body.query,
        k=body.k,
        budget=body.token_budget or settings.context_token_budget,
        recent_turns=settings.context_recent_turns,
    )
    built = await build_context(query, api.buffer, api.search)
    for part, error in built.failures.items():
        log.warning(_WITHOUT[part], error=repr(error))
    # The fast path of services.api.models.json_response.
    return json_response(context_body(built))
