"""What every request gets before any route sees it, and whatever a route does.

- A request id: the client's `X-Request-ID` when it is a short printable token,
  else a new one. It is sent back as `X-Request-ID`, put on every log line of
  the request, and named in the body of every error.
- A body size limit (`AM_MAX_REQUEST_BYTES`): a declared `Content-Length` over it
  is answered 413 at once, without reading the body; a body sent without one is
  cut off with 413 as soon as what was read passes the limit.
- An unexpected error answered 500 in the API's error shape. Answered here, the
  response is complete and the exception goes no further, so the server keeps
  the connection for the client's next request (Starlette's own last-resort
  handler re-raises, and the server then drops the connection).

Plain ASGI, like the other middleware, to cost nothing on the hot routes.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import orjson
import structlog
from starlette.types import Scope

from services.api.asgi import HttpMiddleware
from services.api.errors import error_body

log = structlog.get_logger("agent_memory.api")

REQUEST_ID_HEADER = b"x-request-id"
_CLIENT_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")


class _BodyTooLarge(Exception):
    pass


class Guard(HttpMiddleware):
    async def handle(self, scope: Scope, receive: Any, send: Any) -> None:
        request_id = _request_id(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        structlog.contextvars.bind_contextvars(request_id=request_id)
        limit = scope["app"].state.resources.settings.max_request_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _answer(send, request_id, 413, "too_large", _over(limit, declared), close=True)
            return
        exchange = _Exchange(receive, send, request_id, limit)
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except Exception as exc:
            if exchange.started and not exchange.too_large:
                raise  # part of the answer is out: nothing else can be said
            if not exchange.too_large:
                log.error("unhandled error", path=scope["path"], exc_info=exc)
        if exchange.too_large and not exchange.started:
            await _answer(send, request_id, 413, "too_large", _over(limit), close=True)
        elif not exchange.started:
            await _answer(send, request_id, 500, "internal", "internal error; see the server log")


class _Exchange:
    """One request's receive and send, as the app sees them: the body counted
    against the limit, and the request id added to the response's headers."""

    def __init__(self, receive: Any, send: Any, request_id: str, limit: int) -> None:
        self._receive = receive
        self._send = send
        self._id_header = (REQUEST_ID_HEADER, request_id.encode())
        self._limit = limit
        self._read = 0
        self.started = False  # the response has begun: its status is out
        self.too_large = False

    async def receive(self) -> dict:
        message = await self._receive()
        if message["type"] == "http.request":
            self._read += len(message.get("body", b""))
            if self._read > self._limit:
                self.too_large = True
                raise _BodyTooLarge
        return message

    async def send(self, message: dict) -> None:
        if self.too_large:
            return  # the route's own answer to a body it could not read
        if message["type"] == "http.response.start":
            self.started = True
            message["headers"] = [*(message.get("headers") or []), self._id_header]
        await self._send(message)


async def _answer(
    send: Any, request_id: str, status: int, code: str, message: str, close: bool = False
) -> None:
    body = orjson.dumps(error_body(code, message, request_id=request_id))
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (REQUEST_ID_HEADER, request_id.encode()),
    ]
    if close:  # the rest of the body is never read: this connection ends
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _request_id(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == REQUEST_ID_HEADER and _CLIENT_ID.fullmatch(value):
            return value.decode()
    return uuid.uuid4().hex


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed one itself
    return None


def _over(limit: int, size: int | None = None) -> str:
    size_text = f" ({size} bytes)" if size is not None else ""
    return f"body: the request body{size_text} is over the limit of {limit} bytes"
