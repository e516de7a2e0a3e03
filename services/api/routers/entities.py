"""Entity routes: a user's entities, and one with its facts over time, its
memories and the turns that mention it. A project's entities are seen by a read
naming that project (with the user's global ones); another user's, app's or
project's entity is a 404, as a memory is."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BeforeValidator

from services.api.agents import KeyAgentDep, acting
from services.api.custom_methods import ResourceRoute
from services.api.deps import ApiDep, AppIdDep
from services.api.entity_models import (
    EntityDetail,
    EntityKind,
    EntityPage,
    EntityView,
    MergeRequest,
    MergeResponse,
    UnmergeRequest,
)
from services.api.errors import ApiError, postgres_or_503
from services.api.models import READ_AS, Identifier, query_integer
from services.api.routers.views import fact_fields
from services.api.time_models import AS_OF, ZonedTime
from shared.db import entity_merges, entity_reads
from shared.db.entity_reads import EntityQuery
from shared.db.unit_of_work import UnitOfWork, in_thread
from shared.events.models import format_time

router = APIRouter(route_class=ResourceRoute)


@router.get("/v1/entities", response_model=EntityPage)
async def list_entities(
    app_id: AppIdDep,
    key_agent: KeyAgentDep,
    api: ApiDep,
    user_id: Annotated[Identifier, Query()],
    project_id: Annotated[Identifier | None, Query()] = None,
    agent_id: Annotated[Identifier | None, Query(description=READ_AS)] = None,
    kind: Annotated[EntityKind | None, Query()] = None,
    as_of: Annotated[ZonedTime, Query(description=AS_OF)] = None,
    limit: Annotated[int, Query(ge=1, le=500), BeforeValidator(query_integer)] = 100,
    cursor: Annotated[str | None, Query()] = None,
) -> EntityPage:
    """The user's entities (with a project, that project's and the user's own), in
    name order: kinds, aliases, how many memories and turns mention each, when it
    was last seen; as an agent, those its memories and turns and the user's name."""
    after = _decode_cursor(cursor) if cursor else None
    agent = acting(key_agent, agent_id)
    q = EntityQuery(app_id, user_id, project_id or "", kind, as_of, agent)
    rows = await postgres_or_503(
        in_thread(
            api.pool,
            lambda uow: entity_reads.page(_conn(uow), q, after, limit + 1),
            commit=False,
        )
    )
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = _encode_cursor(rows[-1])  # by the entity's own name: the order's
    return EntityPage(entities=[EntityView(**_view(r)) for r in rows], next_cursor=next_cursor)


@router.get("/v1/entities/{entity_id}", response_model=EntityDetail)
async def get_entity(
    entity_id: str,
    app_id: AppIdDep,
    key_agent: KeyAgentDep,
    api: ApiDep,
    user_id: Annotated[Identifier, Query()],
    project_id: Annotated[Identifier | None, Query()] = None,
    agent_id: Annotated[Identifier | None, Query(description=READ_AS)] = None,
    as_of: Annotated[ZonedTime, Query(description=AS_OF)] = None,
) -> EntityDetail:
    """One entity: its aliases, its facts over time (with `as_of`, those true then),
    the memories and the latest turns that mention it; as an agent, of those it
    sees (its own and the user's)."""
    _require_uuid(entity_id)
    q = EntityQuery(app_id, user_id, project_id or "", None, as_of, acting(key_agent, agent_id))
    found = await postgres_or_503(
        in_thread(api.pool, lambda uow: entity_reads.detail(_conn(uow), q, entity_id), commit=False)
    )
    if found is None:
        raise ApiError(404, "not_found", f"no entity {entity_id} for this user")
    return EntityDetail(
        **_view(found),
        alias_sources=found["alias_sources"],
        facts=[fact_fields(f) for f in found["facts"]],
        memories_mentioning=[
            {**m, "observed_at": format_time(m["observed_at"])} for m in found["memory_rows"]
        ],
        turns_mentioning=[
            {**t, "created_at": format_time(t["created_at"])} for t in found["turn_rows"]
        ],
    )


@router.post("/v1/entities/{entity_id}:merge", response_model=MergeResponse)
async def merge_entity(
    entity_id: str, body: MergeRequest, app_id: AppIdDep, api: ApiDep
) -> MergeResponse:
    """The entity is the same thing as `into`: its mentions, facts and aliases move
    there, recorded so that `:unmerge` puts them back."""
    _require_uuid(entity_id)
    _require_uuid(body.into)

    def merge(uow: UnitOfWork) -> str:
        uow.memories.lock_user(app_id, body.user_id)
        project = body.project_id or ""
        return entity_merges.merge(_conn(uow), app_id, body.user_id, project, entity_id, body.into)

    return MergeResponse(merge_id=await _merging(api, merge), entity_id=entity_id)


@router.post("/v1/entities/{entity_id}:unmerge", response_model=MergeResponse)
async def unmerge_entity(
    entity_id: str, body: UnmergeRequest, app_id: AppIdDep, api: ApiDep
) -> MergeResponse:
    """Undo the entity's latest merge: each row it moved goes back."""
    _require_uuid(entity_id)

    def unmerge(uow: UnitOfWork) -> str:
        uow.memories.lock_user(app_id, body.user_id)
        return entity_merges.unmerge(
            _conn(uow), app_id, body.user_id, body.project_id or "", entity_id
        )

    return MergeResponse(merge_id=await _merging(api, unmerge), entity_id=entity_id)


async def _merging(api: Any, work: Any) -> str:
    try:
        return str(await postgres_or_503(in_thread(api.pool, work, commit=True)))
    except entity_merges.MergeRefused as exc:
        code = "not_found" if exc.status == 404 else "conflict"
        raise ApiError(exc.status, code, str(exc)) from None


def _require_uuid(value: str) -> None:
    try:
        uuid.UUID(value)
    except ValueError:
        raise ApiError(404, "not_found", f"no entity {value}") from None


def _conn(uow: UnitOfWork) -> Any:
    assert uow.conn is not None
    return uow.conn


def _view(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "name": row["name"],
        "kind": row["kind"],
        "project_id": row["project_id"] or None,
        "aliases": row["aliases"] or [],
        "memories": row["memories"],
        "turns": row["turns"],
        "first_seen": format_time(row["first_seen"]),
        "last_seen": format_time(row["last_seen"]),
    }


def _encode_cursor(row: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps([row["sort_name"], row["id"]]).encode()).decode()


def _decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        name, entity_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        uuid.UUID(entity_id)
        if not isinstance(name, str):
            raise TypeError
        return name, entity_id
    except (ValueError, TypeError):
        raise ApiError(
            422, "invalid_request", "cursor: not a cursor this API returned", field="cursor"
        ) from None
