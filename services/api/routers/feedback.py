"""Feedback on a memory: `POST /v1/memories/{memory_id}:feedback` (useful, not
useful or wrong, with an optional reason), recorded with the caller as its source
(shared.memory.feedback). A custom method of the memory resource
(services.api.custom_methods), like `:rollback`."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from services.api.custom_methods import ResourceRoute
from services.api.deps import ApiDep, AppIdDep, CallerDep
from services.api.errors import postgres_or_503
from services.api.feedback_models import (
    FeedbackRequest,
    FeedbackResponse,
    FeedbackTally,
    FeedbackView,
)
from services.api.routers.memories import refused, require_uuid
from services.api.routers.views import memory_detail
from shared.db.feedback import FeedbackRow
from shared.db.unit_of_work import UnitsOfWork
from shared.events import format_time, utcnow
from shared.memory import editing
from shared.memory.feedback import give_feedback

router = APIRouter(route_class=ResourceRoute)


@router.post("/v1/memories/{memory_id}:feedback", response_model=FeedbackResponse)
async def memory_feedback(
    memory_id: str, body: FeedbackRequest, app_id: AppIdDep, caller: CallerDep, api: ApiDep
) -> FeedbackResponse:
    """Record the caller's feedback on a live memory: `useful` and `not_useful` weigh
    it in searches and the context (each caller's latest counts, within
    `AM_SEARCH_FEEDBACK_WEIGHT`); `wrong` retires it (a `DELETED` revision whose
    source is the caller; a rollback brings it back), and the turns it came from
    are not extracted into it again."""
    require_uuid(memory_id)
    units = UnitsOfWork(api.pool, "api")
    try:
        given = await postgres_or_503(
            asyncio.to_thread(
                give_feedback,
                units,
                app_id,
                body.user_id,
                memory_id,
                body.rating,
                body.reason,
                source=caller,
                now=utcnow(),
            )
        )
    except editing.MemoryRefused as exc:
        raise refused(exc) from None
    return FeedbackResponse(
        feedback=feedback_view(given.feedback),
        tally=FeedbackTally(**given.tally),
        memory=memory_detail(given.memory, given.revisions),
    )


def feedback_view(row: FeedbackRow) -> FeedbackView:
    return FeedbackView(
        id=row.id,
        memory_id=row.memory_id,
        rating=row.rating,
        reason=row.reason,
        source=row.source,
        created_at=format_time(row.created_at),
        restored_at=format_time(row.restored_at) if row.restored_at else None,
    )
