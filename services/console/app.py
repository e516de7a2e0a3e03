"""The console's place in the API: its routes, static files and error pages (what
each page gets is `services.console.pages`)."""

from __future__ import annotations

from collections.abc import Awaitable

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.console import (
    access,
    entity_pages,
    home,
    memory_pages,
    operator_pages,
    permission_pages,
    profile_pages,
)
from services.console.pages import HERE, error_page, page
from services.console.queries import StoreUnavailable
from shared.client.errors import MemoryApiError, MemoryClientError


def install_console(app: FastAPI) -> None:
    app.mount(access.STATIC.rstrip("/"), StaticFiles(directory=HERE / "static"), name="console")
    for module in (
        home,
        memory_pages,
        profile_pages,
        entity_pages,
        operator_pages,
        permission_pages,
    ):
        app.router.routes.extend(module.router.routes)
    # Binds the forms' tokens while authentication is off (no key to bind them to).
    app.state.console_secret = access.new_secret()

    @app.exception_handler(access.Refused)
    async def refused(request: Request, exc: access.Refused) -> HTMLResponse:
        return error_page(request, exc.status, exc.message)

    # A console path that is not a page, or a method it does not take: a page too,
    # not the API's JSON.
    api_http_error = app.exception_handlers[StarletteHTTPException]

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if not access.is_console(request.url.path):
            answered = api_http_error(request, exc)
            return await answered if isinstance(answered, Awaitable) else answered
        messages = {404: "no such page", 405: f"{request.method} is not a method of this page"}
        answer = error_page(request, exc.status_code, messages.get(exc.status_code, exc.detail))
        if exc.status_code == 405 and exc.headers:
            answer.headers["Allow"] = exc.headers.get("Allow", "")
        return answer

    @app.exception_handler(MemoryApiError)
    async def api_error(request: Request, exc: MemoryApiError) -> HTMLResponse:
        # Only the console calls the client inside this process.
        named = "; ".join(f"{f.get('field')}: {f.get('message')}" for f in exc.fields)
        return page(request, "error.html", exc.status, message=named or exc.message)

    @app.exception_handler(StoreUnavailable)
    async def store_down(request: Request, exc: StoreUnavailable) -> HTMLResponse:
        return page(request, "error.html", 503, message=f"the memory store is unavailable: {exc}")

    @app.exception_handler(MemoryClientError)
    async def client_error(request: Request, exc: MemoryClientError) -> HTMLResponse:
        return page(request, "error.html", 503, message=f"the API did not answer: {exc}")
