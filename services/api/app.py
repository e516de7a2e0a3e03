"""The API's app factory: its routers, middleware and lifespan.

Resources are opened in the lifespan and closed on shutdown; the routes reach
them through services.api.deps. The tenant (`app`) comes from the caller's API
key (`auth.Authentication`), never from the body.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import structlog
from fastapi import FastAPI
from starlette.routing import Match
from starlette.types import Scope

from services.api import deps
from services.api.asgi import HttpMiddleware
from services.api.auth import Authentication
from services.api.docs import install_docs
from services.api.errors import install_error_handlers
from services.api.guard import Guard
from services.api.mcp import install_mcp, run_mcp
from services.api.openapi import install_openapi
from services.api.routers import (
    admin,
    app_config,
    archive,
    context,
    entities,
    feedback,
    health,
    lifecycle,
    memories,
    operations,
    permissions,
    portability,
    profiles,
    sessions,
)
from services.api.unicode import LoneSurrogates
from services.console.app import install_console
from services.console.sources import close_sources
from shared.bootstrap import bootstrap, make_async_valkey
from shared.bus.changes import ChangeRelay
from shared.bus.reporting import start_reporting
from shared.config import Settings, load_settings
from shared.db.pool import make_async_pool
from shared.llm.accounting import set_worker
from shared.metrics import API_REQUEST_SECONDS
from shared.permissions import Guardrail
from shared.session_buffer import AsyncSessionBuffer
from shared.tracing import server_span

log = structlog.get_logger("agent_memory.api")


def create_app(settings: Settings | None = None, **overrides: Any) -> FastAPI:
    """Build the API. `overrides` replace parts that `bootstrap` would build."""
    # The docs pages are install_docs's: served by the API itself, with no CDN.
    app = FastAPI(
        title="agent-memory",
        version="0.1.0",
        lifespan=partial(_lifespan, settings=settings, overrides=overrides),
        docs_url=None,
        redoc_url=None,
    )
    install_docs(app)
    install_error_handlers(app)
    # In this order: it is the OpenAPI document's order of operations. The routes
    # join the app's own table: `include_router` would keep each router as a node
    # that every request walks, and these routers add no prefix or dependencies.
    for router in (
        health.router,
        sessions.router,
        memories.search_router,
        archive.router,
        memories.router,
        feedback.router,
        entities.router,
        context.router,
        operations.router,
        permissions.router,
        lifecycle.router,
        app_config.router,
        profiles.router,
        portability.router,
        admin.router,
    ):
        app.router.routes.extend(router.routes)
    install_mcp(app)
    install_console(app)
    install_openapi(app)
    # Innermost: only an authenticated request's body is read.
    app.add_middleware(LoneSurrogates)
    app.add_middleware(Authentication)
    # Inside RequestLog, which starts each request's log context afresh.
    app.add_middleware(Guard)
    app.add_middleware(RequestLog)
    return app


@asynccontextmanager
async def _lifespan(
    app: FastAPI, settings: Settings | None, overrides: dict[str, Any]
) -> AsyncIterator[None]:
    """Open what the routes use (services.api.deps); close it on shutdown, or
    as far as it got when opening fails."""
    resolved = settings or load_settings()
    set_worker("api")  # the model calls' metrics name this process
    async with AsyncExitStack() as opened:
        # The session buffer is reached on the event loop (an asyncio client), so
        # `bootstrap` opens no blocking Valkey client for the API.
        async_client = make_async_valkey(resolved)
        opened.push_async_callback(async_client.aclose)
        # What the API publishes counts toward each subscription's backlog
        # (shared.bus.reporting); stopped after the publisher, so its last publishes count.
        # It also samples the figures for the console's chart (shared.bus.figure_history).
        reporter = start_reporting(resolved, history=True)
        if reporter is not None:
            opened.callback(reporter.stop)
        resources = bootstrap(
            resolved,
            postgres=True,
            publisher=True,
            llm=True,
            embedder=True,
            block_when_full=False,  # a full publisher answers 503, never stalls the loop
            **overrides,
        )
        opened.callback(resources.close)
        apool = await make_async_pool(resolved, max_size=16, name="agent-memory-api")
        opened.push_async_callback(apool.close)
        if resources.embedder is not None:
            opened.push_async_callback(resources.embedder.aclose)
        # Its caches and matching threads live as long as this run of the app.
        guardrail = Guardrail()
        opened.callback(guardrail.close)
        buffer = AsyncSessionBuffer(async_client, resolved.session_ttl_seconds)
        api = deps.attach(app, resources, buffer, apool, guardrail)
        # The API's own memory writes publish their changes (stopped before the publisher).
        relay = ChangeRelay(resolved, api.pool, api.publisher)
        relay.start()
        opened.callback(relay.stop)
        opened.callback(close_sources, app.state)
        if resolved.auth_disabled:
            log.warning(
                "authentication is disabled (AM_AUTH_DISABLED=true): every request is "
                "the app's without a key",
                app=resolved.default_app,
            )
        await opened.enter_async_context(run_mcp(app))
        log.info("api started", auth=not resolved.auth_disabled)
        yield


class RequestLog(HttpMiddleware):
    """One log line per request: method, path, status, duration.

    Every response also says how long the API took until it started answering, as
    `app;dur=<ms>` in its `Server-Timing` header (after any entry the route set), so
    a client can tell the API's time from the network's and its own."""

    async def handle(self, scope: Scope, receive: Any, send: Any) -> None:
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


def _route_template(scope: Scope) -> str:
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
