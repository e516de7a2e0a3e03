"""Who is looking at the console, and the guard on every form it posts.

Signing in puts the API key in an HttpOnly, SameSite=Strict cookie, so pages and
their forms carry no key. Over HTTPS (the request's own scheme, or the one a
trusted proxy forwards: uvicorn's FORWARDED_ALLOW_IPS) it is
`__Host-am_console_key`, Secure, for the whole host; over plain HTTP, where no
browser need keep a Secure cookie, `am_console_key` for `/console` only. The
API's authentication middleware (services.api.auth) reads it for every `/console`
path but the sign-in page and the static files, with the same cache and the same
refusals as a bearer key. The key never appears in a URL or a log line.

Every POST is checked before its form is read (`checked_form`):
- the browser must say it comes from this very origin: `Sec-Fetch-Site` other
  than `same-origin` (a page on another port of this host is `same-site`), or an
  `Origin` of another host or port, is refused;
- a form that changes something carries a token bound to the signed-in key (an
  HMAC keyed with it), which no other page can compute, whatever cookies it sets;
- a request carrying a console cookie twice is refused: a page of another port of
  this host may set one for a wider path, and the server cannot tell which is ours.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from base64 import urlsafe_b64encode
from urllib.parse import quote, urlsplit

from fastapi import Request
from fastapi.responses import Response
from starlette.datastructures import FormData, Headers, UploadFile
from starlette.requests import cookie_parser
from starlette.types import Scope

PREFIX = "/console"
SIGN_IN = f"{PREFIX}/sign-in"
STATIC = f"{PREFIX}/static/"
KEY_COOKIE = "am_console_key"  # over plain HTTP, for /console
SECURE_KEY_COOKIE = "__Host-am_console_key"  # over HTTPS: Secure, the whole host
CSRF_FIELD = "csrf"
_FORM_LABEL = b"agent-memory console form v1"
# What a browser says of a request from this origin, or typed in the address bar.
_OWN_SITE = frozenset({"same-origin", "none"})
# The console's pages load only what the API serves: no inline script, no CDN.
CSP = "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"


class Refused(Exception):
    """A console request refused with `status` (400: a cookie twice; 403: a form
    from another origin or without its token, not an admin; 422: a bad field)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def is_console(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def needs_key(path: str) -> bool:
    """Every console path but the sign-in page and the static files."""
    return is_console(path) and path != SIGN_IN and not path.startswith(STATIC)


def https(scope: Scope) -> bool:
    return scope.get("scheme") == "https"


def key_cookie_name(scope: Scope) -> str:
    return SECURE_KEY_COOKIE if https(scope) else KEY_COOKIE


def cookie(scope: Scope, name: str) -> str | None:
    """Cookie `name` of the request; Refused(400) if it came more than once."""
    found: list[str] = []
    for header, value in scope["headers"]:
        if header == b"cookie":
            text = value.decode("latin-1")
            named = [part.split("=", 1)[0].strip() for part in text.split(";")]
            if name in named:
                # Starlette's parser, as the browser means it: one odd cookie of
                # another app on this host (a space, a quote) must not hide ours.
                found += [cookie_parser(text).get(name, "")] * named.count(name)
    if len(found) > 1:
        raise Refused(
            400,
            f"the cookie {name} came {len(found)} times: a page of another site on this "
            "host set one. Clear this site's cookies in the browser, then sign in again",
        )
    return found[0] or None if found else None


def key_of(scope: Scope) -> str | None:
    """The signed-in key, from the cookie of the request's scheme."""
    return cookie(scope, key_cookie_name(scope))


def sign_in(response: Response, request: Request, key: str) -> None:
    secure = https(request.scope)
    response.set_cookie(
        key_cookie_name(request.scope),
        key,
        httponly=True,
        samesite="strict",
        secure=secure,
        path="/" if secure else PREFIX,  # `__Host-` requires `/`
    )


def sign_out(response: Response, scope: Scope) -> None:
    secure = https(scope)
    response.delete_cookie(
        key_cookie_name(scope),
        path="/" if secure else PREFIX,
        secure=secure,
        httponly=True,
        samesite="strict",
    )


def csrf_token(request: Request) -> str:
    """The token of this request's forms: an HMAC keyed with the signed-in key (with
    authentication off, with a secret of this process)."""
    try:
        key = key_of(request.scope)
    except Refused:
        key = None  # the page says why it refuses; its forms will be refused too
    secret = key.encode() if key else request.app.state.console_secret
    digest = hmac.new(secret, _FORM_LABEL, hashlib.sha256).digest()
    return urlsafe_b64encode(digest).decode().rstrip("=")


def new_secret() -> bytes:
    return secrets.token_bytes(32)


def from_elsewhere(scope: Scope) -> str | None:
    """Why the browser says this request comes from another origin, or None."""
    headers = Headers(scope=scope)
    site = headers.get("sec-fetch-site")
    if site is not None and site not in _OWN_SITE:
        return f"it came from another site (Sec-Fetch-Site: {site})"
    origin = headers.get("origin")
    if origin is not None and _host_port(origin) != _own_host_port(scope, headers):
        return f"it came from another origin ({origin[:100]})"
    return None


def _host_port(origin: str) -> tuple[str, int] | None:
    """An origin's host and port (a scheme's default port filled in); None for an
    opaque origin (`null`) or nonsense."""
    try:
        parts = urlsplit(origin)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None
    if not parts.hostname or port is None:
        return None
    return parts.hostname, port


def _own_host_port(scope: Scope, headers: Headers) -> tuple[str, int] | None:
    # The Host the browser sent, with the port of the scheme it used: behind a
    # TLS proxy that scheme is what the proxy forwards, not the proxy's own hop.
    host = headers.get("host")
    if host is None:
        return None
    return _host_port(f"{scope.get('scheme', 'http')}://{host}")


async def checked_form(request: Request, *, token: bool = True) -> FormData:
    """The posted form, once the browser says it comes from this origin and (with
    `token`) its CSRF field is this key's; Refused(403) if not, before the form is read.
    The sign-in form has no key to bind a token to: its guard is the origin alone."""
    problem = from_elsewhere(request.scope)
    if problem is not None:
        raise Refused(403, f"this form was refused: {problem}")
    if token:
        key_of(request.scope)  # a cookie twice: Refused(400)
    form = await request.form()
    for value in form.values():
        if isinstance(value, UploadFile):  # no form of the console takes a file
            await value.close()
    if token:
        sent, expected = form.get(CSRF_FIELD), csrf_token(request)
        if not isinstance(sent, str) or not secrets.compare_digest(sent, expected):
            raise Refused(
                403, "this form has no valid CSRF token: reload the page and send it again"
            )
    return form


def sign_in_url(scope: Scope) -> str:
    """The sign-in page, going back to this request's page (with its query) after."""
    here = PREFIX
    if scope["method"] == "GET":
        here = scope["path"]
        query = scope.get("query_string", b"").decode("latin-1")
        if query:
            here += "?" + query
    return f"{SIGN_IN}?next={quote(here, safe='/')}"


def local_target(target: str) -> str:
    """A console page to go on to after signing in (with its query); never another
    site, nor a URL a browser would read otherwise (a backslash, a control character)."""
    ours = target == PREFIX or target.startswith((PREFIX + "/", PREFIX + "?"))
    if ours and len(target) <= 4000 and not any(c == "\\" or ord(c) < 32 for c in target):
        return target
    return PREFIX
