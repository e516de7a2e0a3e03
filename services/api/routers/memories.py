"""Long-term memory routes: search the memories, list, read, write and delete one.

The search runs on the event loop through the asyncio Postgres pool. The rest
goes through the synchronous repositories on a worker thread: a write is decided
(which may call the LLM) with no transaction open, then written in one short
transaction holding the user's lock, like the extraction worker's
(shared.memory.decisions.write_memory).

`search_router` holds `memories:search` alone: it comes before the archive's
search in the OpenAPI document, and the other memory routes after it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, NamedTuple

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BeforeValidator

from services.api import filter_models
from services.api.agents import KeyAgentDep, acting
from services.api.custom_methods import ResourceRoute
from services.api.deps import Api, ApiDep, AppIdDep, CallerDep
from services.api.errors import ApiError, postgres_or_503
from services.api.memory_models import (
    DeleteMemoryResponse,
    Identifier,
    Kind,
    MemoryDetail,
    MemoryPage,
    ScopeName,
    SearchRequest,
    SearchResponse,
)
from services.api.models import READ_AS, json_response, query_integer
from services.api.routers.views import found_fields, memory_detail, memory_view
from services.api.time_models import (
    AS_OF,
    OBSERVED_AFTER,
    OBSERVED_BEFORE,
    ZonedTime,
    empty_range,
    time_filter,
)
from services.api.write_models import (
    EditMemoryRequest,
    RollbackRequest,
    WriteMemoryRequest,
    WriteMemoryResponse,
)
from shared.db import entity_reads
from shared.db.entity_reads import MemoryLinks
from shared.db.memory_rows import MemoryRow, PageFilter, Revision
from shared.db.planned_write import StalePlan
from shared.db.unit_of_work import UnitOfWork, UnitsOfWork, in_thread
from shared.events import utcnow
from shared.llm.base import Candidate
from shared.memory import decisions, deletion, editing, rollback
from shared.memory.agents import visible_to
from shared.memory.consolidate import Source
from shared.memory.ranking import Scope
from shared.memory.search import sub_queries

search_router = APIRouter()
router = APIRouter(route_class=ResourceRoute)


@search_router.post("/v1/memories:search", response_model=SearchResponse)
async def memories_search(
    body: SearchRequest, app_id: AppIdDep, key_agent: KeyAgentDep, api: ApiDep
) -> Response:
    agent = acting(key_agent, body.agent_id)
    scope = Scope(app_id, body.user_id, body.project_id or "", time=body.time(), agent_id=agent)
    queries = await sub_queries(api.llm, body.query) if body.decompose else [body.query]
    matching = filter_models.read(body.filter)
    found, _ = await postgres_or_503(
        api.search.memories(scope, queries, body.k, body.kinds, matching=matching)
    )
    # The fast path of services.api.models.json_response.
    return json_response({"queries": queries, "memories": [found_fields(f) for f in found]})


@router.get("/v1/memories", response_model=MemoryPage)
async def list_memories(
    app_id: AppIdDep,
    key_agent: KeyAgentDep,
    api: ApiDep,
    user_id: Annotated[Identifier, Query()],
    project_id: Annotated[Identifier | None, Query()] = None,
    agent_id: Annotated[Identifier | None, Query(description=READ_AS)] = None,
    scope: Annotated[ScopeName | None, Query()] = None,
    kind: Annotated[Kind | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500), BeforeValidator(query_integer)] = 100,
    cursor: Annotated[str | None, Query()] = None,
    topic: Annotated[str | None, Query(pattern="^[a-z][a-z0-9_]{0,39}$")] = None,
    as_of: Annotated[ZonedTime, Query(description=AS_OF)] = None,
    observed_after: Annotated[ZonedTime, Query(description=OBSERVED_AFTER)] = None,
    observed_before: Annotated[ZonedTime, Query(description=OBSERVED_BEFORE)] = None,
    filter: Annotated[
        str | None,
        Query(description="a filter expression (the `Filter` schema) as JSON text"),
    ] = None,
) -> MemoryPage:
    after = _decode_cursor(cursor) if cursor else None
    if empty_range(observed_after, observed_before):
        message = "observed_before: must be after observed_after (the range is empty)"
        raise ApiError(422, "invalid_request", message, field="observed_before")
    time = time_filter(as_of, observed_after, observed_before)
    matching = filter_models.read_query(filter)
    agents = visible_to(acting(key_agent, agent_id))
    where = PageFilter(
        app_id, user_id, project_id, scope, kind, after, topic, time, matching, agents
    )
    # One more than the page: whether there is a next one.
    rows = await postgres_or_503(
        in_thread(api.pool, lambda uow: uow.memories.page(where, limit + 1), commit=False)
    )
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = _encode_cursor(rows[-1])
    return MemoryPage(memories=[memory_view(m) for m in rows], next_cursor=next_cursor)


class MemoryAsAgent(NamedTuple):
    """The memory a route names (app, user, id: `target`), and the agent the request
    acts as (`agent`)."""

    target: tuple[str, str, str]
    agent: str


async def memory_as_agent(
    memory_id: str,
    app_id: AppIdDep,
    key_agent: KeyAgentDep,
    user_id: Annotated[Identifier, Query()],
    agent_id: Annotated[Identifier | None, Query(description=READ_AS)] = None,
) -> MemoryAsAgent:
    """The memory of the path and the query's user, as the acting agent (404 for an
    id that is not a UUID)."""
    require_uuid(memory_id)
    return MemoryAsAgent((app_id, user_id, memory_id), acting(key_agent, agent_id))


MemoryAsAgentDep = Annotated[MemoryAsAgent, Depends(memory_as_agent)]


@router.get("/v1/memories/{memory_id}", response_model=MemoryDetail)
async def get_memory(named: MemoryAsAgentDep, api: ApiDep) -> MemoryDetail:
    memory_id = named.target[2]

    def read(uow: UnitOfWork) -> tuple[MemoryRow | None, list[Revision], MemoryLinks]:
        memory = uow.memories.get(*named.target)
        if memory is None:
            return None, [], MemoryLinks([], [])
        links = uow.run(entity_reads.of_memory(*named.target))
        return memory, uow.memories.revisions(memory_id), links

    memory, revisions, links = await postgres_or_503(in_thread(api.pool, read, commit=False))
    if memory is None or memory.agent_id not in visible_to(named.agent):
        raise ApiError(404, "not_found", f"no memory {memory_id} for this user")
    return memory_detail(memory, revisions, links)


@router.post("/v1/memories", response_model=WriteMemoryResponse, status_code=201)
async def write_memory(
    body: WriteMemoryRequest,
    app_id: AppIdDep,
    key_agent: KeyAgentDep,
    api: ApiDep,
) -> WriteMemoryResponse:
    project_id = body.project_id or ""
    candidate = Candidate(body.entity_name, body.kind, body.scope, project_id, body.text)
    source = Source(
        app_id,
        body.user_id,
        project_id,
        body.session_id or "",
        utcnow(),
        None,
        body.metadata,
        acting(key_agent, body.agent_id),
    )
    try:
        applied = await postgres_or_503(
            asyncio.to_thread(
                decisions.write_memory,
                UnitsOfWork(api.pool, "api"),
                api.embedder,
                api.llm,
                api.settings,
                candidate,
                source,
                body.consolidate,
                body.expiry(),
            )
        )
    except StalePlan as exc:
        raise ApiError(409, "conflict", f"{exc}") from None
    # The rows come from the statements that wrote them (RETURNING): current.
    memory = memory_view(applied.memory) if applied.memory is not None else None
    return WriteMemoryResponse(action=applied.action, memory=memory)


@router.delete("/v1/memories/{memory_id}", response_model=DeleteMemoryResponse)
async def delete_memory(named: MemoryAsAgentDep, api: ApiDep) -> DeleteMemoryResponse:
    await require_visible(api, *named)
    app_id, user_id, memory_id = named.target
    deleted = await postgres_or_503(
        in_thread(
            api.pool,
            lambda uow: deletion.delete_memory(uow, app_id, user_id, memory_id, utcnow()),
            commit=True,
        )
    )
    if not deleted:
        raise ApiError(404, "not_found", f"no live memory {memory_id} for this user")
    return DeleteMemoryResponse(memory_id=memory_id, deleted=True)


@router.patch("/v1/memories/{memory_id}", response_model=MemoryDetail)
async def edit_memory(
    memory_id: str,
    body: EditMemoryRequest,
    app_id: AppIdDep,
    caller: CallerDep,
    key_agent: KeyAgentDep,
    api: ApiDep,
) -> MemoryDetail:
    """Change the fields the body names, as one `UPDATED` revision whose source is
    the caller (re-embedded when the text changes); nothing changed, nothing written."""
    target = (app_id, body.user_id, memory_id)
    await require_visible(api, target, acting(key_agent, body.agent_id))
    return await _edited(api, editing.edit_memory, target, body.changes(), caller)


@router.post("/v1/memories/{memory_id}:rollback", response_model=MemoryDetail)
async def rollback_memory(
    memory_id: str,
    body: RollbackRequest,
    app_id: AppIdDep,
    caller: CallerDep,
    key_agent: KeyAgentDep,
    api: ApiDep,
) -> MemoryDetail:
    """Make revision N current again, as a new revision (the history stays); a
    memory that `wrong` feedback retired is live again."""
    target = (app_id, body.user_id, memory_id)
    await require_visible(api, target, acting(key_agent, body.agent_id))
    return await _edited(api, rollback.rollback, target, body.revision, caller)


async def _edited(
    api: Api,
    change: Callable[..., editing.Edited],
    target: tuple[str, str, str],
    what: Any,
    caller: str,
) -> MemoryDetail:
    """`change(...)` of the memory `target` (app, user, id) on a worker thread, made
    by `caller`; its refusals as the API's errors."""
    require_uuid(target[2])
    units = UnitsOfWork(api.pool, "api")
    try:
        done = await postgres_or_503(
            asyncio.to_thread(
                change,
                units,
                api.embedder,
                *target,
                what,
                source=caller,
                now=utcnow(),
                attempts=api.settings.write_attempts,
            )
        )
    except editing.MemoryRefused as exc:
        raise refused(exc) from None
    except StalePlan as exc:
        raise ApiError(409, "conflict", f"{exc}") from None
    return await detail_after(api, target, done.memory, done.revisions)


async def detail_after(
    api: Api, target: tuple[str, str, str], memory: MemoryRow, revisions: list[Revision]
) -> MemoryDetail:
    """The detail of the memory `target` (app, user, id) as a change left it, with
    the entities and facts its text names now (read after the change's commit)."""
    links = await postgres_or_503(
        in_thread(api.pool, lambda uow: uow.run(entity_reads.of_memory(*target)), commit=False)
    )
    return memory_detail(memory, revisions, links)


def refused(exc: editing.MemoryRefused) -> ApiError:
    """A memory change's refusal as the API's error."""
    code = {404: "not_found", 409: "conflict", 422: "invalid_request"}[exc.status]
    message = f"{exc.field}: {exc}" if exc.field else f"{exc}"
    return ApiError(exc.status, code, message, field=exc.field)


async def require_visible(api: Api, target: tuple[str, str, str], agent: str) -> None:
    """404 unless the memory `target` (app, user, id) is one `agent` reads (its own or
    the user's): an agent changes only what it sees. A memory never changes owner,
    so what this finds holds for the change that follows."""
    require_uuid(target[2])
    memory = await postgres_or_503(
        in_thread(api.pool, lambda uow: uow.memories.get(*target), commit=False)
    )
    if memory is not None and memory.agent_id not in visible_to(agent):
        raise ApiError(404, "not_found", f"no memory {target[2]} for this user")


def require_uuid(value: str) -> None:
    try:
        uuid.UUID(value)
    except ValueError:
        raise ApiError(404, "not_found", f"no memory {value}") from None


def _encode_cursor(memory: MemoryRow) -> str:
    raw = json.dumps([memory.created_at.isoformat(), memory.id])
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        created, memory_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        uuid.UUID(memory_id)
        return datetime.fromisoformat(created), memory_id
    except (ValueError, TypeError):
        raise ApiError(
            422, "invalid_request", "cursor: not a cursor this API returned", field="cursor"
        ) from None
