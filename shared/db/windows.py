"""The extraction windows repository: the turns of each session that wait to be
extracted together (`extraction_pending`), and how far each session was flushed
(`extraction_flushes`). docs/design.md, "Extraction windows"."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from shared.db.run import fetch

_SESSION = "app = %(app)s AND user_id = %(user_id)s AND session_id = %(session_id)s"
_TURN_COLUMNS = (
    "event_id::text AS event_id, turn_id, project_id, prev_session_id, created_at, "
    "user_text, assistant_text, published_at, agent_id"
)


@dataclass(frozen=True, order=True)
class WindowKey:
    """A session, whose turns make one extraction window at a time."""

    app: str
    user_id: str
    session_id: str

    def params(self) -> dict[str, Any]:
        return {"app": self.app, "user_id": self.user_id, "session_id": self.session_id}


@dataclass(frozen=True)
class PendingTurn:
    """A turn archived and waiting for its window's extraction."""

    event_id: str
    turn_id: str
    project_id: str
    prev_session_id: str
    created_at: datetime
    user_text: str
    assistant_text: str
    published_at: datetime | None  # Pub/Sub's publish time of the turn event
    agent_id: str = ""  # the agent that said it ('' none)


class Windows:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def enroll(self, session: WindowKey, turn: PendingTurn, message: bytes) -> bool:
        """Put the turn in its session's window; False if it is there already."""
        row = self.conn.execute(
            "INSERT INTO extraction_pending (app, user_id, session_id, event_id, turn_id, "
            "project_id, prev_session_id, created_at, user_text, assistant_text, message, "
            "published_at, agent_id) VALUES (%(app)s, %(user_id)s, %(session_id)s, %(event_id)s, "
            "%(turn_id)s, %(project_id)s, %(prev_session_id)s, %(created_at)s, %(user_text)s, "
            "%(assistant_text)s, %(message)s, %(published_at)s, %(agent_id)s) "
            "ON CONFLICT DO NOTHING RETURNING 1",
            {**session.params(), **turn.__dict__, "message": message},
        ).fetchone()
        return row is not None

    def open_count(self, session: WindowKey) -> int:
        """Turns of the session's window that no extraction request covers yet."""
        row = self.conn.execute(
            f"SELECT count(*) FROM extraction_pending WHERE {_SESSION} "
            "AND close_requested_at IS NULL",
            session.params(),
        ).fetchone()
        return int(row[0]) if row else 0

    def close(self, session: WindowKey, window_id: str) -> int:
        """Close the session's open window: its turns are the extraction request
        `window_id`'s; how many."""
        return self.conn.execute(
            f"UPDATE extraction_pending SET close_requested_at = now(), window_id = %(window)s "
            f"WHERE {_SESSION} AND close_requested_at IS NULL",
            {**session.params(), "window": window_id},
        ).rowcount

    def window_of(self, session: WindowKey, event_id: str) -> str | None:
        """The extraction request of the closed window that holds the turn, if any."""
        row = self.conn.execute(
            f"SELECT window_id::text FROM extraction_pending WHERE {_SESSION} "
            "AND event_id = %(event_id)s",
            {**session.params(), "event_id": event_id},
        ).fetchone()
        return row[0] if row else None

    def pending(
        self, session: WindowKey, window_id: str | None = None, *, lock: bool = False
    ) -> list[PendingTurn]:
        """The turns of the session's closed window `window_id` (None: every turn
        waiting in the session, in any window) in the session's order (time, then
        turn id); `lock`: locked until the transaction ends."""
        where = _SESSION + (" AND window_id = %(window)s" if window_id else "")
        rows = fetch(
            self.conn,
            f"SELECT {_TURN_COLUMNS} FROM extraction_pending WHERE {where} "
            f"ORDER BY created_at, turn_id{' FOR UPDATE' if lock else ''}",
            {**session.params(), "window": window_id},
        )
        return [PendingTurn(**row) for row in rows]

    def messages(self, session: WindowKey, window_id: str) -> list[tuple[str, bytes]]:
        """(event id, the turn event as published) of each turn of the window."""
        rows = self.conn.execute(
            f"SELECT event_id::text, message FROM extraction_pending WHERE {_SESSION} "
            "AND window_id = %(window)s ORDER BY created_at, turn_id",
            {**session.params(), "window": window_id},
        ).fetchall()
        return [(event_id, bytes(message)) for event_id, message in rows]

    def remove(self, session: WindowKey, event_ids: list[str]) -> int:
        return self.conn.execute(
            f"DELETE FROM extraction_pending WHERE {_SESSION} AND event_id = ANY(%(ids)s::uuid[])",
            {**session.params(), "ids": event_ids},
        ).rowcount

    def mark_flush(self, session: WindowKey, through: datetime) -> None:
        """Turns of the session published up to `through` close their window on arrival."""
        self.conn.execute(
            "INSERT INTO extraction_flushes (app, user_id, session_id, through) "
            "VALUES (%(app)s, %(user_id)s, %(session_id)s, %(through)s) "
            "ON CONFLICT (app, user_id, session_id) DO UPDATE SET "
            "through = greatest(extraction_flushes.through, excluded.through), updated_at = now()",
            {**session.params(), "through": through},
        )

    def flushed_through(self, session: WindowKey) -> datetime | None:
        row = self.conn.execute(
            f"SELECT through FROM extraction_flushes WHERE {_SESSION}", session.params()
        ).fetchone()
        return row[0] if row else None

    def close_idle(self, idle_seconds: float, limit: int) -> list[tuple[WindowKey, str]]:
        """Close the open windows no turn has joined for `idle_seconds`, at most
        `limit`, oldest first, each under a new id (another worker's idle-window check cannot
        close it too): (session, window id) of each."""
        rows = self.conn.execute(
            """
            WITH due AS (
                SELECT app, user_id, session_id, gen_random_uuid() AS window_id
                FROM extraction_pending WHERE close_requested_at IS NULL
                GROUP BY app, user_id, session_id
                HAVING max(enrolled_at) < now() - make_interval(secs => %(idle)s)
                ORDER BY min(enrolled_at)
                LIMIT %(limit)s
            )
            UPDATE extraction_pending p SET close_requested_at = now(), window_id = due.window_id
            FROM due
            WHERE p.app = due.app AND p.user_id = due.user_id AND p.session_id = due.session_id
              AND p.close_requested_at IS NULL
            RETURNING p.app, p.user_id, p.session_id, p.window_id::text
            """,
            {"idle": idle_seconds, "limit": limit},
        ).fetchall()
        return sorted({(WindowKey(app, user, sess), window) for app, user, sess, window in rows})

    def unfinished(self, resend_seconds: float, limit: int) -> list[tuple[WindowKey, str]]:
        """Closed windows still waiting `resend_seconds` after they closed (or after
        the last time this answered them), at most `limit`: their request may have
        been lost (a worker died between the close and the publish), so it is sent
        again under the same id; if it was not lost, the copy finds the window
        extracted, or waits behind it (same session, same ordering key)."""
        rows = self.conn.execute(
            """
            WITH due AS (
                SELECT DISTINCT app, user_id, session_id, window_id FROM extraction_pending
                WHERE window_id IS NOT NULL
                  AND close_requested_at < now() - make_interval(secs => %(resend)s)
                LIMIT %(limit)s
            )
            UPDATE extraction_pending p SET close_requested_at = now()
            FROM due
            WHERE p.app = due.app AND p.user_id = due.user_id AND p.session_id = due.session_id
              AND p.window_id = due.window_id
              AND p.close_requested_at < now() - make_interval(secs => %(resend)s)
            RETURNING p.app, p.user_id, p.session_id, p.window_id::text
            """,
            {"resend": resend_seconds, "limit": limit},
        ).fetchall()
        return sorted({(WindowKey(app, user, sess), window) for app, user, sess, window in rows})

    def forget_flushes(self, older_than_seconds: float) -> int:
        """Drop flush marks older than this: only turns in flight at the flush need them."""
        return self.conn.execute(
            "DELETE FROM extraction_flushes WHERE updated_at < now() - make_interval(secs => %s)",
            (older_than_seconds,),
        ).rowcount

    def waiting(self) -> int:
        """Turns waiting in any window."""
        row = self.conn.execute("SELECT count(*) FROM extraction_pending").fetchone()
        return int(row[0]) if row else 0
