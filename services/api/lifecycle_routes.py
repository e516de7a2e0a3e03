"""Deletion and compaction routes: forgetting by query, deleting a project or a
whole user (GDPR), and asking for a compaction.

Deletions run in one Postgres transaction under the user's advisory lock (the
extraction and compaction workers take the same lock), in a thread on the
synchronous pool. A user's deletion then removes every Valkey key of the user:
sessions and allow-once grants, after setting the tombstone that makes late
events of the user drop (see shared/session_buffer.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import structlog
import valkey
from fastapi import FastAPI, Path, Request
from pydantic import BaseModel

from services.api.errors import ApiError, postgres_or_503, published_or_503, valkey_or_503
from services.api.memory_models import Identifier, MemoryView, OptionalId, QueryText, _Request
from services.api.memory_routes import memory_view
from services.api.models import bounded_count
from services.api.tenant import app_of, is_admin
from shared.db.unit_of_work import in_thread
from shared.errors import InvalidEvent
from shared.events import utcnow
from shared.memory.deletion import delete_matching, delete_project, delete_user
from shared.session_buffer import (
    meta_key_of,
    project_marker,
    tombstone_key,
    user_keys_pattern,
)

T = TypeVar("T")
log = structlog.get_logger("agent_memory.api")

PathId = Annotated[Identifier, Path()]


class DeleteByQueryRequest(_Request):
    project_id: OptionalId = None
    query: QueryText


class DeleteByQueryResponse(BaseModel):
    deleted: list[MemoryView]


class DeletionCounts(BaseModel):
    user_id: str
    project_id: str | None = None
    deleted: dict[str, int]
    deleted_at: str | None = None


class CompactionRequest(_Request):
    project_id: OptionalId = None
    retention_days: bounded_count(1, 36500) | None = None
    batch_limit: bounded_count(1, 1000) | None = None


class CompactionAccepted(BaseModel):
    event_id: str
    user_id: str
    project_id: str | None
    retention_days: int
    batch_limit: int


def install_lifecycle_routes(app: FastAPI) -> None:
    @app.post("/v1/memories:delete", response_model=DeleteByQueryResponse)
    async def delete_by_query(
        body: DeleteByQueryRequest, request: Request
    ) -> DeleteByQueryResponse:
        """adk-memory's semantics: with a project, that project's memories only;
        without one, global memories only (project memories are untouched)."""
        retired = await _committed(
            request,
            delete_matching,
            app_of(request),
            body.user_id,
            body.project_id or "",
            body.query,
            utcnow(),
        )
        return DeleteByQueryResponse(deleted=[memory_view(m) for m in retired])

    @app.delete("/v1/users/{user_id}/projects/{project_id}", response_model=DeletionCounts)
    async def remove_project(
        user_id: PathId, project_id: PathId, request: Request
    ) -> DeletionCounts:
        app_id = app_of(request)
        counts = await _committed(request, delete_project, app_id, user_id, project_id)
        request.app.state.permissions.rules.clear()  # its rules are gone
        counts["valkey_keys"] = await valkey_or_503(
            _remove_project_sessions(request.app.state.buffer.client, app_id, user_id, project_id),
            "the project's stored memories were deleted but its sessions could not be "
            "removed from Valkey; repeat the request",
        )
        log.info("project deleted", user_id=user_id, project_id=project_id, deleted=counts)
        return DeletionCounts(user_id=user_id, project_id=project_id, deleted=counts)

    @app.delete("/v1/users/{user_id}", response_model=DeletionCounts)
    async def remove_user(user_id: PathId, request: Request) -> DeletionCounts:
        """GDPR: everything of the user in this app, and a tombstone so that the
        user's events created before now are dropped wherever they arrive later.
        Safe to repeat (a Valkey outage answers 503 after the Postgres part)."""
        app_id = app_of(request)
        counts, when = await _committed(request, delete_user, app_id, user_id, utcnow())
        request.app.state.permissions.rules.clear()  # their rules are gone
        client = request.app.state.buffer.client

        async def forget() -> int:
            await client.set(tombstone_key(app_id, user_id), repr(when.timestamp()))
            return await _remove_keys(client, user_keys_pattern(app_id, user_id))

        counts["valkey_keys"] = await valkey_or_503(
            forget(),
            "the user's stored memories were deleted but their sessions could not be "
            "removed from Valkey; repeat the request",
        )
        log.info("user deleted", user_id=user_id, deleted=counts)
        return DeletionCounts(user_id=user_id, deleted=counts, deleted_at=when.isoformat())

    @app.post("/v1/compactions", status_code=202, response_model=CompactionAccepted)
    async def request_compaction(body: CompactionRequest, request: Request) -> CompactionAccepted:
        if not is_admin(request):
            raise ApiError(403, "forbidden", "compaction needs an admin key of this app")
        from services.compaction_worker.requests import compaction_request

        settings = request.app.state.resources.settings
        try:
            event = compaction_request(
                app_of(request),
                body.user_id,
                body.project_id or "",
                body.retention_days or settings.compaction_retention_days,
                body.batch_limit or settings.compaction_batch_limit,
            )
        except InvalidEvent as exc:
            raise ApiError(422, "invalid_request", str(exc)) from None
        publisher = request.app.state.resources.publisher
        await published_or_503(publisher.publish(event), settings.publish_timeout_seconds)
        return CompactionAccepted(
            event_id=event.event_id,
            user_id=event.user_id,
            project_id=event.project_id or None,
            retention_days=event.retention_days,
            batch_limit=event.batch_limit,
        )


async def _committed(request: Request, work: Callable[..., T], *args: Any) -> T:
    """`work(uow, *args)` in one committed transaction on a worker thread (the
    deletions are blocking psycopg code); a database outage is a 503."""
    pool = request.app.state.resources.pool
    return await postgres_or_503(in_thread(pool, lambda uow: work(uow, *args), commit=True))


async def _remove_project_sessions(
    client: valkey.asyncio.Valkey, app_id: str, user_id: str, project_id: str
) -> int:
    """Remove every session of the user that had a turn of the project (its summary
    may hold the project's facts): all its keys, allow-once grants included. One
    SCAN of the user's keys, grouped by session (their shared hash tag); one
    pipeline asks each session's `meta` for the project's marker."""
    sessions: dict[str, list[str]] = {}  # meta key -> the session's keys
    async for key in client.scan_iter(match=user_keys_pattern(app_id, user_id), count=1000):
        name = key.decode() if isinstance(key, bytes) else key
        sessions.setdefault(meta_key_of(name), []).append(name)
    if not sessions:
        return 0
    metas = list(sessions)
    asks = client.pipeline(transaction=False)
    for meta in metas:
        asks.hexists(meta, project_marker(project_id))
    marked = [meta for meta, hit in zip(metas, await asks.execute(), strict=True) if hit]
    if not marked:
        return 0
    deletes = client.pipeline(transaction=False)
    for meta in marked:
        deletes.delete(*sessions[meta])  # one session's keys: one cluster slot
    return sum(await deletes.execute())


async def _remove_keys(client: valkey.asyncio.Valkey, pattern: str) -> int:
    removed = 0
    batch: list[bytes] = []
    async for key in client.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 500:
            removed += await client.delete(*batch)
            batch = []
    if batch:
        removed += await client.delete(*batch)
    return removed
