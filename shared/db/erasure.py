"""Erasure: every row of a user, or of one of the user's projects, across the
tables that hold them (memories with their revisions and feedback, episodes,
entities with their aliases, mentions and facts, turns waiting in extraction
windows, permission rules, and for a user also operations and flush marks). In the
caller's transaction, which holds the user's lock
(`shared.db.user_lock`)."""

from __future__ import annotations

import psycopg

from shared.db import outbox
from shared.db.memory_reads import MEMORY_COLUMNS
from shared.db.memory_rows import MemoryRow
from shared.db.run import fetch

# Deleting an entity deletes its aliases, mentions, facts and merges (ON DELETE CASCADE).
_PROJECT_TABLES = ("entities", "memories", "episodes", "extraction_pending", "permission_rules")
_USER_TABLES = (
    "entities",
    "memory_revisions",
    "memory_feedback",
    "memories",
    "episodes",
    "extraction_pending",
    "extraction_flushes",
    "permission_rules",
    "operations",
)


class Erasure:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def project(self, app: str, user_id: str, project_id: str) -> dict[str, int]:
        """Everything of one project of the user (its memories of any scope); rows
        removed by table."""
        scope = {"app": app, "user_id": user_id, "project": project_id}
        self._announce(app, user_id, "AND project_id = %(project)s", scope)
        done = {
            table: self.conn.execute(
                f"DELETE FROM {table} r USING memories m WHERE r.memory_id = m.id "
                "AND m.app = %(app)s AND m.user_id = %(user_id)s AND m.project_id = %(project)s",
                scope,
            ).rowcount
            for table in ("memory_revisions", "memory_feedback")
        }
        for table in _PROJECT_TABLES:
            done[table] = self.conn.execute(
                f"DELETE FROM {table} WHERE app = %(app)s AND user_id = %(user_id)s "
                "AND project_id = %(project)s",
                scope,
            ).rowcount
        return done

    def user(self, app: str, user_id: str) -> dict[str, int]:
        """Everything of the user in the app; rows removed by table."""
        self._announce(app, user_id, "", {"app": app, "user_id": user_id})
        return {
            table: self.conn.execute(
                f"DELETE FROM {table} WHERE app = %s AND user_id = %s", (app, user_id)
            ).rowcount
            for table in _USER_TABLES
        }

    def _announce(self, app: str, user_id: str, where: str, params: dict[str, str]) -> None:
        """Each live memory erased is a DELETED change, and no change of the erased
        memories still waiting to be published keeps their text."""
        erased = [
            MemoryRow.from_row(row)
            for row in fetch(
                self.conn,
                f"SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.app = %(app)s "
                f"AND m.user_id = %(user_id)s {where} ORDER BY m.created_at, m.id",
                params,
            )
        ]
        outbox.forget_texts(self.conn, app, user_id, [m.id for m in erased])
        for memory in erased:
            if memory.valid_to is None:
                outbox.record(self.conn, memory, "DELETED", "", "", None)
