"""Repositories: plain SQL over the unit of work's connection."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.types.json import Jsonb


class ProcessedEvents:
    """The exactly-once ledger: `(consumer, event_id)` recorded with the effects."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def claim(self, consumer: str, event_id: str) -> bool:
        """Record the event for this consumer; False if it was already processed.

        A concurrent delivery of the same event waits on the primary key until the
        first transaction ends, then sees the conflict, so exactly one applies.
        """
        row = self.conn.execute(
            "INSERT INTO processed_events (consumer, event_id) VALUES (%s, %s) "
            "ON CONFLICT DO NOTHING RETURNING 1",
            (consumer, event_id),
        ).fetchone()
        return row is not None


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
