"""Deleting memories: by query (adk-memory's semantics), by project, and a whole
user (GDPR), with the tombstone that keeps a deleted user deleted.

A GDPR deletion writes `deleted_users (app, user_id, deleted_at)` in the same
transaction that removes the rows, under the user's advisory lock, so it is
serialised with extraction and compaction. Every consumer then drops an event
of that user created before `deleted_at` (late, retried or replayed), and the
pipeline re-creates nothing. Events created after the deletion are a new start.
"""

from __future__ import annotations

from datetime import datetime

import psycopg
from psycopg.rows import dict_row

from shared.memory.store import MEMORY_COLUMNS, MemoryRow, MemoryStore, user_lock


def is_tombstoned(conn: psycopg.Connection, app: str, user_id: str, created_at: datetime) -> bool:
    """An event of this user created at `created_at` predates the user's deletion."""
    row = conn.execute(
        "SELECT deleted_at FROM deleted_users WHERE app = %s AND user_id = %s", (app, user_id)
    ).fetchone()
    return row is not None and created_at <= row[0]


def delete_matching(
    conn: psycopg.Connection, app: str, user_id: str, project_id: str, query: str, now: datetime
) -> list[MemoryRow]:
    """Retire the user's live memories whose text holds every word of `query`
    (full text, AND of its lexemes: a deletion is precise, unlike a search):
    with a project, that project's memories only; without one, global memories
    only. Each gets a DELETED revision. Returns them as they are now."""
    user_lock(conn, app, user_id)
    if project_id:
        where, params = "scope = 'project' AND project_id = %(project)s", {"project": project_id}
    else:
        where, params = "scope = 'global'", {}
    params.update({"app": app, "user_id": user_id, "query": query})
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            f"""
            SELECT {MEMORY_COLUMNS} FROM memories AS m
            WHERE app = %(app)s AND user_id = %(user_id)s AND valid_to IS NULL AND {where}
              AND plainto_tsquery('english', %(query)s) <> ''::tsquery
              AND tsv @@ plainto_tsquery('english', %(query)s)
            ORDER BY created_at, id
            """,
            params,
        ).fetchall()
    store = MemoryStore(conn)
    return [store.retire(MemoryRow.from_row(r), now, None) for r in rows]


def delete_project(
    conn: psycopg.Connection, app: str, user_id: str, project_id: str
) -> dict[str, int]:
    """Everything of one project of the user: its memories (any scope) with their
    revisions, its episodes and its permission rules. Returns rows removed by table."""
    user_lock(conn, app, user_id)
    scope = {"app": app, "user_id": user_id, "project": project_id}
    done = {
        "memory_revisions": conn.execute(
            "DELETE FROM memory_revisions r USING memories m WHERE r.memory_id = m.id "
            "AND m.app = %(app)s AND m.user_id = %(user_id)s AND m.project_id = %(project)s",
            scope,
        ).rowcount
    }
    for table in ("memories", "episodes", "permission_rules"):
        done[table] = conn.execute(
            f"DELETE FROM {table} WHERE app = %(app)s AND user_id = %(user_id)s "
            "AND project_id = %(project)s",
            scope,
        ).rowcount
    return done


def delete_user(
    conn: psycopg.Connection, app: str, user_id: str, now: datetime
) -> tuple[dict[str, int], datetime]:
    """Everything of the user in the app, and the tombstone at `now`: the API's
    clock, the one that stamps the `created_at` of recorded turns, so the two
    compare on one clock. Returns rows removed by table and the tombstone's time."""
    user_lock(conn, app, user_id)
    when = conn.execute(
        "INSERT INTO deleted_users (app, user_id, deleted_at) VALUES (%s, %s, %s) "
        "ON CONFLICT (app, user_id) DO UPDATE SET deleted_at = EXCLUDED.deleted_at "
        "RETURNING deleted_at",
        (app, user_id, now),
    ).fetchone()[0]
    done = {
        table: conn.execute(
            f"DELETE FROM {table} WHERE app = %s AND user_id = %s", (app, user_id)
        ).rowcount
        for table in ("memory_revisions", "memories", "episodes", "permission_rules", "operations")
    }
    return done, when
