"""What the console reads from Postgres that no API route answers: the users of an
app, a user's archived sessions and live memories (each a page, with how many there
are), and one event's trail (its ledger rows, the revisions it caused, its archived
turn, its place in an extraction window).

Each read is `Steps` (shared.db.run), run by the console on the API's async pool.
Every query is scoped by the viewer's app; the ledger, which has no app, is read
only for an event found to be the app's (or for an admin key).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from shared.db import filter_sql
from shared.db.memory_reads import LIVE, MEMORY_COLUMNS
from shared.db.memory_rows import MemoryRow
from shared.db.run import Statement, Steps
from shared.memory.filters import Node

T = TypeVar("T")
# The ledger's appliers (services.*_worker): its key starts with the applier (the
# column `consumer`), so naming them all finds one event's rows through the primary key.
APPLIERS = ("turns-extraction", "memory-generate-extraction", "compaction")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list: its rows, how many the whole list has, and where it is."""

    rows: list[T]
    total: int
    number: int  # 1 for the first page
    size: int

    @property
    def first(self) -> int:
        """The position of its first row in the list (1-based; 0 when empty)."""
        return (self.number - 1) * self.size + 1 if self.rows else 0

    @property
    def last(self) -> int:
        return self.first + len(self.rows) - 1 if self.rows else 0

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))


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


@dataclass(frozen=True)
class MemoryFilter:
    """Which live memories of a user the console lists; empty fields do not filter."""

    app: str
    user_id: str
    kind: str = ""
    entity: str = ""  # a part of the entity's name, in any case
    project_id: str = ""
    agent_id: str = ""  # this agent's own memories only
    matching: Node | None = None  # a filter expression, as the API's lists take it


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


def _like(text: str, *, prefix: bool) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%" if prefix else f"%{escaped}%"


def _count(rows: list[dict[str, Any]]) -> int:
    return int(rows[0]["n"]) if rows else 0


# A user of the app: someone with a live memory or an archived turn.
_USERS = """
    SELECT user_id, sum(memories)::int AS memories, sum(turns)::int AS turns,
           max(last_seen) AS last_seen
    FROM (
        SELECT user_id, count(*) AS memories, 0 AS turns, max(updated_at) AS last_seen
        FROM memories WHERE app = %(app)s AND valid_to IS NULL AND user_id LIKE %(like)s
        GROUP BY user_id
        UNION ALL
        SELECT user_id, 0, count(DISTINCT turn_id), max(created_at)
        FROM episodes WHERE app = %(app)s AND user_id LIKE %(like)s
        GROUP BY user_id
    ) found
    GROUP BY user_id
"""


def users(app: str, prefix: str, number: int, size: int) -> Steps[Page[UserRow]]:
    """The app's users whose id starts with `prefix`, the most recently seen first."""
    params = {"app": app, "like": _like(prefix, prefix=True)}
    total = yield Statement(f"SELECT count(*) AS n FROM ({_USERS}) listed", params)
    rows = yield Statement(
        f"{_USERS} ORDER BY max(last_seen) DESC NULLS LAST, user_id "
        "LIMIT %(limit)s OFFSET %(offset)s",
        {**params, "limit": size, "offset": (number - 1) * size},
    )
    return Page([UserRow(**row) for row in rows], _count(total), number, size)


def sessions(app: str, user_id: str, number: int, size: int) -> Steps[Page[SessionRow]]:
    """The user's archived sessions, the latest first."""
    params = {"app": app, "user_id": user_id}
    total = yield Statement(
        "SELECT count(DISTINCT session_id) AS n FROM episodes "
        "WHERE app = %(app)s AND user_id = %(user_id)s",
        params,
    )
    rows = yield Statement(
        """
        SELECT session_id, min(project_id) AS project_id, count(DISTINCT turn_id)::int AS turns,
               min(created_at) AS first, max(created_at) AS last
        FROM episodes WHERE app = %(app)s AND user_id = %(user_id)s
        GROUP BY session_id ORDER BY max(created_at) DESC, session_id
        LIMIT %(limit)s OFFSET %(offset)s
        """,
        {**params, "limit": size, "offset": (number - 1) * size},
    )
    return Page([SessionRow(**row) for row in rows], _count(total), number, size)


def memories(where: MemoryFilter, number: int, size: int) -> Steps[Page[MemoryRow]]:
    """The user's live memories (as the API lists them), global ones first, then
    each project's, then each session's; the latest change first within each."""
    clauses = ["m.app = %(app)s", "m.user_id = %(user_id)s", LIVE]
    params: dict[str, Any] = {"app": where.app, "user_id": where.user_id}
    if where.kind:
        clauses.append("m.kind = %(kind)s")
        params["kind"] = where.kind
    if where.project_id:
        clauses.append("m.project_id = %(project_id)s")
        params["project_id"] = where.project_id
    if where.agent_id:
        clauses.append("m.agent_id = %(agent_id)s")
        params["agent_id"] = where.agent_id
    if where.entity:
        clauses.append("m.entity_name ILIKE %(entity)s")
        params["entity"] = _like(where.entity, prefix=False)
    if where.matching is not None:
        clauses.append(filter_sql.where(where.matching, params))
    condition = " AND ".join(clauses)
    total = yield Statement(f"SELECT count(*) AS n FROM memories m WHERE {condition}", params)
    rows = yield Statement(
        f"""
        SELECT {MEMORY_COLUMNS} FROM memories m WHERE {condition}
        ORDER BY CASE m.scope WHEN 'global' THEN 0 WHEN 'project' THEN 1 ELSE 2 END,
                 m.project_id, m.session_id, m.updated_at DESC, m.id
        LIMIT %(limit)s OFFSET %(offset)s
        """,
        {**params, "limit": size, "offset": (number - 1) * size},
    )
    return Page([MemoryRow.from_row(row) for row in rows], _count(total), number, size)


def agent_of_memory(app: str, user_id: str, memory_id: str) -> Steps[str]:
    """The agent the user's memory belongs to ('' the user's, or no such memory)."""
    rows = yield Statement(
        "SELECT agent_id FROM memories WHERE app = %(app)s AND user_id = %(user_id)s "
        "AND id = %(id)s::uuid",
        {"app": app, "user_id": user_id, "id": memory_id},
    )
    return str(rows[0]["agent_id"]) if rows else ""


def agent_of_session(app: str, user_id: str, session_id: str) -> Steps[str]:
    """The agent whose session it is, as its archived turns say ('' the user's own,
    or none archived yet)."""
    rows = yield Statement(
        "SELECT agent_id FROM episodes WHERE app = %(app)s AND user_id = %(user_id)s "
        "AND session_id = %(session_id)s LIMIT 1",
        {"app": app, "user_id": user_id, "session_id": session_id},
    )
    return str(rows[0]["agent_id"] or "") if rows else ""


def user_known(app: str, user_id: str) -> Steps[bool]:
    """Whether the app holds anything of the user: a memory (live or not) or a turn."""
    rows = yield Statement(
        """
        SELECT EXISTS (SELECT 1 FROM memories WHERE app = %(app)s AND user_id = %(user_id)s)
            OR EXISTS (SELECT 1 FROM episodes WHERE app = %(app)s AND user_id = %(user_id)s)
            AS known
        """,
        {"app": app, "user_id": user_id},
    )
    return bool(rows[0]["known"])


def trail(app: str, event_id: str, admin: bool) -> Steps[Trail]:
    """What Postgres knows of event `event_id` within `app`."""
    found = Trail(event_id)
    found.revisions = yield Statement(
        """
        SELECT r.memory_id::text, r.user_id, r.action, r.old_text, r.new_text, r.applied,
               r.created_at, m.kind, m.scope
        FROM memory_revisions r JOIN memories m ON m.id = r.memory_id
        WHERE r.event_id = %s AND r.app = %s ORDER BY r.id
        """,
        (event_id, app),
    )
    episodes = yield Statement(
        """
        SELECT user_id, session_id, project_id, turn_id, user_text, assistant_text,
               created_at, archived_at
        FROM episodes WHERE event_id = %s AND app = %s ORDER BY archived_at LIMIT 1
        """,
        (event_id, app),
    )
    found.episode = episodes[0] if episodes else None
    waiting = yield Statement(
        """
        SELECT user_id, session_id, window_id::text, enrolled_at, close_requested_at
        FROM extraction_pending WHERE event_id = %s AND app = %s LIMIT 1
        """,
        (event_id, app),
    )
    found.waiting = waiting[0] if waiting else None
    if admin or found.user_id is not None:
        found.ledger = yield Statement(
            """
            SELECT consumer, processed_at FROM processed_events
            WHERE consumer = ANY(%s) AND event_id = %s ORDER BY processed_at
            """,
            (list(APPLIERS), event_id),
        )
    return found
