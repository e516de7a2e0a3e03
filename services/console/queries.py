"""The console's reads of Postgres (shared.db.console_reads), run on the API's async
pool within QUERY_SECONDS: a page never waits longer on a hung server or a full
pool, and says the store is unavailable instead."""

from __future__ import annotations

import uuid
from typing import TypeVar

from psycopg import Error as PostgresError
from psycopg_pool import AsyncConnectionPool

from services.api.auth import within
from shared.db.run import Steps, arun

T = TypeVar("T")
QUERY_SECONDS = 10.0
PAGE_SIZE = 50  # rows of a list page: users, memories, sessions, dead letters


class StoreUnavailable(Exception):
    """Postgres did not answer within QUERY_SECONDS, or failed."""


async def read(pool: AsyncConnectionPool, steps: Steps[T]) -> T:
    """`steps` run on a connection of `pool`; StoreUnavailable if Postgres fails."""

    async def run() -> T:
        async with pool.connection() as conn:
            return await arun(conn, steps)

    try:
        return await within(run(), QUERY_SECONDS)
    except (PostgresError, TimeoutError) as exc:
        raise StoreUnavailable(f"Postgres did not answer: {type(exc).__name__}") from exc


def event_uuid(text: str) -> str | None:
    """`text` as an event id, or None if it is not one."""
    try:
        return str(uuid.UUID(text.strip()))
    except ValueError:
        return None
