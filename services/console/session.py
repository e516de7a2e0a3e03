"""Who is looking at the console, and the guard on every form it posts.

Signing in puts the API key in an HttpOnly, SameSite=Strict cookie (Secure when
the request came over HTTPS), so pages and their forms carry no key; the API's
authentication middleware (services.api.auth) reads it from there for every
`/console` path but the sign-in page and the static files, with the same cache
and the same refusals as a bearer key. The key never appears in a URL or a log
line: the sign-in form posts it, and the request log writes paths only.

Every form that changes something carries a CSRF token (double submit): a random
value in a cookie of its own, repeated in a hidden field; a POST whose field does
not match the cookie is refused with 403 before anything else is read.
"""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.datastructures import FormData
from starlette.requests import cookie_parser

PREFIX = "/console"
SIGN_IN = f"{PREFIX}/sign-in"
STATIC = f"{PREFIX}/static/"
KEY_COOKIE = "am_console_key"
CSRF_COOKIE = "am_console_csrf"
CSRF_FIELD = "csrf"
# The console's pages load only what the API serves: no inline script, no CDN.
CSP = "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"


class Refused(Exception):
    """A console request refused with `status` (403: no CSRF token, not an admin)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def is_console(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def needs_key(path: str) -> bool:
    """Every console path but the sign-in page and the static files."""
    return is_console(path) and path != SIGN_IN and not path.startswith(STATIC)


def cookie(scope: dict, name: str) -> str | None:
    # Starlette's parser, as the browser means it: one odd cookie of another app on
    # this host (a space, a quote) must not hide ours.
    for header, value in scope["headers"]:
        if header == b"cookie":
            return cookie_parser(value.decode("latin-1")).get(name) or None
    return None


async def deny(scope: dict, receive: Any, send: Any, status: int, message: str) -> None:
    """What the API's authentication answers on a console path: a page asking for
    a key (after a 401), or one saying why it cannot check keys now (503)."""
    if status == 401 and _from_htmx(scope):
        # A refresh of the overview: the whole page goes to the sign-in, not the table.
        response: Response = Response(status_code=204, headers={"HX-Redirect": SIGN_IN})
    elif status == 401:
        here = scope["path"] if scope["method"] == "GET" else PREFIX
        response = RedirectResponse(f"{SIGN_IN}?next={quote(here)}", status_code=303)
        if cookie(scope, KEY_COOKIE) is not None:
            response.delete_cookie(KEY_COOKIE, path=PREFIX)
    else:
        response = HTMLResponse(
            f"<!doctype html><title>agent-memory</title><p>{status}: {message}</p>",
            status_code=status,
            headers={"Content-Security-Policy": CSP},
        )
    await response(scope, receive, send)


def _from_htmx(scope: dict) -> bool:
    return any(header == b"hx-request" for header, _value in scope["headers"])


def sign_in(response: Response, request: Request, key: str) -> None:
    response.set_cookie(
        KEY_COOKIE,
        key,
        httponly=True,
        samesite="strict",
        secure=_https(request),
        path=PREFIX,
    )


def sign_out(response: Response) -> None:
    response.delete_cookie(KEY_COOKIE, path=PREFIX)


def key_of(request: Request) -> str | None:
    return cookie(request.scope, KEY_COOKIE)


def csrf_token(request: Request) -> str:
    """The request's CSRF token: its cookie's, or a new one `keep_csrf` sets."""
    token = cookie(request.scope, CSRF_COOKIE)
    if token is None:
        token = request.state.__dict__.setdefault("console_csrf", secrets.token_urlsafe(32))
    return token


def keep_csrf(request: Request, response: Response) -> None:
    """Set the CSRF cookie if this request made the token."""
    token = getattr(request.state, "console_csrf", None)
    if token is not None and cookie(request.scope, CSRF_COOKIE) is None:
        response.set_cookie(
            CSRF_COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=_https(request),
            path=PREFIX,
        )


async def checked_form(request: Request) -> FormData:
    """The posted form, once its CSRF field matches the cookie; Refused(403) if not."""
    form = await request.form()
    sent = form.get(CSRF_FIELD)
    expected = cookie(request.scope, CSRF_COOKIE)
    if not isinstance(sent, str) or expected is None or not secrets.compare_digest(sent, expected):
        raise Refused(403, "this form has no valid CSRF token: reload the page and send it again")
    return form


def _https(request: Request) -> bool:
    return request.url.scheme == "https"
