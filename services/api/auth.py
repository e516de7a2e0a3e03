"""Tenant authentication: every `/v1` route, and the MCP tools at `/mcp`, need
`Authorization: Bearer <key>`.

The key's app becomes the request's tenant (`request.state.app_id`); nothing
in a body or query chooses it. Plain ASGI (no BaseHTTPMiddleware) so it costs
one dictionary lookup per request once a key is known: verified keys are kept
for `AM_AUTH_CACHE_SECONDS`, so a revoked key stops working within that time.

The console's pages (`/console`) take the key from the cookie its sign-in sets
(services.console.access) instead, with the same cache and refusals; a refusal
there is a redirect to the sign-in page.

Missing, unknown and revoked keys are all answered the same 401, and the
answer never says whether a key exists for some other app. A lookup bounded by
`AM_AUTH_LOOKUP_TIMEOUT_SECONDS` that fails (Postgres down or hanging) answers 503,
unless the key was verified within `AM_AUTH_STALE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import structlog
from fastapi.responses import JSONResponse
from psycopg import Error as PostgresError
from starlette.types import Scope

from services.api.asgi import HttpMiddleware
from services.api.errors import error_body, request_id_of
from services.console import access as console
from services.console import pages
from shared.api_keys import key_hash
from shared.db.api_keys import Holder, lookup
from shared.db.run import arun
from shared.metrics import count_store_error

log = structlog.get_logger("agent_memory.api")

T = TypeVar("T")
PROTECTED_PREFIX = "/v1/"
MCP_PATH = "/mcp"
MAX_CACHED_KEYS = 10_000


class Authentication(HttpMiddleware):
    def __init__(self, app: Any) -> None:
        super().__init__(app)
        # sha256 of a key -> what its last lookup found
        self._known: dict[bytes, _Known] = {}

    async def handle(self, scope: Scope, receive: Any, send: Any) -> None:
        path = scope["path"]
        on_console = console.needs_key(path)
        if not on_console and not _protected(path):
            await self.app(scope, receive, send)
            return
        deny = pages.deny if on_console else _deny
        api = scope["app"]
        settings = api.state.resources.settings
        state = scope.setdefault("state", {})
        if settings.auth_disabled:
            state["app_id"], state["admin"], state["key_id"] = settings.default_app, True, ""
            state["agent_id"] = ""
            await self.app(scope, receive, send)
            return
        try:
            key = console.key_of(scope) if on_console else _bearer(scope)
        except console.Refused as refused:  # the key's cookie came twice
            await deny(scope, receive, send, refused.status, refused.message)
            return
        if key is None:
            await deny(
                scope, receive, send, 401, "missing API key: send Authorization: Bearer <key>"
            )
            return
        digest = key_hash(key)
        known = self._known.get(digest)
        now = time.monotonic()
        if known is None or known.trusted_until < now:
            try:
                found = await within(
                    lookup_key(api.state.apool, digest), settings.auth_lookup_timeout_seconds
                )
            except (PostgresError, TimeoutError) as exc:  # a pool timeout is one too
                count_store_error(exc)
                if known is None or now - known.verified_at > settings.auth_stale_seconds:
                    log.warning("api key lookup failed", error=repr(exc))
                    await deny(
                        scope, receive, send, 503, "authentication is unavailable: Postgres is down"
                    )
                    return
                # Verified a short while ago, and no revocation can be written while
                # Postgres is down: go on, so recording turns outlives the outage.
                # The next lookup is tried after the usual cache time, not per request.
                log.info("api key lookup failed; trusting its last verification", error=repr(exc))
                known = replace(known, trusted_until=now + settings.auth_cache_seconds)
                self._known[digest] = known
            else:
                if found is None:
                    self._known.pop(digest, None)
                    await deny(scope, receive, send, 401, "invalid or revoked API key")
                    return
                if len(self._known) >= MAX_CACHED_KEYS:
                    self._known.clear()
                known = _Known(
                    found.app,
                    found.admin,
                    found.key_id,
                    now + settings.auth_cache_seconds,
                    now,
                    found.agent_id,
                )
                self._known[digest] = known
        if on_console and known.agent_id:
            # The console reads every agent's memories of a user: a whole app's key.
            message = "the console needs a key of the whole app, not one limited to an agent"
            await deny(scope, receive, send, 403, message)
            return
        state["app_id"], state["admin"], state["key_id"] = known.app, known.admin, known.key_id
        state["agent_id"] = known.agent_id
        await self.app(scope, receive, send)


@dataclass(frozen=True, slots=True)
class _Known:
    """A key found valid: its app, whether it is an admin key, its id, until when
    it is trusted without a lookup, when it was last looked up, and the agent it
    is limited to ('' none)."""

    app: str
    admin: bool
    key_id: str
    trusted_until: float
    verified_at: float
    agent_id: str = ""


async def within(call: Awaitable[T], seconds: float) -> T:
    """`call`'s result, or TimeoutError after `seconds` at the latest. Unlike
    `asyncio.wait_for` it does not wait for the call to wind down: a query on a
    server that hangs takes seconds more to cancel."""
    task = asyncio.ensure_future(call)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        task.add_done_callback(_consume)
        raise TimeoutError(f"no answer within {seconds} s")
    return task.result()


def _consume(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not report it as lost


def _protected(path: str) -> bool:
    return path.startswith(PROTECTED_PREFIX) or path == MCP_PATH or path.startswith(MCP_PATH + "/")


def _bearer(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            if scheme.lower() == "bearer" and token:
                return token
            return None
    return None


async def lookup_key(pool: Any, digest: bytes) -> Holder | None:
    """The live key whose SHA-256 is `digest`: its app, role and id."""
    async with pool.connection() as conn:
        return await arun(conn, lookup(digest))


async def _deny(scope: Scope, receive: Any, send: Any, status: int, message: str) -> None:
    code = "unauthenticated" if status == 401 else "unavailable"
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    body = error_body(code, message, request_id=request_id_of(scope))
    response = JSONResponse(body, status_code=status, headers=headers)
    await response(scope, receive, send)
