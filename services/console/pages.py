"""What each of the console's pages gets (who is looking, the CSRF token, a client
of the API itself), its templates, and its error page (also for what the API's
authentication refuses on a console path).

Pages that show what the API already answers (memories, search, sessions, the
archive, permissions) get it through the project's own async client, sent to
this very app in-process (httpx's ASGI transport) with the viewer's key: the same
validation, tenancy and errors as any client, with no network hop. An API error
becomes the page's message with the API's status.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx
import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.datastructures import Headers
from starlette.types import Scope

from services.console import access
from shared.client.aio import AsyncMemoryClient
from shared.profiles.schema import shown

HERE = Path(__file__).parent
TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,  # memories and turns are the users' text: always escaped
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
HEADERS = {
    "Content-Security-Policy": access.CSP,
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
    return f"{access.PREFIX}{path}?{urlencode(query)}"


def list_url(path: str, **query: object) -> str:
    """A list page's URL: its filters, and its page unless the first (empty ones left out)."""
    kept = {k: str(v) for k, v in query.items() if v not in ("", None) and (k, v) != ("page", 1)}
    return f"{access.PREFIX}{path}" + (f"?{urlencode(kept)}" if kept else "")


TEMPLATES.filters["age"] = age
# JSON with its characters as they are (é, not \u00e9): to read, and to edit in a form.
TEMPLATES.filters["json_text"] = lambda value: json.dumps(value, ensure_ascii=False)
TEMPLATES.filters["clock"] = clock
# A profile value as the context shows it; none: a cleared field.
TEMPLATES.filters["profile_value"] = lambda v: "—" if v is None else shown(v)
TEMPLATES.globals["user_url"] = lambda user: _url("/user", id=user)
TEMPLATES.globals["memory_url"] = lambda user, memory, agent=None: _url(
    "/user/memory", user=user, id=memory, **({"agent": agent} if agent else {})
)
TEMPLATES.globals["list_url"] = list_url
TEMPLATES.globals["session_url"] = lambda user, sid: _url("/user/session", user=user, id=sid)
# An entity is read as the agent of the memory whose page links it (None: the user).
TEMPLATES.globals["entity_url"] = lambda user, entity, project, agent=None: _url(
    "/user/entity",
    user=user,
    id=entity,
    **({"project": project} if project else {}),
    **({"agent": agent} if agent else {}),
)


class Viewer:
    """Who is signed in: the key's app, and whether it is an admin key."""

    def __init__(self, request: Request) -> None:
        self.app: str = request.state.app_id
        self.admin: bool = bool(getattr(request.state, "admin", False))


def require_admin(viewer: Viewer) -> None:
    if not viewer.admin:
        raise access.Refused(
            403, "the pipeline's figures and dead letters are an operator's: use an admin key"
        )


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """`template` rendered for this request, with the console's headers."""
    signed_in = hasattr(request.state, "app_id")
    body = TEMPLATES.get_template(template).render(
        viewer=Viewer(request) if signed_in else None,
        csrf=access.csrf_token(request),
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
        access.key_of(request.scope),
        retries=0,
        transport=httpx.ASGITransport(app=request.app),
    )


async def deny(scope: Scope, receive: Any, send: Any, status: int, message: str) -> None:
    """What the API's authentication answers on a console path: a page asking for
    a key (after a 401), or the console's error page (a cookie twice, or keys that
    cannot be checked now)."""
    if status == 401 and _from_htmx(scope):
        # A refresh of the overview: the whole page goes to the sign-in, and back to
        # the page after it (not to the fragment the refresh asked for).
        response: Response = Response(
            status_code=204, headers={"HX-Redirect": _sign_in_from_page(scope)}
        )
    elif status == 401:
        response = RedirectResponse(access.sign_in_url(scope), status_code=303)
        try:
            stale = access.key_of(scope) is not None
        except access.Refused:
            stale = False
        if stale:
            access.sign_out(response, scope)
    else:
        response = error_page(Request(scope, receive), status, message)
    await response(scope, receive, send)


def _from_htmx(scope: Scope) -> bool:
    return any(header == b"hx-request" for header, _value in scope["headers"])


def _sign_in_from_page(scope: Scope) -> str:
    """The sign-in page, going back to the page whose script asked (HX-Current-URL)."""
    parts = urlsplit(Headers(scope=scope).get("hx-current-url", ""))
    here = access.local_target(parts.path + (f"?{parts.query}" if parts.query else ""))
    return f"{access.SIGN_IN}?next={quote(here, safe='/')}"
