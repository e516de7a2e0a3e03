"""What the console reads from Postgres that no API route answers: the users of an
app, a user's archived sessions, and one event's trail (its ledger rows, the
revisions it caused, its archived turn, its place in an extraction window).

Every query is scoped by the viewer's app; the ledger, which has no app, is shown
only for an event found to be the app's (or to an admin key).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import Error as PostgresError
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from services.api.auth import within

# The ledger's consumers (services.*_worker): its key starts with the consumer, so
# naming them all finds one event's rows through the primary key.
CONSUMERS = ("turns-extraction", "memory-generate-extraction", "compaction")
USERS_SHOWN = 50
QUERY_SECONDS = 10.0  # a page waits no longer for Postgres (a hung server, a full pool)
SESSIONS_SHOWN = 50


@dataclass(frozen=True)
class UserRow:
    user_id: str
    memories: int
    turns: int
    last_seen: datetime | None


@dataclass(frozen=True)
class SessionRow:
    session_id: str
    project_id: str
    turns: int
    first: datetime
    last: datetime


@dataclass
class Trail:
    event_id: str
    ledger: list[dict[str, Any]] = field(default_factory=list)  # consumer, processed_at
    revisions: list[dict[str, Any]] = field(default_factory=list)
    episode: dict[str, Any] | None = None
    waiting: dict[str, Any] | None = None  # its extraction window, while open

    @property
    def user_id(self) -> str | None:
        for row in (self.episode, self.waiting, *self.revisions):
            if row is not None:
                return row["user_id"]
        return None


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class StoreUnavailable(Exception):
    """Postgres did not answer within QUERY_SECONDS, or failed."""


async def _rows(pool: AsyncConnectionPool, sql: str, params: tuple) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql, params)
            return await cur.fetchall()

    try:
        return await within(run(), QUERY_SECONDS)
    except (PostgresError, TimeoutError) as exc:
        raise StoreUnavailable(f"Postgres did not answer: {type(exc).__name__}") from exc


async def find_users(pool: AsyncConnectionPool, app: str, prefix: str) -> list[UserRow]:
    """The app's users whose id starts with `prefix`, the most recently seen first."""
    like = _like_prefix(prefix)
    rows = await _rows(
        pool,
        """
        SELECT user_id, sum(memories)::int AS memories, sum(turns)::int AS turns,
               max(last_seen) AS last_seen
        FROM (
            SELECT user_id, count(*) AS memories, 0 AS turns, max(updated_at) AS last_seen
            FROM memories WHERE app = %s AND valid_to IS NULL AND user_id LIKE %s
            GROUP BY user_id
            UNION ALL
            SELECT user_id, 0, count(DISTINCT turn_id), max(created_at)
            FROM episodes WHERE app = %s AND user_id LIKE %s
            GROUP BY user_id
        ) found
        GROUP BY user_id ORDER BY max(last_seen) DESC NULLS LAST, user_id LIMIT %s
        """,
        (app, like, app, like, USERS_SHOWN),
    )
    return [UserRow(**row) for row in rows]


async def user_sessions(pool: AsyncConnectionPool, app: str, user_id: str) -> list[SessionRow]:
    """The user's archived sessions, the latest first."""
    rows = await _rows(
        pool,
        """
        SELECT session_id, min(project_id) AS project_id, count(DISTINCT turn_id)::int AS turns,
               min(created_at) AS first, max(created_at) AS last
        FROM episodes WHERE app = %s AND user_id = %s
        GROUP BY session_id ORDER BY max(created_at) DESC LIMIT %s
        """,
        (app, user_id, SESSIONS_SHOWN),
    )
    return [SessionRow(**row) for row in rows]


async def user_known(pool: AsyncConnectionPool, app: str, user_id: str) -> bool:
    """Whether the app holds anything of the user: a memory (live or not) or a turn."""
    rows = await _rows(
        pool,
        """
        SELECT EXISTS (SELECT 1 FROM memories WHERE app = %s AND user_id = %s)
            OR EXISTS (SELECT 1 FROM episodes WHERE app = %s AND user_id = %s) AS known
        """,
        (app, user_id, app, user_id),
    )
    return bool(rows[0]["known"])


def event_uuid(text: str) -> str | None:
    """`text` as an event id, or None if it is not one."""
    try:
        return str(uuid.UUID(text.strip()))
    except ValueError:
        return None


async def trail(pool: AsyncConnectionPool, app: str, event_id: str, admin: bool) -> Trail:
    """What Postgres knows of event `event_id` within `app`."""
    found = Trail(event_id)
    found.revisions = await _rows(
        pool,
        """
        SELECT r.memory_id::text, r.user_id, r.action, r.old_text, r.new_text, r.applied,
               r.created_at, m.kind, m.scope
        FROM memory_revisions r JOIN memories m ON m.id = r.memory_id
        WHERE r.event_id = %s AND r.app = %s ORDER BY r.id
        """,
        (event_id, app),
    )
    episodes = await _rows(
        pool,
        """
        SELECT user_id, session_id, project_id, turn_id, user_text, assistant_text,
               created_at, archived_at
        FROM episodes WHERE event_id = %s AND app = %s ORDER BY archived_at LIMIT 1
        """,
        (event_id, app),
    )
    found.episode = episodes[0] if episodes else None
    waiting = await _rows(
        pool,
        """
        SELECT user_id, session_id, window_id::text, enrolled_at, close_requested_at
        FROM extraction_pending WHERE event_id = %s AND app = %s LIMIT 1
        """,
        (event_id, app),
    )
    found.waiting = waiting[0] if waiting else None
    if admin or found.user_id is not None:
        found.ledger = await _rows(
            pool,
            """
            SELECT consumer, processed_at FROM processed_events
            WHERE consumer = ANY(%s) AND event_id = %s ORDER BY processed_at
            """,
            (list(CONSUMERS), event_id),
        )
    return found
