"""The user's lock: one Postgres advisory lock per user of an app, held for a
transaction, which serialises every write of the user's memories (and what is
decided against them: the ledger, entities, profiles)."""

from __future__ import annotations

import psycopg


def user_lock(conn: psycopg.Connection, app: str, user_id: str) -> None:
    """Serialise this transaction with every other memory write of the user."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (_name(app, user_id),))


def try_user_lock(conn: psycopg.Connection, app: str, user_id: str) -> bool:
    """`user_lock` if no other transaction holds it now; False (not waiting) if one does."""
    row = conn.execute(
        "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))", (_name(app, user_id),)
    ).fetchone()
    return bool(row and row[0])


def _name(app: str, user_id: str) -> str:
    return f"memories/{app}/{user_id}"
