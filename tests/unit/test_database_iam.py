"""AlloyDB IAM database authentication: the token hook, with a fake clock and fake
credentials (the only stand-ins: no AlloyDB or Google credentials here)."""

import threading
from datetime import datetime, timedelta

import psycopg
import pytest

from shared.config import ConfigError, load_settings
from shared.db.iam import (
    ALLOYDB_LOGIN_SCOPE,
    DatabaseLoginError,
    TokenSource,
    check_iam_url,
    login_kwargs,
)
from shared.db.pool import _async_pool_kwargs, _pool_kwargs

T0 = datetime(2026, 11, 30, 12, 0, 0)  # naive UTC, as google-auth keeps `expiry`
LIFETIME = timedelta(hours=1)
URL = "postgresql://memory-api%40my-project.iam@10.0.0.5:5432/postgres"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class FakeCredentials:
    """The surface of google.auth credentials the hook uses: token, expiry, refresh."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.token: str | None = None
        self.expiry: datetime | None = None
        self.refreshes = 0

    def refresh(self, request: object) -> None:
        assert request == "request"
        self.refreshes += 1
        self.token = f"token-{self.refreshes}"
        self.expiry = self.clock.now + LIFETIME


def _source(clock: Clock) -> tuple[TokenSource, FakeCredentials]:
    credentials = FakeCredentials(clock)
    return TokenSource(credentials, clock=clock, request_factory=lambda: "request"), credentials


def test_the_token_is_fetched_once_then_reused_until_the_margin_before_expiry():
    clock = Clock()
    source, credentials = _source(clock)
    assert source.token() == "token-1"
    clock.now = T0 + LIFETIME - timedelta(minutes=6)  # still more than 5 minutes left
    assert source.token() == "token-1"
    assert credentials.refreshes == 1
    clock.now = T0 + LIFETIME - timedelta(minutes=5)  # inside the margin: refreshed early
    assert source.token() == "token-2"
    assert credentials.expiry == clock.now + LIFETIME
    clock.now += timedelta(minutes=30)
    assert source.token() == "token-2"
    assert credentials.refreshes == 2


def test_concurrent_logins_share_one_refresh():
    clock = Clock()
    source, credentials = _source(clock)
    tokens: list[str] = []
    threads = [threading.Thread(target=lambda: tokens.append(source.token())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tokens == ["token-1"] * 8
    assert credentials.refreshes == 1


def test_credentials_that_give_no_token_are_an_error():
    class Empty(FakeCredentials):
        def refresh(self, request: object) -> None:
            self.refreshes += 1

    source = TokenSource(Empty(Clock()), clock=Clock(), request_factory=lambda: "request")
    with pytest.raises(DatabaseLoginError, match="no access token"):
        source.token()


def test_each_login_gets_the_current_token_and_tls():
    clock = Clock()
    source, _credentials = _source(clock)
    login = login_kwargs(URL, iam=True, tokens=source)
    assert login() == {"sslmode": "require", "password": "token-1"}
    clock.now = T0 + LIFETIME  # expired: the next login refreshes first
    assert login() == {"sslmode": "require", "password": "token-2"}
    # A URL that already asks for stricter TLS keeps it.
    strict = login_kwargs(URL + "?sslmode=verify-full", iam=True, tokens=source)
    assert strict() == {"password": "token-2"}
    # Password authentication adds nothing.
    assert login_kwargs(URL, iam=False)() == {}


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (URL.replace("@10.", ":secret@10."), "carries a password"),
        ("postgresql://10.0.0.5/postgres", "names no user"),
        (URL + "?sslmode=prefer", "sslmode=prefer; IAM authentication needs TLS"),
        (URL + "?sslmode=disable", "sslmode=disable; IAM authentication needs TLS"),
    ],
)
def test_a_url_iam_authentication_cannot_use_is_refused_with_the_reason(url, problem):
    with pytest.raises(ValueError, match=problem):
        check_iam_url(url)
    with pytest.raises(ConfigError, match=f"AM_DATABASE_IAM_AUTH: AM_DATABASE_URL .*{problem}"):
        load_settings(database_url=url, database_iam_auth=True)


def test_the_pools_ask_for_new_login_parameters_per_connection(monkeypatch):
    clock = Clock()
    source, _credentials = _source(clock)
    monkeypatch.setattr("shared.db.iam._shared", source)
    settings = load_settings(database_url=URL, database_iam_auth=True)
    kwargs = _pool_kwargs(settings)
    assert callable(kwargs)
    first = kwargs()
    assert first["password"] == "token-1" and first["sslmode"] == "require"
    assert "statement_timeout" in first["options"]
    clock.now = T0 + LIFETIME
    assert kwargs()["password"] == "token-2"

    import asyncio

    async_kwargs = _async_pool_kwargs(settings)
    assert asyncio.run(async_kwargs())["password"] == "token-2"
    # Without IAM the parameters are fixed.
    plain = load_settings(database_url=URL, database_iam_auth=False)
    assert isinstance(_pool_kwargs(plain), dict)
    assert "password" not in _pool_kwargs(plain)


def test_the_default_credentials_are_asked_for_the_alloydb_login_scope(monkeypatch):
    asked: list[list[str]] = []
    clock = Clock()
    credentials = FakeCredentials(clock)

    def default(scopes):
        asked.append(scopes)
        return credentials, "my-project"

    monkeypatch.setattr("google.auth.default", default)
    source = TokenSource(clock=clock, request_factory=lambda: "request")
    assert source.token() == "token-1"
    assert asked == [[ALLOYDB_LOGIN_SCOPE]]


def test_credentials_that_cannot_give_a_token_are_a_database_login_error():
    class Refused(FakeCredentials):
        def refresh(self, request: object) -> None:
            raise OSError("metadata server unreachable")

    clock = Clock()
    source = TokenSource(Refused(clock), clock=clock, request_factory=lambda: "request")
    with pytest.raises(DatabaseLoginError, match="no IAM token.*OSError: metadata server"):
        source.token()
    assert issubclass(DatabaseLoginError, psycopg.OperationalError)  # as a refused login


def test_a_strict_pgsslmode_from_the_environment_is_kept(monkeypatch):
    monkeypatch.setenv("PGSSLMODE", "verify-full")
    assert check_iam_url(URL) == {}
    monkeypatch.setenv("PGSSLMODE", "prefer")
    assert check_iam_url(URL) == {"sslmode": "require"}


def test_a_url_that_cannot_be_parsed_is_a_configuration_error():
    with pytest.raises(ConfigError, match="AM_DATABASE_IAM_AUTH: AM_DATABASE_URL cannot be parsed"):
        load_settings(database_url=URL + "?no_such_option=1", database_iam_auth=True)
