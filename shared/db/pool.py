"""The connection pools, and a probe of a connection."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector, register_vector_async
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from psycopg_pool.abc import AsyncKwargsParam, KwargsParam

from shared.config import Settings
from shared.db.iam import login_kwargs

# Bound how long one statement or lock wait can hold a handler, its pool
# connection and its message's lease.
STATEMENT_TIMEOUT_MS = 30_000
LOCK_TIMEOUT_MS = 10_000
# A server's own timeouts cannot end a wait for an answer that a silent network
# path (packets dropped, no reset) never delivers. TCP does: data unacknowledged
# for TCP_USER_TIMEOUT_MS ends the connection (a request in flight fails), and
# keepalives find an idle connection dead within KEEPALIVE_IDLE_SECONDS +
# KEEPALIVE_COUNT x KEEPALIVE_INTERVAL_SECONDS.
TCP_USER_TIMEOUT_MS = 10_000
KEEPALIVE_IDLE_SECONDS = 10
KEEPALIVE_INTERVAL_SECONDS = 2
KEEPALIVE_COUNT = 3
# The server's end of the connection gets the same: a backend whose client vanished
# behind a partition (its FIN dropped) would otherwise hold its transaction, and the
# user's advisory lock, until it next wrote to the socket.
SERVER_TCP_OPTIONS = (
    f"-c tcp_user_timeout={TCP_USER_TIMEOUT_MS} -c tcp_keepalives_idle={KEEPALIVE_IDLE_SECONDS} "
    f"-c tcp_keepalives_interval={KEEPALIVE_INTERVAL_SECONDS} "
    f"-c tcp_keepalives_count={KEEPALIVE_COUNT} "
)
TCP_TIMEOUTS = {
    "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
    "keepalives": 1,
    "keepalives_idle": KEEPALIVE_IDLE_SECONDS,
    "keepalives_interval": KEEPALIVE_INTERVAL_SECONDS,
    "keepalives_count": KEEPALIVE_COUNT,
}


def as_vector(values: Any) -> Any:
    """An embedding that is a list of floats as pgvector's type, which a connection
    with `register_vector` sends: a list would go as a float8[] literal, its dump
    checking every number's text for quoting (about 3 ms per 768 floats, against
    0.03 ms). Anything else (a `Vector`, pgvector's text form) as it is."""
    return Vector(values) if isinstance(values, list) else values


def _configure(conn: psycopg.Connection) -> None:
    register_vector(conn)
    conn.commit()  # leave the connection idle, as the pool expects


async def _configure_async(conn: psycopg.AsyncConnection) -> None:
    await register_vector_async(conn)
    await conn.commit()


def _connection_kwargs(settings: Settings) -> dict[str, object]:
    # Iterative HNSW scans (pgvector 0.8): a filtered nearest-neighbour search
    # keeps scanning until it has its LIMIT of rows that pass the scope filter.
    # Custom plans always: psycopg prepares a statement after five runs, and
    # Postgres's generic plan for the search (it cannot see which user or scope)
    # reads the pinned rules of a user with many memories far slower.
    return {
        **TCP_TIMEOUTS,
        "connect_timeout": max(1, int(settings.db_connect_timeout_seconds)),
        "options": SERVER_TCP_OPTIONS + f"-c statement_timeout={STATEMENT_TIMEOUT_MS} "
        f"-c lock_timeout={LOCK_TIMEOUT_MS} -c hnsw.iterative_scan=relaxed_order "
        "-c plan_cache_mode=force_custom_plan "
        # The deployment a memory change is published to (shared.db.outbox); a
        # prefix holds no space or backslash (checked in the settings).
        f"-c agent_memory.topic_prefix={settings.topic_prefix}",
    }


def _login(settings: Settings) -> Callable[[], dict[str, Any]]:
    """Connection parameters of the next login (the IAM token when it is on)."""
    assert settings.database_url
    return login_kwargs(settings.database_url, settings.database_iam_auth)


def connect_kwargs(settings: Settings) -> dict[str, Any]:
    """Parameters for a single `psycopg.connect(settings.database_url, ...)`."""
    return {**TCP_TIMEOUTS, **_login(settings)()}


def _pool_options(settings: Settings, max_size: int, name: str) -> dict[str, Any]:
    """What both pools are opened with: not yet open, so that each opens as it waits."""
    if not settings.database_url:
        raise RuntimeError("AM_DATABASE_URL is not set")
    return {
        "conninfo": settings.database_url,
        "min_size": 1,
        "max_size": max_size,
        "name": name,
        "timeout": settings.db_connect_timeout_seconds,
        "open": False,
    }


def _pool_kwargs(settings: Settings) -> KwargsParam:
    fixed = _connection_kwargs(settings)
    if not settings.database_iam_auth:
        return fixed
    login = _login(settings)
    return lambda: {**fixed, **login()}  # called for every new connection


def _async_pool_kwargs(settings: Settings) -> AsyncKwargsParam:
    fixed = _connection_kwargs(settings)
    if not settings.database_iam_auth:
        return fixed
    login = _login(settings)

    async def current() -> dict[str, Any]:
        # A refresh is an HTTP call: off the event loop.
        return {**fixed, **await asyncio.to_thread(login)}

    return current


def make_pool(settings: Settings, max_size: int, name: str) -> ConnectionPool:
    """Open a pool of at most `max_size` connections (sized to the worker's concurrency)."""
    pool = ConnectionPool(
        **_pool_options(settings, max_size, name),
        configure=_configure,
        kwargs=_pool_kwargs(settings),
    )
    pool.open(wait=True, timeout=settings.db_connect_timeout_seconds)
    return pool


async def make_async_pool(settings: Settings, max_size: int, name: str) -> AsyncConnectionPool:
    """The API's pool: queries run on its event loop."""
    pool = AsyncConnectionPool(
        **_pool_options(settings, max_size, name),
        configure=_configure_async,
        kwargs=_async_pool_kwargs(settings),
    )
    # Not waiting: the API starts (and answers what it can) while Postgres is down.
    await pool.open(wait=False)
    return pool


def ping(conn: psycopg.Connection) -> None:
    """Raises unless the server answers a statement on `conn`."""
    conn.execute("SELECT 1")


def check_disk(conn: psycopg.Connection) -> None:
    """Raises (DiskFull, SQLSTATE 53100) unless the server can write a file: a sort
    made to spill (about 1 MB, a temporary file, gone when it ends). A full disk
    answers `SELECT 1`, and most writes too while their pages have room; a worker
    that took it for up would resume, fail again and flap. On a session of its own
    (`work_mem` is set for it)."""
    conn.execute(f"SET work_mem = '{DISK_PROBE_WORK_MEM}'")
    conn.execute(
        "SELECT count(*) FROM (SELECT g FROM generate_series(1, %s) g ORDER BY g DESC) s",
        (DISK_PROBE_ROWS,),
    )


# A sort of this many integers with this little memory spills to a temporary file.
DISK_PROBE_ROWS = 100_000
DISK_PROBE_WORK_MEM = "64kB"
