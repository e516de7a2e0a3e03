"""The MCP tools over streamable HTTP at `/mcp`, served by the API itself.

`/mcp` is behind the same authentication as `/v1` (`auth.Authentication`). Each
tool calls this same app in process (`httpx.ASGITransport`) with the caller's
own `Authorization` header, so the tools are scoped to the key's app and every
API rule (validation, tenancy, errors) applies as it does over `/v1`.

Stateless and answered as JSON: no MCP session lives in one replica's memory,
so any replica behind a load balancer can answer any request. The route is a
plain Starlette one: the OpenAPI document describes `/v1` only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route
from starlette.types import Scope

from services.mcp_server.tools import Defaults, build_server
from shared.client import AsyncMemoryClient

PATH = "/mcp"
# Any host name: the API key is what protects `/mcp`, as it does `/v1` (the SDK's
# DNS-rebinding check would refuse every host but localhost).
_ANY_HOST = TransportSecuritySettings(enable_dns_rebinding_protection=False)


def install_mcp(app: FastAPI) -> None:
    app.router.routes.append(Route(PATH, endpoint=_Endpoint(), include_in_schema=False))


@asynccontextmanager
async def run_mcp(app: FastAPI) -> AsyncIterator[None]:
    """The MCP session manager, for the lifespan of the app. Built per run: the
    SDK's manager runs once only, and a test may start the same app twice."""
    server = build_server(_in_process, Defaults(), version=app.version)
    # Only for its session manager: the route is this app's own, behind its middleware.
    server.streamable_http_app(
        stateless_http=True, json_response=True, transport_security=_ANY_HOST
    )
    manager = server.session_manager
    app.state.mcp_manager = manager
    async with manager.run():
        yield


class _Endpoint:
    """ASGI app of the route: the running session manager answers."""

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        await scope["app"].state.mcp_manager.handle_request(scope, receive, send)


@asynccontextmanager
async def _in_process(ctx: Context) -> AsyncIterator[AsyncMemoryClient]:
    request = ctx.request_context.request
    assert request is not None  # the streamable HTTP transport hands each call its request
    scheme, _, key = (request.headers.get("authorization") or "").partition(" ")
    transport = httpx.ASGITransport(app=request.app)
    # No retries: the MCP client sees the error and decides, as over `/v1`.
    async with AsyncMemoryClient(
        "http://agent-memory.internal",
        api_key=key.strip() if scheme.lower() == "bearer" else None,
        retries=0,
        transport=transport,
    ) as client:
        yield client
