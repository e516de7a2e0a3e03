"""The tombstones repository: `deleted_users (app, user_id, deleted_at)`.

An event of a user created at or before the user's `deleted_at` belongs to the
deleted user: every consumer drops it (see `shared.memory.deletion`).
"""

from __future__ import annotations

from datetime import datetime

import psycopg

DELETED_AT_SQL = "SELECT deleted_at FROM deleted_users WHERE app = %s AND user_id = %s"


def covers(deleted_at: datetime | None, created_at: datetime) -> bool:
    """Does a tombstone of `deleted_at` (None: none) cover an event created at `created_at`?"""
    return deleted_at is not None and created_at <= deleted_at


class Tombstones:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def deleted_at(self, app: str, user_id: str) -> datetime | None:
        row = self.conn.execute(DELETED_AT_SQL, (app, user_id)).fetchone()
        return row[0] if row is not None else None

    def covers(self, app: str, user_id: str, created_at: datetime) -> bool:
        """An event of this user created at `created_at` predates the user's deletion."""
        return covers(self.deleted_at(app, user_id), created_at)

    def set(self, app: str, user_id: str, deleted_at: datetime) -> datetime:
        """Write (or move) the user's tombstone; returns its time."""
        return self.conn.execute(
            "INSERT INTO deleted_users (app, user_id, deleted_at) VALUES (%s, %s, %s) "
            "ON CONFLICT (app, user_id) DO UPDATE SET deleted_at = EXCLUDED.deleted_at "
            "RETURNING deleted_at",
            (app, user_id, deleted_at),
        ).fetchone()[0]  # type: ignore[index]  # RETURNING of an upsert: one row
