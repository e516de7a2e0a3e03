"""Error responses: JSON naming the field, never a stack trace."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

import psycopg
import structlog
import valkey
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import Scope

from shared.bus.publisher import PublishQueueFull
from shared.errors import DependencyError, EventTooLarge, InvalidEvent
from shared.events import Event, Limits, OutgoingMessage, encode
from shared.llm.base import LLMError
from shared.metrics import count_store_error

log = structlog.get_logger("agent_memory.api")
T = TypeVar("T")

# The `Retry-After` of a 503: an outage or a full queue is seldom over sooner, and
# a client that waits less only adds to the load. A full Valkey needs an operator
# (or the summary worker's folds) to free memory: longer.
RETRY_AFTER_SECONDS = 1
VALKEY_FULL_RETRY_AFTER_SECONDS = 5


class ApiError(Exception):
    """An error with an HTTP status, a code and a message for the client."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        details: dict[str, str] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.details = details
        # Seconds for the `Retry-After` header; every 503 has one.
        self.retry_after = retry_after or (RETRY_AFTER_SECONDS if status == 503 else None)


async def valkey_or_503(call: Awaitable[T], message: str = "the session store is unavailable") -> T:
    """Await a Valkey call; an outage is a 503 with `message`."""
    try:
        return await call
    except valkey.ValkeyError as exc:
        log.warning("valkey call failed", error=repr(exc))
        raise ApiError(503, "valkey_unavailable", message) from None


async def postgres_or_503(call: Awaitable[T]) -> T:
    """Await a database call; an outage is a 503."""
    try:
        return await call
    except (psycopg.OperationalError, TimeoutError) as exc:
        log.warning("database call failed", error=repr(exc))
        raise ApiError(503, "postgres_unavailable", "the memory store is unavailable") from None
    except psycopg.errors.QueryCanceled as exc:
        log.warning("database call timed out", error=repr(exc))
        raise ApiError(503, "postgres_timeout", "the memory store did not answer in time") from None


async def published_or_503(
    publish: Callable[[], Future],
    timeout: float,
    message: str = "the request could not be published",
    details: Mapping[str, str] | None = None,
) -> Any:
    """Publish and wait for the confirmation; a failure or a timeout is a 503, and
    so is a publish queue that is full (backpressure: the caller retries after
    `Retry-After` rather than the API holding ever more in memory)."""
    try:
        future = publish()
    except PublishQueueFull as exc:
        log.warning("publish queue full", error=str(exc), **dict(details or {}))
        message = "too many requests wait for Pub/Sub; retry later"
        raise ApiError(503, "overloaded", message, details=dict(details or {}) or None) from None
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
    except Exception as exc:
        extra = dict(details or {})
        log.warning("publish failed", error=repr(exc), **extra)
        raise ApiError(503, "publish_failed", message, details=extra or None) from None


def encode_or_4xx(event: Event, limits: Limits) -> OutgoingMessage:
    """The event's message, or the API's error naming the field that is wrong: 413
    when the event would be larger than the bus takes, else 422."""
    try:
        return encode(event, limits)
    except EventTooLarge as exc:
        raise ApiError(413, "too_large", str(exc), field=exc.field) from None
    except InvalidEvent as exc:
        problem = str(exc).removeprefix(f"{event.EVENT_TYPE}: ")
        raise ApiError(422, "invalid_request", problem, field=problem.split(":", 1)[0]) from None


def error_body(
    code: str,
    message: str,
    fields: list[dict[str, str]] | None = None,
    details: dict[str, str] | None = None,
    request_id: str | None = None,
) -> dict:
    body: dict = {"error": {"code": code, "message": message}}
    if fields:
        body["error"]["fields"] = fields
    if details:
        body["error"].update(details)
    if request_id:
        body["error"]["request_id"] = request_id
    return body


def request_id_of(scope: Scope) -> str | None:
    """The id services.api.guard gave the request."""
    return scope.get("state", {}).get("request_id")


def _field_name(loc: tuple) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "body"


# A message that begins with the dotted path of the part it is about (`a.b[2].c: ...`).
_NAMED = re.compile(r"([a-z_][A-Za-z0-9_.\[\]-]*): (.+)", re.DOTALL)


def _clean(msg: str) -> str:
    return msg.removeprefix("Value error, ")


def install_error_handlers(app: FastAPI) -> None:
    """The API's error shape for every error a route raises. An unexpected one is
    answered by services.api.guard, which keeps the connection usable."""

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = []
        for error in exc.errors():
            name = _field_name(tuple(error.get("loc", ())))
            if error.get("type") == "json_invalid":
                name = "body"
            message = _clean(str(error.get("msg", "invalid")))
            if error.get("type") == "extra_forbidden":
                message = "is not a known field"
            named = _NAMED.match(message)
            if error.get("type") == "value_error" and named:
                # A rule over several fields names the one that is wrong.
                prefix = "" if name == "body" else f"{name}."
                name, message = prefix + named.group(1), named.group(2)
            fields.append({"field": name, "message": message})
        summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        request_id = request_id_of(request.scope)
        body = error_body("invalid_request", summary, fields, request_id=request_id)
        return JSONResponse(status_code=422, content=body)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        count_store_error(exc.__context__)  # a 503 raised for a store that failed
        # A field's message without its name in front, as a validation error's is.
        said = exc.message.removeprefix(f"{exc.field}: ")
        fields = [{"field": exc.field, "message": said}] if exc.field else None
        body = error_body(exc.code, exc.message, fields, exc.details, request_id_of(request.scope))
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
        return JSONResponse(status_code=exc.status, content=body, headers=headers)

    @app.exception_handler(DependencyError)
    async def _dependency(request: Request, exc: DependencyError) -> JSONResponse:
        # The LLM or embedding endpoint gave up (its retries ran out): not the request's fault.
        log.warning("dependency unavailable", dependency=exc.dependency, error=str(exc))
        message = f"the {exc.dependency} endpoint is unavailable; retry later"
        body = error_body(
            "dependency_unavailable", message, request_id=request_id_of(request.scope)
        )
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        return JSONResponse(status_code=503, content=body, headers=headers)

    @app.exception_handler(LLMError)
    async def _model(request: Request, exc: LLMError) -> JSONResponse:
        # The model answered, but never usably (its answers stayed invalid, or it refused
        # the request): the request was fine, the gateway's upstream was not. (Handlers
        # go by the class's MRO: an LLMUnavailable is the endpoint's outage, a 503.)
        if isinstance(exc, DependencyError):
            return await _dependency(request, exc)
        log.warning("model answer unusable", error=str(exc))
        body = error_body(
            "model_answer_invalid",
            f"the model gave no usable answer: {exc}",
            request_id=request_id_of(request.scope),
        )
        return JSONResponse(status_code=502, content=body)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        body = error_body("http_error", str(exc.detail), request_id=request_id_of(request.scope))
        headers = exc.headers
        if exc.status_code == 405:  # Starlette names only the first route's methods
            headers = {"Allow": ", ".join(_allowed_methods(request))}
        return JSONResponse(status_code=exc.status_code, content=body, headers=headers)


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route of this path takes."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if route.matches(request.scope)[0] != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)
