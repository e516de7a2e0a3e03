"""The console's place in the API: its routes, static files, templates and what
each page gets (who is looking, the CSRF token, a client of the API itself).

Pages that show what the API already answers (memories, search, sessions, the
archive, permissions) get it through the project's own async client, sent to
this very app in-process (httpx's ASGI transport) with the viewer's key: the same
validation, tenancy and errors as any client, with no network hop. An API error
becomes the page's message with the API's status.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import jinja2
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.console import session
from shared.client.aio import AsyncMemoryClient
from shared.client.errors import MemoryApiError, MemoryClientError

HERE = Path(__file__).parent
TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,  # memories and turns are the users' text: always escaped
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
HEADERS = {
    "Content-Security-Policy": session.CSP,
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def age(value: datetime | float | None) -> str:
    """How long ago (a time) or how long (seconds), in the largest sensible unit."""
    if value is None:
        return "—"
    seconds = (
        value if isinstance(value, int | float) else (datetime.now(UTC) - value).total_seconds()
    )
    seconds = max(0.0, float(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def clock(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if value else "—"


def _url(path: str, **query: str) -> str:
    # Ids go in the query, never the path: "a/b" or ".." is a user id too.
    return f"{session.PREFIX}{path}?{urlencode(query)}"


def list_url(path: str, **query: object) -> str:
    """A list page's URL: its filters, and its page unless the first (empty ones left out)."""
    kept = {k: str(v) for k, v in query.items() if v not in ("", None) and (k, v) != ("page", 1)}
    return f"{session.PREFIX}{path}" + (f"?{urlencode(kept)}" if kept else "")


TEMPLATES.filters["age"] = age
TEMPLATES.filters["clock"] = clock
TEMPLATES.globals["user_url"] = lambda user: _url("/user", id=user)
TEMPLATES.globals["memory_url"] = lambda user, memory: _url("/user/memory", user=user, id=memory)
TEMPLATES.globals["list_url"] = list_url
TEMPLATES.globals["session_url"] = lambda user, sid: _url("/user/session", user=user, id=sid)


class Viewer:
    """Who is signed in: the key's app, and whether it is an admin key."""

    def __init__(self, request: Request) -> None:
        self.app: str = request.state.app_id
        self.admin: bool = bool(getattr(request.state, "admin", False))


def require_admin(viewer: Viewer) -> None:
    if not viewer.admin:
        raise session.Refused(
            403, "the pipeline's figures and dead letters are an operator's: use an admin key"
        )


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """`template` rendered for this request, with the console's headers."""
    signed_in = hasattr(request.state, "app_id")
    body = TEMPLATES.get_template(template).render(
        viewer=Viewer(request) if signed_in else None,
        csrf=session.csrf_token(request),
        path=request.url.path,
        **context,
    )
    return HTMLResponse(body, status_code=status, headers=HEADERS)


def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    """The console's error page: what went wrong, in the console's style."""
    return page(request, "error.html", status, message=message)


def client(request: Request) -> AsyncMemoryClient:
    """A client of this app, in-process, as the signed-in key. No retries: the page
    shows what happened."""
    return AsyncMemoryClient(
        "http://console.invalid",
        session.key_of(request.scope),
        retries=0,
        transport=httpx.ASGITransport(app=request.app),
    )


def install_console(app: FastAPI) -> None:
    from services.console import home, memory_pages, operator_pages, permission_pages
    from services.console.queries import StoreUnavailable

    app.mount(session.STATIC.rstrip("/"), StaticFiles(directory=HERE / "static"), name="console")
    for module in (home, memory_pages, operator_pages, permission_pages):
        app.router.routes.extend(module.router.routes)
    # Binds the forms' tokens while authentication is off (no key to bind them to).
    app.state.console_secret = session.new_secret()

    @app.exception_handler(session.Refused)
    async def refused(request: Request, exc: session.Refused) -> HTMLResponse:
        return error_page(request, exc.status, exc.message)

    # A console path that is not a page, or a method it does not take: a page too,
    # not the API's JSON.
    api_http_error = app.exception_handlers[StarletteHTTPException]

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if not session.is_console(request.url.path):
            return await api_http_error(request, exc)
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
