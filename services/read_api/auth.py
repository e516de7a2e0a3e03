"""Tenant authentication: every `/v1` route needs `Authorization: Bearer <key>`.

The key's app becomes the request's tenant (`request.state.app_id`); nothing
in a body or query chooses it. Plain ASGI (no BaseHTTPMiddleware) so it costs
one dictionary lookup per request once a key is known: verified keys are kept
for `AM_AUTH_CACHE_SECONDS`, so a revoked key stops working within that time.

Missing, unknown and revoked keys are all answered the same 401, and the
answer never says whether a key exists for some other app.
"""

from __future__ import annotations

import time
from typing import Any

import structlog
from fastapi.responses import JSONResponse
from psycopg import Error as PostgresError

from services.read_api.errors import error_body
from shared.api_keys import LOOKUP_SQL, key_hash
from shared.metrics import count_store_error

log = structlog.get_logger("agent_memory.api")

PROTECTED_PREFIX = "/v1/"
MAX_CACHED_KEYS = 10_000


class Authentication:
    def __init__(self, app: Any) -> None:
        self.app = app
        # sha256 of a key -> (app, admin, monotonic time until which it is trusted)
        self._known: dict[bytes, tuple[str, bool, float]] = {}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PROTECTED_PREFIX):
            await self.app(scope, receive, send)
            return
        api = scope["app"]
        settings = api.state.resources.settings
        state = scope.setdefault("state", {})
        if settings.auth_disabled:
            state["app_id"], state["admin"] = settings.default_app, True
            await self.app(scope, receive, send)
            return
        key = _bearer(scope)
        if key is None:
            await _deny(
                scope, receive, send, 401, "missing API key: send Authorization: Bearer <key>"
            )
            return
        digest = key_hash(key)
        known = self._known.get(digest)
        if known is None or known[2] < time.monotonic():
            try:
                found = await _lookup(api.state.apool, digest)
            except PostgresError as exc:  # a pool timeout is one too
                count_store_error(exc)
                log.warning("api key lookup failed", error=repr(exc))
                await _deny(
                    scope, receive, send, 503, "authentication is unavailable: Postgres is down"
                )
                return
            if found is None:
                self._known.pop(digest, None)
                await _deny(scope, receive, send, 401, "invalid or revoked API key")
                return
            if len(self._known) >= MAX_CACHED_KEYS:
                self._known.clear()
            known = (found[0], found[1], time.monotonic() + settings.auth_cache_seconds)
            self._known[digest] = known
        state["app_id"], state["admin"] = known[0], known[1]
        await self.app(scope, receive, send)


def _bearer(scope: dict) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            if scheme.lower() == "bearer" and token:
                return token
            return None
    return None


async def _lookup(pool: Any, digest: bytes) -> tuple[str, bool] | None:
    async with pool.connection() as conn:
        cursor = await conn.execute(LOOKUP_SQL, (digest,))
        row = await cursor.fetchone()
    return (row[0], bool(row[1])) if row else None


async def _deny(scope: dict, receive: Any, send: Any, status: int, message: str) -> None:
    code = "unauthenticated" if status == 401 else "unavailable"
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    response = JSONResponse(error_body(code, message), status_code=status, headers=headers)
    await response(scope, receive, send)
