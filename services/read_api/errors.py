"""Error responses: JSON naming the field, never a stack trace."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

import psycopg
import structlog
import valkey
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.errors import DependencyError, EventTooLarge, InvalidEvent
from shared.events import Event, Limits, OutgoingMessage, encode
from shared.metrics import count_store_error

log = structlog.get_logger("agent_memory.api")
T = TypeVar("T")


class ApiError(Exception):
    """An error with an HTTP status, a code and a message for the client."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        details: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.details = details


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
    future: Future,
    timeout: float,
    message: str = "the request could not be published",
    details: Mapping[str, str] | None = None,
) -> Any:
    """Wait for a publish's confirmation; a failure or a timeout is a 503."""
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
) -> dict:
    body: dict = {"error": {"code": code, "message": message}}
    if fields:
        body["error"]["fields"] = fields
    if details:
        body["error"].update(details)
    return body


def _field_name(loc: tuple) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def _clean(msg: str) -> str:
    return msg.removeprefix("Value error, ")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = []
        for error in exc.errors():
            name = _field_name(tuple(error.get("loc", ())))
            if error.get("type") == "json_invalid":
                name = "body"
            message = _clean(str(error.get("msg", "invalid")))
            if error.get("type") == "extra_forbidden":
                message = "is not a known field"
            fields.append({"field": name, "message": message})
        summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        return JSONResponse(status_code=422, content=error_body("invalid_request", summary, fields))

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        count_store_error(exc.__context__)  # a 503 raised for a store that failed
        fields = [{"field": exc.field, "message": exc.message}] if exc.field else None
        return JSONResponse(
            status_code=exc.status,
            content=error_body(exc.code, exc.message, fields, exc.details),
        )

    @app.exception_handler(DependencyError)
    async def _dependency(_request: Request, exc: DependencyError) -> JSONResponse:
        # The LLM or embedding endpoint gave up (its retries ran out): not the request's fault.
        log.warning("dependency unavailable", dependency=exc.dependency, error=str(exc))
        message = f"the {exc.dependency} endpoint is unavailable; retry later"
        return JSONResponse(status_code=503, content=error_body("dependency_unavailable", message))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            status_code=exc.status_code, content=error_body("http_error", str(exc.detail))
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        count_store_error(exc)
        log.error("unhandled error", path=request.url.path, exc_info=exc)
        return JSONResponse(
            status_code=500, content=error_body("internal", "internal error; see the server log")
        )
