"""The archive: a hybrid search over the user's episodes (the turns as they were
recorded), on the event loop through the asyncio Postgres pool."""

from __future__ import annotations

from fastapi import APIRouter

from services.api.agents import KeyAgentDep, acting
from services.api.deps import ApiDep, AppIdDep
from services.api.errors import postgres_or_503
from services.api.memory_models import ArchiveSearchRequest, ArchiveSearchResponse
from services.api.routers.views import episode_view, period_view
from shared.events import utcnow
from shared.memory.periods import find_period
from shared.memory.ranking import Scope

router = APIRouter()


@router.post("/v1/archive:search", response_model=ArchiveSearchResponse)
async def archive_search(
    body: ArchiveSearchRequest, app_id: AppIdDep, key_agent: KeyAgentDep, api: ApiDep
) -> ArchiveSearchResponse:
    agent = acting(key_agent, body.agent_id)
    scope = Scope(app_id, body.user_id, body.project_id or "", agent_id=agent)
    period = None
    if body.read_period and body.before is None and body.after is None:
        period = find_period(body.query, body.asked_at or utcnow())
    if period is not None:
        found = await postgres_or_503(api.search.episodes_in(scope, body.query, body.k, period))
    else:
        found = await postgres_or_503(
            api.search.episodes(scope, body.query, body.k, body.before, body.after)
        )
    around: list[list[dict]] = [[] for _ in found]
    if body.context_turns:
        around = await postgres_or_503(api.search.surrounding(scope, found, body.context_turns))
    return ArchiveSearchResponse(
        episodes=[episode_view(e, turns) for e, turns in zip(found, around, strict=True)],
        period=period_view(period) if period is not None else None,
    )
