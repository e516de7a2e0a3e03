"""The episodes repository: the archive of recorded turns, and what compaction
reads from it and removes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.types.json import Jsonb

from shared.db.run import fetch


@dataclass(frozen=True)
class Episode:
    app: str
    user_id: str
    project_id: str
    session_id: str
    turn_id: str
    event_id: str
    user_text: str
    assistant_text: str
    tool_events: list[dict[str, str]]
    created_at: datetime

    @property
    def text(self) -> str:
        """What the archive searches: the dialogue, not the tool traffic."""
        return f"User: {self.user_text}\nAssistant: {self.assistant_text}"


@dataclass(frozen=True)
class OldEpisode:
    """An archived turn as compaction folds it."""

    id: str
    project_id: str
    session_id: str
    turn_id: str
    user_text: str
    assistant_text: str
    created_at: datetime


class Episodes:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def add(self, episode: Episode, embedding: object = None) -> bool:
        """Archive a turn; False if this turn of the session is already archived."""
        row = self.conn.execute(
            """
            INSERT INTO episodes (app, user_id, project_id, session_id, turn_id, event_id,
                                  user_text, assistant_text, tool_events, text, embedding,
                                  created_at)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (app, user_id, session_id, turn_id) DO NOTHING
            RETURNING 1
            """,
            (
                episode.app,
                episode.user_id,
                episode.project_id,
                episode.session_id,
                episode.turn_id,
                episode.event_id,
                episode.user_text,
                episode.assistant_text,
                Jsonb(episode.tool_events),
                episode.text,
                embedding,
                episode.created_at,
            ),
        ).fetchone()
        return row is not None

    def users_with_old(self, app: str, cutoff: datetime, project_id: str = "") -> list[str]:
        """The users of `app` with episodes created before `cutoff` (of `project_id`
        only, when not ""), in order."""
        project = "AND project_id = %(project)s " if project_id else ""
        rows = self.conn.execute(
            "SELECT DISTINCT user_id FROM episodes WHERE app = %(app)s "
            f"AND created_at < %(cutoff)s {project}ORDER BY user_id",
            {"app": app, "cutoff": cutoff, "project": project_id},
        ).fetchall()
        return [row[0] for row in rows]

    def old(
        self, app: str, user_id: str, project_id: str, cutoff: datetime, limit: int
    ) -> list[OldEpisode]:
        """The user's episodes created before `cutoff` (of `project_id` only, when
        not ""), oldest first, at most `limit`."""
        project = "AND project_id = %(project)s " if project_id else ""
        rows = fetch(
            self.conn,
            "SELECT id::text AS id, project_id, session_id, turn_id, user_text, "
            "assistant_text, created_at FROM episodes "
            "WHERE app = %(app)s AND user_id = %(user_id)s AND created_at < %(cutoff)s "
            f"{project}ORDER BY created_at, id LIMIT %(limit)s",
            {
                "app": app,
                "user_id": user_id,
                "project": project_id,
                "cutoff": cutoff,
                "limit": limit,
            },
        )
        return [OldEpisode(**row) for row in rows]

    def delete(self, app: str, user_id: str, ids: list[str]) -> int:
        """Remove these episodes of the user; how many were there."""
        return self.conn.execute(
            "DELETE FROM episodes WHERE app = %s AND user_id = %s AND id = ANY(%s::uuid[])",
            (app, user_id, ids),
        ).rowcount
