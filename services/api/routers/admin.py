"""Admin-only routes: asking the compaction worker to fold a user's old episodes."""

from __future__ import annotations

from fastapi import APIRouter

from services.api.deps import AdminDep, ApiDep, AppIdDep
from services.api.errors import ApiError, published_or_503
from services.api.memory_models import CompactionAccepted, CompactionRequest
from services.compaction_worker.requests import compaction_request
from shared.errors import InvalidEvent

router = APIRouter()


@router.post("/v1/compactions", status_code=202, response_model=CompactionAccepted)
async def request_compaction(
    body: CompactionRequest,
    admin: AdminDep,
    app_id: AppIdDep,
    api: ApiDep,
) -> CompactionAccepted:
    if not admin:
        raise ApiError(403, "forbidden", "compaction needs an admin key of this app")
    try:
        event = compaction_request(
            app_id,
            body.user_id,
            body.project_id or "",
            body.retention_days or api.settings.compaction_retention_days,
            body.batch_limit or api.settings.compaction_batch_limit,
        )
    except InvalidEvent as exc:
        raise ApiError(422, "invalid_request", str(exc)) from None
    await published_or_503(
        lambda: api.publisher.publish(event), api.settings.publish_timeout_seconds
    )
    return CompactionAccepted(
        event_id=event.event_id,
        user_id=event.user_id,
        project_id=event.project_id or None,
        retention_days=event.retention_days,
        batch_limit=event.batch_limit,
    )
