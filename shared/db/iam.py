"""AlloyDB IAM database authentication (`AM_DATABASE_IAM_AUTH=true`).

The database user is the service account's email without `.gserviceaccount.com`
(in `AM_DATABASE_URL`, with no password); the password of every new connection
is a short-lived OAuth 2.0 access token of the process's Application Default
Credentials with the `alloydb.login` scope. The token is refreshed before it
expires (`REFRESH_MARGIN`), so a connection the pool opens later (to replace one
past its lifetime, or after an outage) always logs in with a valid token; an
open session stays logged in when its token expires. TLS is required: a URL
asking for less than `sslmode=require` is refused, one that says nothing gets
`require`. The SQL is the same on PostgreSQL and AlloyDB.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

ALLOYDB_LOGIN_SCOPE = "https://www.googleapis.com/auth/alloydb.login"
# A token is refreshed this long before its expiry (tokens live about an hour).
REFRESH_MARGIN = timedelta(minutes=5)
_WEAK_SSL_MODES = {"disable", "allow", "prefer"}


class DatabaseLoginError(psycopg.OperationalError):
    """No IAM token could be had for a database login."""


def _utcnow_naive() -> datetime:
    # google-auth keeps `expiry` as a naive UTC datetime.
    return datetime.now(UTC).replace(tzinfo=None)


class TokenSource:
    """The current access token of `credentials` (Application Default Credentials
    with the AlloyDB login scope unless given), refreshed before it expires.
    Thread-safe; `clock` returns naive UTC (tests pass a fake one)."""

    def __init__(
        self,
        credentials: Any = None,
        *,
        refresh_margin: timedelta = REFRESH_MARGIN,
        clock: Callable[[], datetime] = _utcnow_naive,
        request_factory: Callable[[], Any] | None = None,
    ) -> None:
        self._credentials = credentials
        self.refresh_margin = refresh_margin
        self._clock = clock
        self._request_factory = request_factory
        self._lock = threading.Lock()

    def token(self) -> str:
        """The current token; `DatabaseLoginError` (a psycopg `OperationalError`, as
        any failed login) when the credentials give none."""
        with self._lock:
            try:
                credentials = self._load()
                expiry = getattr(credentials, "expiry", None)
                fresh = credentials.token and (
                    expiry is None or self._clock() < expiry - self.refresh_margin
                )
                if not fresh:
                    credentials.refresh(self._request())
            except Exception as exc:  # no credentials, a refused refresh, no network
                raise DatabaseLoginError(
                    f"no IAM token for the database login: {type(exc).__name__}: {exc}"
                ) from exc
            if not credentials.token:
                raise DatabaseLoginError("the credentials gave no access token for the database")
            return credentials.token

    def _load(self) -> Any:
        if self._credentials is None:
            import google.auth

            self._credentials, _project = google.auth.default(scopes=[ALLOYDB_LOGIN_SCOPE])
        return self._credentials

    def _request(self) -> Any:
        if self._request_factory is not None:
            return self._request_factory()
        import google.auth.transport.requests

        return google.auth.transport.requests.Request()


def check_iam_url(database_url: str) -> dict[str, str]:
    """What IAM authentication adds to `database_url`'s parameters (`sslmode`), or
    a ValueError naming what is wrong with the URL."""
    try:
        params = conninfo_to_dict(database_url)
    except psycopg.Error as exc:
        raise ValueError(f"AM_DATABASE_URL cannot be parsed: {exc}") from None
    if params.get("password"):
        raise ValueError(
            "AM_DATABASE_URL carries a password, but AM_DATABASE_IAM_AUTH=true logs in "
            "with an IAM token: leave the password out"
        )
    if not params.get("user"):
        raise ValueError(
            "AM_DATABASE_URL names no user; with AM_DATABASE_IAM_AUTH=true it is the "
            "service account's email without .gserviceaccount.com"
        )
    mode = params.get("sslmode")
    if mode in _WEAK_SSL_MODES:
        raise ValueError(
            f"AM_DATABASE_URL has sslmode={mode}; IAM authentication needs TLS "
            "(sslmode=require or stricter)"
        )
    if mode:
        return {}
    # libpq's PGSSLMODE applies when the URL says nothing: keep a strict one.
    from_environment = os.environ.get("PGSSLMODE", "")
    if from_environment and from_environment not in _WEAK_SSL_MODES:
        return {}
    return {"sslmode": "require"}


_shared: TokenSource | None = None
_shared_lock = threading.Lock()


def shared_token_source() -> TokenSource:
    """The process's one token source (every pool and connection shares it)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = TokenSource()
        return _shared


def login_kwargs(
    database_url: str, iam: bool, tokens: TokenSource | None = None
) -> Callable[[], dict[str, Any]]:
    """A function giving the extra connection parameters of the next login: none
    for password authentication; the current token and TLS for IAM."""
    if not iam:
        return dict
    extra = check_iam_url(database_url)
    source = tokens or shared_token_source()

    def current() -> dict[str, Any]:
        return {**extra, "password": source.token()}

    return current
