"""Deletion routes: forgetting memories by query, deleting a project or a whole
user (GDPR).

The Postgres part runs in one transaction under the user's advisory lock (the
extraction and compaction workers take the same lock), in a thread on the
synchronous pool (shared.memory.deletion). A project's or a user's deletion then
removes their sessions from Valkey; a user's first sets the tombstone that makes
late events of the user drop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

import structlog
from fastapi import APIRouter, Path
from psycopg_pool import ConnectionPool

from services.api import filter_models
from services.api.agents import KeyAgentDep, acting
from services.api.custom_methods import ResourceRoute
from services.api.deps import ApiDep, AppIdDep
from services.api.errors import postgres_or_503, valkey_or_503
from services.api.memory_models import (
    DeleteByQueryRequest,
    DeleteByQueryResponse,
    DeletionCounts,
    Identifier,
)
from services.api.routers.views import memory_view
from shared.db.unit_of_work import UnitOfWork, in_thread
from shared.events import utcnow
from shared.memory.agents import visible_to
from shared.memory.deletion import (
    delete_matching,
    delete_project,
    delete_user,
    forget_project,
    forget_user,
)

T = TypeVar("T")
log = structlog.get_logger("agent_memory.api")
router = APIRouter(route_class=ResourceRoute)

PathId = Annotated[Identifier, Path()]


@router.post("/v1/memories:delete", response_model=DeleteByQueryResponse)
async def delete_by_query(
    body: DeleteByQueryRequest, app_id: AppIdDep, key_agent: KeyAgentDep, api: ApiDep
) -> DeleteByQueryResponse:
    """adk-memory's semantics: with a project, that project's memories only;
    without one, global memories only (project memories are untouched); of what
    the agent reads (its own and the user's; no agent: the user's only)."""
    project_id, now = body.project_id or "", utcnow()
    agents = visible_to(acting(key_agent, body.agent_id))
    admits = filter_models.read(body.filter)
    retired = await _committed(
        api.pool,
        lambda uow: delete_matching(
            uow, app_id, body.user_id, project_id, body.query, now, admits, agents
        ),
    )
    return DeleteByQueryResponse(deleted=[memory_view(m) for m in retired])


@router.delete("/v1/users/{user_id}/projects/{project_id}", response_model=DeletionCounts)
async def remove_project(
    user_id: PathId,
    project_id: PathId,
    app_id: AppIdDep,
    api: ApiDep,
) -> DeletionCounts:
    counts = await _committed(
        api.pool, lambda uow: delete_project(uow, app_id, user_id, project_id)
    )
    api.guardrail.rules.clear()  # its rules are gone
    counts["valkey_keys"] = await valkey_or_503(
        forget_project(api.valkey, app_id, user_id, project_id),
        "the project's stored memories were deleted but its sessions could not be "
        "removed from Valkey; repeat the request",
    )
    log.info("project deleted", user_id=user_id, project_id=project_id, deleted=counts)
    return DeletionCounts(user_id=user_id, project_id=project_id, deleted=counts)


@router.delete("/v1/users/{user_id}", response_model=DeletionCounts)
async def remove_user(
    user_id: PathId,
    app_id: AppIdDep,
    api: ApiDep,
) -> DeletionCounts:
    """GDPR: everything of the user in this app, and a tombstone so that the
    user's events created before now are dropped wherever they arrive later.
    Safe to repeat (a Valkey outage answers 503 after the Postgres part)."""
    now = utcnow()
    counts, when = await _committed(api.pool, lambda uow: delete_user(uow, app_id, user_id, now))
    api.guardrail.rules.clear()  # their rules are gone
    counts["valkey_keys"] = await valkey_or_503(
        forget_user(api.valkey, app_id, user_id, when),
        "the user's stored memories were deleted but their sessions could not be "
        "removed from Valkey; repeat the request",
    )
    log.info("user deleted", user_id=user_id, deleted=counts)
    return DeletionCounts(user_id=user_id, deleted=counts, deleted_at=when.isoformat())


async def _committed(pool: ConnectionPool, work: Callable[[UnitOfWork], T]) -> T:
    """`work(uow)` in one committed transaction on a worker thread (the deletions
    are blocking psycopg code); a database outage is a 503."""
    return await postgres_or_503(in_thread(pool, work, commit=True))
