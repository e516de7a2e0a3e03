"""Feedback on a memory: `POST /v1/memories/{memory_id}:feedback` (useful, not
useful or wrong, with an optional reason), recorded with the caller as its source
(shared.memory.feedback). A custom method of the memory resource
(services.api.custom_methods), like `:rollback`."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from functools import partial

from fastapi import APIRouter

from services.api import feedback_models as models
from services.api.agents import KeyAgentDep, acting
from services.api.custom_methods import ResourceRoute
from services.api.deps import ApiDep, AppIdDep, CallerDep
from services.api.errors import postgres_or_503
from services.api.routers.memories import detail_after, refused, require_visible
from shared.db.feedback import FeedbackRow
from shared.db.unit_of_work import UnitsOfWork
from shared.events import format_time, utcnow
from shared.memory import editing
from shared.memory.feedback import give_feedback

router = APIRouter(route_class=ResourceRoute)


@router.post("/v1/memories/{memory_id}:feedback", response_model=models.FeedbackResponse)
async def memory_feedback(
    memory_id: str,
    body: models.FeedbackRequest,
    app_id: AppIdDep,
    caller: CallerDep,
    key_agent: KeyAgentDep,
    api: ApiDep,
) -> models.FeedbackResponse:
    """Record the caller's feedback on a live memory: `useful` and `not_useful` weigh
    it in searches and the context (each caller's latest counts, within
    `AM_SEARCH_FEEDBACK_WEIGHT`); `wrong` retires it (a `DELETED` revision whose
    source is the caller; a rollback brings it back), and the turns it came from
    are not extracted into it again. An agent rates only what it reads, as it edits."""
    await require_visible(api, (app_id, body.user_id, memory_id), acting(key_agent, body.agent_id))
    give = partial(
        give_feedback,
        UnitsOfWork(api.pool, "api"),
        (app_id, body.user_id, memory_id),
        body.rating,
        body.reason,
        source=caller,
        now=utcnow(),
    )
    try:
        given = await postgres_or_503(asyncio.to_thread(give))
    except editing.MemoryRefused as exc:
        raise refused(exc) from None
    memory = await detail_after(
        api, (app_id, body.user_id, memory_id), given.memory, given.revisions
    )
    return models.FeedbackResponse(
        feedback=feedback_view(given.feedback),
        tally=models.FeedbackTally(**given.tally),
        memory=memory,
    )


def feedback_view(row: FeedbackRow) -> models.FeedbackView:
    """A feedback row as the API shows it (the turns it holds back stay inside)."""
    fields = {name: value for name, value in asdict(row).items() if name != "source_events"}
    fields["created_at"] = format_time(row.created_at)
    fields["restored_at"] = format_time(row.restored_at) if row.restored_at else None
    return models.FeedbackView(**fields)
