"""A JSON body with a lone UTF-16 surrogate (`"\\ud800"`) is a 422 naming where it
is, on every route: valid JSON, but no UTF-8, so Postgres, Valkey and Pub/Sub
could not store it, and a field the models do not check would reach them.

Plain ASGI, before the routes: the body (already bounded by services.api.guard)
is read once and handed on unchanged. orjson refuses lone surrogates, so the
usual body costs one fast parse; only a body it refuses is parsed again, by the
standard library (which keeps them), to name the field.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from starlette.types import Scope

from services.api.asgi import HttpMiddleware
from services.api.errors import error_body, request_id_of

_METHODS = frozenset({"POST", "PUT", "PATCH"})
MESSAGE = "must be valid Unicode (it contains a lone surrogate)"


class LoneSurrogates(HttpMiddleware):
    def wants(self, scope: Scope) -> bool:
        return scope["method"] in _METHODS and _json(scope)

    async def handle(self, scope: Scope, receive: Any, send: Any) -> None:
        messages = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        field = _lone_surrogate(body)
        if field is not None:
            await _refuse(scope, receive, send, field)
            return
        pending = list(messages)

        async def replay() -> dict:
            return pending.pop(0) if pending else await receive()

        await self.app(scope, replay, send)


def _json(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.split(b";")[0].strip().lower() == b"application/json"
    return False


def _lone_surrogate(body: bytes) -> str | None:
    """Where the body holds a lone surrogate (a dotted path), or None."""
    try:
        orjson.loads(body)
        return None
    except orjson.JSONDecodeError:
        pass
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None  # not JSON: the route says so
    return _find(value, "")


def _find(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        return (path or "body") if not _encodes(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if not _encodes(key):
                return path or "body"
            found = _find(item, here)
            if found is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _find(item, f"{path}.{index}" if path else str(index))
            if found is not None:
                return found
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def _refuse(scope: Scope, receive: Any, send: Any, field: str) -> None:
    body = error_body(
        "invalid_request",
        f"{field}: {MESSAGE}",
        fields=[{"field": field, "message": MESSAGE}],
        request_id=request_id_of(scope),
    )
    payload = orjson.dumps(body)
    await send(
        {
            "type": "http.response.start",
            "status": 422,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
