"""Long-term memory routes: search, the archive, memories, context, generate.

Searches (and so the context) run on the event loop through the asyncio
Postgres pool. The rest goes through the synchronous repositories in a thread
on the synchronous pool: writes that consolidate (which may call the LLM) in
one transaction holding the user's lock, like the extraction worker's.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, TypeVar

import structlog
from fastapi import FastAPI, Path, Query, Request, Response

from services.api.errors import ApiError, encode_or_4xx, postgres_or_503, published_or_503
from services.api.memory_models import (
    ArchiveSearchRequest,
    ArchiveSearchResponse,
    ContextRequest,
    ContextResponse,
    DeleteMemoryResponse,
    EpisodeView,
    GenerateRequest,
    Identifier,
    Kind,
    MemoryDetail,
    MemoryPage,
    MemoryView,
    Operation,
    RevisionView,
    ScopeName,
    SearchRequest,
    SearchResponse,
    WriteMemoryRequest,
    WriteMemoryResponse,
)
from services.api.models import json_response
from services.api.tenant import app_of
from shared.db import search as db_search
from shared.db.memories import MemoryRow, PageFilter, Revision
from shared.db.run import Steps, arun
from shared.db.unit_of_work import UnitOfWork, in_thread
from shared.events import MemoriesGenerate, format_time, utcnow
from shared.events.models import ContentEvent
from shared.llm.base import Candidate
from shared.memory.consolidate import Consolidator, Source, new_memory
from shared.memory.context import assemble
from shared.memory.search import Fusion, Ranked, Scope
from shared.session_buffer import SessionKey

T = TypeVar("T")
log = structlog.get_logger("agent_memory.api")


def _time(value: datetime | None) -> str | None:
    return format_time(value) if value is not None else None


def memory_fields(m: MemoryRow) -> dict[str, Any]:
    """A memory as `MemoryView` lays it out, as plain data."""
    return {
        **m.identity(),
        "text": m.text,
        "observed_at": format_time(m.observed_at),
        "created_at": format_time(m.created_at),
        "updated_at": format_time(m.updated_at),
        "deleted_at": _time(m.valid_to),
    }


def memory_view(m: MemoryRow) -> MemoryView:
    return MemoryView(**memory_fields(m))


@dataclass(frozen=True, slots=True)
class Found:
    """A memory a search ranked, and how."""

    memory: MemoryRow
    ranked: Ranked

    def fields(self) -> dict[str, Any]:
        """As `ScoredMemory` lays it out, as plain data."""
        return {
            **memory_fields(self.memory),
            "score": round(self.ranked.score, 6),
            "rankers": self.ranked.rankers,
        }


async def _embed(request: Request, texts: list[str]) -> list[list[float]]:
    return await request.app.state.resources.embedder.aembed_queries(texts)


async def search_memories(
    request: Request,
    scope: Scope,
    queries: list[str],
    k: int,
    kinds: list[str] | None = None,
    pinned: bool = False,
) -> tuple[list[Found], list[MemoryRow]]:
    """Fused top-k memories and, if asked, the scope's pinned rules: one statement."""
    fusion = Fusion.from_settings(request.app.state.resources.settings)
    embeddings = await _embed(request, queries)
    steps = db_search.search_memories(scope, queries, embeddings, k, fusion, kinds, pinned)
    found, rules = await _on_async_pool(request, steps)
    return [Found(memory, ranked) for memory, ranked in found], rules


def install_memory_routes(app: FastAPI) -> None:  # noqa: C901 - one route per nested function
    @app.post("/v1/memories:search", response_model=SearchResponse)
    async def memories_search(body: SearchRequest, request: Request) -> Response:
        scope = Scope(app_of(request), body.user_id, body.project_id or "")
        queries = [body.query]
        if body.decompose:
            llm = request.app.state.resources.llm
            queries = (await asyncio.to_thread(llm.decompose, body.query, "", "")).value or [
                body.query
            ]
        found, _ = await postgres_or_503(
            search_memories(request, scope, queries, body.k, body.kinds)
        )
        return json_response({"queries": queries, "memories": [f.fields() for f in found]})

    @app.post("/v1/archive:search", response_model=ArchiveSearchResponse)
    async def archive_search(body: ArchiveSearchRequest, request: Request) -> ArchiveSearchResponse:
        settings = request.app.state.resources.settings
        scope = Scope(app_of(request), body.user_id, body.project_id or "")
        embeddings = await _embed(request, [body.query])
        steps = db_search.search_episodes(
            scope,
            body.query,
            embeddings[0],
            body.k,
            Fusion.from_settings(settings),
            body.before,
            body.after,
        )
        rows = await postgres_or_503(_on_async_pool(request, steps))
        episodes = []
        for fields, ranked in rows:
            episodes.append(
                EpisodeView(
                    id=fields["id"],
                    turn_id=fields["turn_id"],
                    session_id=fields["session_id"],
                    project_id=fields["project_id"] or None,
                    created_at=format_time(fields["created_at"]),
                    text=fields["text"],
                    score=round(ranked.score, 6),
                    rankers=ranked.rankers,
                )
            )
        return ArchiveSearchResponse(episodes=episodes)

    @app.get("/v1/memories", response_model=MemoryPage)
    async def list_memories(
        request: Request,
        user_id: Annotated[Identifier, Query()],
        project_id: Annotated[str | None, Query()] = None,
        scope: Annotated[ScopeName | None, Query()] = None,
        kind: Annotated[Kind | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 100,
        cursor: Annotated[str | None, Query()] = None,
    ) -> MemoryPage:
        where = PageFilter(
            app_of(request),
            user_id,
            project_id,
            scope,
            kind,
            _decode_cursor(cursor) if cursor else None,
        )
        rows = await _read(request, lambda uow: uow.memories.page(where, limit + 1))
        next_cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            next_cursor = _encode_cursor(rows[-1])
        return MemoryPage(memories=[memory_view(m) for m in rows], next_cursor=next_cursor)

    @app.get("/v1/memories/{memory_id}", response_model=MemoryDetail)
    async def get_memory(
        memory_id: str, request: Request, user_id: Annotated[Identifier, Query()]
    ) -> MemoryDetail:
        _require_uuid(memory_id)
        app_id = app_of(request)

        def read(uow: UnitOfWork) -> tuple[MemoryRow | None, list[Revision]]:
            memory = uow.memories.get(app_id, user_id, memory_id)
            return memory, uow.memories.revisions(memory_id) if memory is not None else []

        memory, revisions = await _read(request, read)
        if memory is None:
            raise ApiError(404, "not_found", f"no memory {memory_id} for this user")
        return MemoryDetail(
            **memory_fields(memory),
            revisions=[
                RevisionView(
                    action=r.action,
                    old_text=r.old_text,
                    new_text=r.new_text,
                    event_id=r.event_id,
                    observed_at=format_time(r.observed_at),
                    applied=r.applied,
                    created_at=format_time(r.created_at),
                )
                for r in revisions
            ],
        )

    @app.post("/v1/memories", response_model=WriteMemoryResponse, status_code=201)
    async def write_memory(body: WriteMemoryRequest, request: Request) -> WriteMemoryResponse:
        resources = request.app.state.resources
        app_id = app_of(request)
        candidate = Candidate(
            body.entity_name, body.kind, body.scope, body.project_id or "", body.text
        )
        source = Source(
            app_id, body.user_id, body.project_id or "", body.session_id or "", utcnow(), None
        )
        vector = (await asyncio.to_thread(resources.embedder.embed, [body.text]))[0]

        def write(uow: UnitOfWork) -> Any:
            uow.memories.lock_user(app_id, body.user_id)
            consolidator = Consolidator(
                uow,
                resources.llm,
                Fusion.from_settings(resources.settings),
                resources.settings.consolidation_neighbours,
            )
            return consolidator.apply(
                new_memory(candidate, source, vector), source, consolidate=body.consolidate
            )

        applied = await postgres_or_503(in_thread(resources.pool, write, commit=True))
        # The rows come from the statements that wrote them (RETURNING): current.
        memory = memory_view(applied.memory) if applied.memory is not None else None
        return WriteMemoryResponse(action=applied.action, memory=memory)

    @app.delete("/v1/memories/{memory_id}", response_model=DeleteMemoryResponse)
    async def delete_memory(
        memory_id: str, request: Request, user_id: Annotated[Identifier, Query()]
    ) -> DeleteMemoryResponse:
        _require_uuid(memory_id)
        resources = request.app.state.resources
        app_id = app_of(request)

        def delete(uow: UnitOfWork) -> bool:
            uow.memories.lock_user(app_id, user_id)
            memory = uow.memories.get(app_id, user_id, memory_id)
            if memory is None or memory.valid_to is not None:
                return False
            uow.memories.retire(memory, utcnow(), None)
            return True

        if not await postgres_or_503(in_thread(resources.pool, delete, commit=True)):
            raise ApiError(404, "not_found", f"no live memory {memory_id} for this user")
        return DeleteMemoryResponse(memory_id=memory_id, deleted=True)

    @app.post("/v1/context", response_model=ContextResponse)
    async def context(body: ContextRequest, request: Request) -> Response:
        return json_response(await build_context(body, request))

    @app.post("/v1/memories:generate", response_model=Operation, status_code=202)
    async def generate(body: GenerateRequest, request: Request) -> Operation:
        resources = request.app.state.resources
        app_id = app_of(request)
        name = f"operations/generate-{uuid.uuid4()}"
        event = MemoriesGenerate(
            event_id=str(uuid.uuid4()),
            app=app_id,
            user_id=body.user_id,
            operation=name,
            created_at=utcnow(),
            events=tuple(ContentEvent(e.role, e.text) for e in body.events),
            project_id=body.scope.project_id or "",
            session_id=body.scope.session_id or "",
        )
        message = encode_or_4xx(event, resources.publisher.limits)
        await _write(
            request, lambda uow: uow.operations.start(name, app_id, body.user_id, "generate")
        )
        try:
            await published_or_503(
                resources.publisher.publish_message(message),
                resources.settings.publish_timeout_seconds,
                details={"operation": name},
            )
        except ApiError:
            # No worker will ever see it: the operation ends here, never pending.
            error = "Pub/Sub did not confirm the request; send it again"
            await _write(request, lambda uow: uow.operations.fail(name, error))
            raise
        if body.wait:
            return await _wait_operation(request, name, body.user_id)
        return Operation(name=name, done=False)

    @app.get("/v1/operations/{name:path}", response_model=Operation)
    async def get_operation(
        name: Annotated[Identifier, Path()],
        request: Request,
        user_id: Annotated[Identifier, Query()],
    ) -> Operation:
        operation = await _operation(request, name, user_id)
        if operation is None:
            raise ApiError(404, "not_found", f"no operation {name} for this user")
        return operation


async def _on_async_pool(request: Request, steps: Steps[T]) -> T:
    """A query written as `Steps`, on the event loop's pool."""
    async with request.app.state.apool.connection() as conn:
        return await arun(conn, steps)


async def _read(request: Request, work: Callable[[UnitOfWork], T]) -> T:
    """`work(uow)` on the synchronous pool, in a thread; an outage is a 503."""
    return await postgres_or_503(in_thread(request.app.state.resources.pool, work, commit=False))


async def _write(request: Request, work: Callable[[UnitOfWork], Any]) -> None:
    """`work(uow)` committed, like `_read`."""
    await postgres_or_503(in_thread(request.app.state.resources.pool, work, commit=True))


async def _operation(request: Request, name: str, user_id: str) -> Operation | None:
    if not name.startswith("operations/"):
        name = f"operations/{name}"
    app_id = app_of(request)
    row = await _read(request, lambda uow: uow.operations.get(name, app_id, user_id))
    if row is None:
        return None
    generated = (row.result or {}).get("generated_memories") if row.done else None
    return Operation(name=row.name, done=row.done, generated_memories=generated, error=row.error)


async def _wait_operation(request: Request, name: str, user_id: str) -> Operation:
    """Poll the operation until done or `AM_OPERATION_WAIT_SECONDS` pass."""
    settings = request.app.state.resources.settings
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.operation_wait_seconds
    delay = 0.02
    while True:
        operation = await _operation(request, name, user_id)
        assert operation is not None
        if operation.done or loop.time() >= deadline:
            return operation
        await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
        delay = min(delay * 2, 0.5)


def _require_uuid(value: str) -> None:
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


async def build_context(body: ContextRequest, request: Request) -> dict[str, Any]:
    """Session part (Valkey) and memory part (Postgres) at once; each may degrade.
    Laid out as `ContextResponse` (a test checks), as plain data."""
    settings = request.app.state.resources.settings
    buffer = request.app.state.buffer
    app_id = app_of(request)
    key = SessionKey(app_id, body.user_id, body.session_id)

    async def session_part() -> tuple[Any, Any]:
        view = await buffer.read(key)
        carried = None
        prev = body.prev_session_id or view.prev_session_id
        if prev:
            carried = await buffer.read_summary(SessionKey(app_id, body.user_id, prev))
        return view, carried

    scope = Scope(app_id, body.user_id, body.project_id or "", body.session_id)
    results = await asyncio.gather(
        session_part(),
        search_memories(request, scope, [body.query], body.k, pinned=True),
        return_exceptions=True,
    )
    degraded = []
    session, memories = results
    if isinstance(session, BaseException):
        log.warning("context without the session", error=repr(session))
        degraded.append("session")
        view, carried = None, None
    else:
        view, carried = session
    if isinstance(memories, BaseException):
        log.warning("context without long-term memories", error=repr(memories))
        degraded.append("memories")
        found, rules = [], []
    else:
        found, rules = memories
        # A rule both pinned and found goes into the instruction once, as a rule.
        pinned = {rule.id for rule in rules}
        found = [f for f in found if f.memory.id not in pinned]
    rolling = (
        {"session_id": body.session_id, "text": view.summary.text, "version": view.summary.version}
        if view is not None and view.summary.version
        else None
    )
    carried_view = (
        {
            "session_id": body.prev_session_id or view.prev_session_id,
            "text": carried.text,
            "version": carried.version,
        }
        if carried is not None and carried.version and view is not None
        else None
    )
    turns = list(view.turns)[-settings.context_recent_turns :] if view is not None else []
    built = assemble(
        rules=[m.text for m in rules],
        summary=rolling["text"] if rolling else "",
        carried=carried_view["text"] if carried_view else "",
        carried_from=carried_view["session_id"] if carried_view else "",
        turns=[(t.user, t.assistant) for t in turns],
        memories=[f"[{f.memory.scope} {f.memory.kind}] {f.memory.text}" for f in found],
        budget=body.token_budget or settings.context_token_budget,
    )
    return {
        "rolling_summary": rolling,
        "carried_summary": carried_view,
        "recent_turns": [
            {
                "turn_id": t.turn_id,
                "created_at": format_time(t.created_at),
                "user": t.user,
                "assistant": t.assistant,
            }
            for t in turns
        ],
        "pinned_rules": [memory_fields(m) for m in rules],
        "memories": [f.fields() for f in found],
        "system_instruction": built.text,
        "tokens": built.tokens,
        "omitted": built.omitted,
        "degraded": degraded,
    }
