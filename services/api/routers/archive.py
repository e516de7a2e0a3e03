"""The archive: a hybrid search over the user's episodes (the turns as they were
recorded), on the event loop through the asyncio Postgres pool."""

from __future__ import annotations

from fastapi import APIRouter

from services.api.deps import ApiDep, AppIdDep
from services.api.errors import postgres_or_503
from services.api.memory_models import ArchiveSearchRequest, ArchiveSearchResponse
from services.api.routers.views import episode_view
from shared.memory.search import Scope

router = APIRouter()


@router.post("/v1/archive:search", response_model=ArchiveSearchResponse)
async def archive_search(
    body: ArchiveSearchRequest, app_id: AppIdDep, api: ApiDep
) -> ArchiveSearchResponse:
    scope = Scope(app_id, body.user_id, body.project_id or "")
    found = await postgres_or_503(
        api.search.episodes(scope, body.query, body.k, body.before, body.after)
    )
    return ArchiveSearchResponse(episodes=[episode_view(e) for e in found])
