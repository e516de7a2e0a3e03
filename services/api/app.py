"""The API's app factory and routes.

Resources are opened in the lifespan and closed on shutdown. The tenant (`app`)
comes from the caller's API key (`auth.Authentication`), never from the body.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Annotated, Any

import structlog
import valkey
from fastapi import FastAPI, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from starlette.routing import Match

from services.api.auth import Authentication
from services.api.docs import install_docs
from services.api.errors import (
    ApiError,
    encode_or_4xx,
    install_error_handlers,
    published_or_503,
    valkey_or_503,
)
from services.api.guard import Guard
from services.api.health import readiness
from services.api.lifecycle_routes import install_lifecycle_routes
from services.api.memory_routes import install_memory_routes
from services.api.models import (
    DeleteSessionResponse,
    Identifier,
    RecordTurnRequest,
    RecordTurnResponse,
    SessionResponse,
    json_response,
)
from services.api.openapi import install_openapi
from services.api.permission_routes import install_permission_routes
from services.api.tenant import app_of
from shared.bootstrap import Resources, bootstrap, make_async_valkey
from shared.config import Settings, load_settings
from shared.db.pool import make_async_pool
from shared.events import (
    Limits,
    OutgoingMessage,
    ToolEvent,
    TurnRecorded,
    derived_event_id,
    format_time,
    utcnow,
)
from shared.metrics import API_REQUEST_SECONDS, count_store_error
from shared.permissions import Guardrail
from shared.session_buffer import (
    AsyncSessionBuffer,
    BufferedTurn,
    SessionKey,
    SessionView,
    Summary,
)
from shared.tracing import server_span

log = structlog.get_logger("agent_memory.api")


SessionPath = Annotated[Identifier, Path()]
MAX_FUTURE = timedelta(days=1)  # how far ahead a turn's created_at may be (clock skew)


def create_app(settings: Settings | None = None, **overrides: Any) -> FastAPI:
    """Build the API. `overrides` replace parts that `bootstrap` would build."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        resolved = settings or load_settings()
        # The session buffer is reached on the event loop (an asyncio client), so
        # `bootstrap` opens no blocking Valkey client for the API.
        async_client = make_async_valkey(resolved)
        try:
            resources = bootstrap(
                resolved,
                postgres=True,
                publisher=True,
                llm=True,
                embedder=True,
                block_when_full=False,  # a full publisher answers 503, never stalls the loop
                **overrides,
            )
        except BaseException:
            await async_client.aclose()
            raise
        app.state.resources = resources
        app.state.buffer = AsyncSessionBuffer(async_client, resolved.session_ttl_seconds)
        app.state.apool = await make_async_pool(resolved, max_size=16, name="agent-memory-api")
        # Its caches and matching threads live as long as this run of the app.
        app.state.permissions = Guardrail()
        if resolved.auth_disabled:
            log.warning(
                "authentication is disabled (AM_AUTH_DISABLED=true): every request is "
                "the app's without a key",
                app=resolved.default_app,
            )
        log.info("api started", auth=not resolved.auth_disabled)
        try:
            yield
        finally:
            app.state.permissions.close()
            if resources.embedder is not None:
                await resources.embedder.aclose()
            await app.state.apool.close()
            await async_client.aclose()
            resources.close()

    # The docs pages are install_docs's: served by the API itself, with no CDN.
    app = FastAPI(
        title="agent-memory", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None
    )
    install_docs(app)
    install_error_handlers(app)
    _routes(app)
    install_memory_routes(app)
    install_permission_routes(app)
    install_lifecycle_routes(app)
    install_openapi(app)
    app.add_middleware(Authentication)
    # Inside RequestLog, which starts each request's log context afresh.
    app.add_middleware(Guard)
    app.add_middleware(RequestLog)
    return app


class RequestLog:
    """One log line per request: method, path, status, duration. Plain ASGI, because
    Starlette's BaseHTTPMiddleware costs more CPU than the record-turn route itself.

    Every response also says how long the API took until it started answering, as
    `app;dur=<ms>` in its `Server-Timing` header (after any entry the route set), so
    a client can tell the API's time from the network's and its own."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        structlog.contextvars.clear_contextvars()
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                took = f"app;dur={(time.perf_counter() - started) * 1000:.3f}".encode()
                message["headers"] = _with_timing(message.get("headers") or [], took)
            await send(message)

        with server_span(scope) as span:
            try:
                await self.app(scope, receive, send_and_note)
            finally:
                seconds = time.perf_counter() - started
                route = _route_template(scope)
                # Known methods only: anyone may send any token, before authentication.
                method = scope["method"] if scope["method"] in _METHODS else "OTHER"
                API_REQUEST_SECONDS.labels(method, route, str(status)).observe(seconds)
                if span is not None:
                    span.update_name(f"{scope['method']} {route}")
                    span.set_attribute("http.response.status_code", status)
                log.info(
                    "request",
                    method=scope["method"],
                    path=scope["path"],
                    status=status,
                    duration_ms=round(seconds * 1000, 3),
                )


def _with_timing(headers: Iterable[tuple[bytes, bytes]], entry: bytes) -> list:
    """`headers` with `entry` added to their Server-Timing header (one header, so a
    client that keeps one value per name still sees every entry)."""
    headers = list(headers)  # ASGI allows any iterable of pairs
    for i, (name, value) in enumerate(headers):
        if name.lower() == b"server-timing":
            headers[i] = (name, value + b", " + entry)
            return headers
    return [*headers, (b"server-timing", entry)]


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _route_template(scope: dict) -> str:
    """The request's route as its template (`/v1/sessions/{session_id}`), never the
    raw path: one metric series per route, whatever the identifiers. A request
    refused before routing (a 401) is matched here; `unmatched` if none fits."""
    route = scope.get("route")
    if route is None:
        for candidate in scope["app"].router.routes:
            if candidate.matches(scope)[0] == Match.FULL:
                route = candidate
                break
    return getattr(route, "path", None) or "unmatched"


def _routes(app: FastAPI) -> None:
    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(request: Request) -> JSONResponse:
        state = request.app.state
        checks = await readiness(state.resources, state.buffer.client)
        down = sorted(name for name, ok in checks.items() if not ok)
        status = 503 if down else 200
        body = {"status": "unavailable" if down else "ready", "down": down}
        return JSONResponse(status_code=status, content=body)

    @app.post("/v1/sessions/{session_id}/turns", status_code=202)
    async def record_turn(
        session_id: SessionPath, body: RecordTurnRequest, request: Request, response: Response
    ) -> RecordTurnResponse:
        resources: Resources = request.app.state.resources
        event, message = _turn_event(app_of(request), session_id, body, resources.settings)
        started = time.perf_counter()
        buffered = await _buffer_turn(request.app.state.buffer, event)
        buffered_at = time.perf_counter()
        assert resources.publisher is not None
        # The publish may still land after our timeout; a retry with this turn_id is
        # the same event, so it can never make a second turn.
        await published_or_503(
            resources.publisher.publish_message(message),
            resources.settings.publish_timeout_seconds,
            "the turn could not be published; retry with the same turn_id",
            {"turn_id": event.turn_id, "event_id": event.event_id},
        )
        # How long the buffer append and the wait for Pub/Sub's confirmation took
        # (the W3C Server-Timing header; bench/buffer.py reads it).
        response.headers["server-timing"] = (
            f"buffer;dur={(buffered_at - started) * 1000:.3f}, "
            f"publish;dur={(time.perf_counter() - buffered_at) * 1000:.3f}"
        )
        return RecordTurnResponse(event_id=event.event_id, turn_id=event.turn_id, buffered=buffered)

    @app.get("/v1/sessions/{session_id}", response_model=SessionResponse)
    async def get_session(
        session_id: SessionPath, request: Request, user_id: Annotated[Identifier, Query()]
    ) -> Response:
        app_id = app_of(request)
        key = SessionKey(app_id, user_id, session_id)
        buffer: AsyncSessionBuffer = request.app.state.buffer

        async def read() -> tuple[SessionView, Summary | None]:
            view = await buffer.read(key, with_folds=True)
            carried = None
            if view.prev_session_id:
                previous = SessionKey(app_id, user_id, view.prev_session_id)
                carried = await buffer.read_summary(previous)
            return view, carried

        view, carried = await valkey_or_503(read())
        return json_response(_session_body(session_id, user_id, view, carried))

    @app.delete("/v1/sessions/{session_id}")
    async def delete_session(
        session_id: SessionPath, request: Request, user_id: Annotated[Identifier, Query()]
    ) -> DeleteSessionResponse:
        key = SessionKey(app_of(request), user_id, session_id)
        deleted = await valkey_or_503(request.app.state.buffer.delete(key))
        log.info("session deleted", session=session_id, keys=deleted)
        return DeleteSessionResponse(session_id=session_id, deleted_keys=deleted)


def _session_body(
    session_id: str, user_id: str, view: SessionView, carried: Summary | None
) -> dict[str, Any]:
    """The session view as `SessionResponse` lays it out, built as plain data and
    serialised once (the hottest read: models would cost more than the read itself;
    a test checks the result against the model)."""
    summary = view.summary
    return {
        "session_id": session_id,
        "user_id": user_id,
        "prev_session_id": view.prev_session_id or None,
        "summary": {
            "text": summary.text,
            "version": summary.version,
            "tokens": summary.tokens,
            "updated_at": format_time(summary.updated_at) if summary.updated_at else None,
        },
        "carried_summary": {
            "session_id": view.prev_session_id,
            "text": carried.text,
            "version": carried.version,
        }
        if carried and carried.version
        else None,
        "turns": [
            {
                "turn_id": t.turn_id,
                "event_id": t.event_id,
                "created_at": format_time(t.created_at),
                "project_id": t.project_id or None,
                "user": t.user,
                "assistant": t.assistant,
                "tokens": t.tokens,
            }
            for t in view.turns
        ],
        "turn_count": len(view.turns),
        "tokens": view.tokens,
        "turns_total": view.turns_total,
        "folded_turn_count": view.folded_total,
        "folds": [{"version": v, "turn_ids": ids} for v, ids in view.folds.items()],
    }


def _turn_event(
    app_id: str, session_id: str, body: RecordTurnRequest, settings: Settings
) -> tuple[TurnRecorded, OutgoingMessage]:
    """The turn's event and its encoded message, or a 422 naming the first field
    that is wrong (the encoder applies the schema, the text and the size rules: the
    same ones the workers apply when they decode)."""
    if not body.user.strip() and not body.assistant.strip():
        raise ApiError(
            422,
            "invalid_request",
            "user: empty, and so is assistant; a turn needs at least one of them",
            field="user",
        )
    now = utcnow()
    created_at = body.created_at or now
    if created_at - now > MAX_FUTURE:
        raise ApiError(
            422,
            "invalid_request",
            f"created_at: {format_time(created_at)} is more than a day in the future",
            field="created_at",
        )
    turn_id = body.turn_id or str(uuid.uuid4())
    event = TurnRecorded(
        # The same turn_id always yields the same event_id, so a client's retry is
        # one event for every consumer.
        event_id=derived_event_id(app_id, body.user_id, session_id, turn_id),
        app=app_id,
        user_id=body.user_id,
        session_id=session_id,
        project_id=body.project_id or "",
        prev_session_id=body.prev_session_id or "",
        turn_id=turn_id,
        created_at=created_at,
        user=body.user,
        assistant=body.assistant,
        tool_events=_tool_events(body),
    )
    return event, encode_or_4xx(event, Limits.from_settings(settings))


def _tool_events(body: RecordTurnRequest) -> tuple[ToolEvent, ...]:
    try:
        return tuple(ToolEvent(*t.as_texts()) for t in body.tool_events)
    except (RecursionError, ValueError, TypeError):
        message = "tool_events: arguments or output cannot be stored as JSON text (too deep?)"
        raise ApiError(422, "invalid_request", message, field="tool_events") from None


async def _buffer_turn(buffer: AsyncSessionBuffer, event: TurnRecorded) -> bool:
    """Append the turn to the session buffer (read-your-writes). False if Valkey is
    unreachable: the event is the durable record and the summary worker buffers it."""
    key = SessionKey(event.app, event.user_id, event.session_id)
    try:
        appended = await buffer.append(key, BufferedTurn.from_event(event), event.prev_session_id)
    except valkey.ValkeyError as exc:
        count_store_error(exc)
        log.warning("turn not buffered", event_id=event.event_id, error=repr(exc))
        return False
    if appended.dropped:
        # Nothing is published: the pipeline would drop it too.
        raise ApiError(
            410,
            "user_deleted",
            "created_at: the user was deleted after this turn was created; it is not recorded",
            field="created_at",
        )
    return True
