"""Merging one of a user's entities into another (two names resolution kept apart
that are one thing), and undoing it. In the caller's transaction, which holds the
user's lock. A merge moves the entity's mentions, facts and aliases to the other
and marks it merged; what moved is recorded with the merge, so undoing it puts
each row back. Both entities are the same app's, user's and project's: a merge
never crosses them.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb


class MergeRefused(Exception):
    """Why a merge or its undoing cannot be done: `status` 404 or 409."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _entity(
    conn: psycopg.Connection, app: str, user_id: str, project_id: str, entity_id: str
) -> Any:
    return conn.execute(
        "SELECT id::text, merged_into FROM entities WHERE id = %s AND app = %s AND user_id = %s "
        "AND project_id IN (%s, '')",
        (entity_id, app, user_id, project_id),
    ).fetchone()


def merge(
    conn: psycopg.Connection, app: str, user_id: str, project_id: str, merged: str, into: str
) -> str:
    """Merge `merged` into `into`; the merge's id."""
    one = _entity(conn, app, user_id, project_id, merged)
    other = _entity(conn, app, user_id, project_id, into)
    if one is None or other is None:
        raise MergeRefused(404, f"no entity {merged if one is None else into} for this user")
    same = conn.execute(
        "SELECT a.project_id = b.project_id FROM entities a, entities b "
        "WHERE a.id = %s AND b.id = %s",
        (merged, into),
    ).fetchone()
    if merged == into or one[1] is not None or other[1] is not None or not (same and same[0]):
        raise MergeRefused(409, "only two different unmerged entities of one project merge")
    moved: dict[str, list[Any]] = {
        # A row that mentions both stays with the merged entity's own mention.
        "mentions": _ids(
            conn,
            "UPDATE entity_mentions m SET entity_id = %(into)s WHERE m.entity_id = %(merged)s "
            "AND NOT EXISTS (SELECT 1 FROM entity_mentions o WHERE o.entity_id = %(into)s "
            "AND (o.memory_id = m.memory_id OR o.episode_id = m.episode_id)) RETURNING m.id",
            {"into": into, "merged": merged},
        ),
        "aliases": _ids(
            conn,
            "INSERT INTO entity_aliases (entity_id, app, user_id, alias, normalised, how) "
            "SELECT %(into)s, app, user_id, alias, normalised, 'merge' FROM entity_aliases "
            "WHERE entity_id = %(merged)s ON CONFLICT DO NOTHING RETURNING normalised",
            {"into": into, "merged": merged},
        ),
        "subject_facts": _ids(
            conn,
            "UPDATE entity_facts SET subject_id = %(into)s WHERE subject_id = %(merged)s "
            "RETURNING id::text",
            {"into": into, "merged": merged},
        ),
        "object_facts": _ids(
            conn,
            "UPDATE entity_facts SET object_id = %(into)s WHERE object_id = %(merged)s "
            "RETURNING id::text",
            {"into": into, "merged": merged},
        ),
    }
    conn.execute(
        "UPDATE entities e SET merged_into = %(into)s WHERE e.id = %(merged)s",
        {"into": into, "merged": merged},
    )
    conn.execute(
        "UPDATE entities e SET last_seen = greatest(e.last_seen, m.last_seen), "
        "first_seen = least(e.first_seen, m.first_seen) FROM entities m "
        "WHERE e.id = %(into)s AND m.id = %(merged)s",
        {"into": into, "merged": merged},
    )
    row = conn.execute(
        "INSERT INTO entity_merges (app, user_id, merged_id, into_id, moved) "
        "VALUES (%s, %s, %s, %s, %s) RETURNING id::text",
        (app, user_id, merged, into, Jsonb(moved)),
    ).fetchone()
    assert row is not None
    return str(row[0])


def unmerge(conn: psycopg.Connection, app: str, user_id: str, project_id: str, merged: str) -> str:
    """Undo the merge of `merged` (its latest, not undone): each moved row goes
    back; the entity it was merged into keeps what it had before. The merge's id."""
    if _entity(conn, app, user_id, project_id, merged) is None:
        raise MergeRefused(404, f"no entity {merged} for this user")
    row = conn.execute(
        "SELECT id::text, into_id::text, moved FROM entity_merges WHERE merged_id = %s "
        "AND undone_at IS NULL ORDER BY merged_at DESC LIMIT 1",
        (merged,),
    ).fetchone()
    if row is None:
        raise MergeRefused(409, f"entity {merged} is not merged")
    merge_id, into, moved = row
    params = {"into": into, "merged": merged}
    conn.execute(
        "UPDATE entity_mentions SET entity_id = %(merged)s WHERE id = ANY(%(ids)s)",
        params | {"ids": moved["mentions"]},
    )
    conn.execute(
        "DELETE FROM entity_aliases WHERE entity_id = %(into)s AND normalised = ANY(%(ids)s)",
        params | {"ids": moved["aliases"]},
    )
    conn.execute(
        "UPDATE entity_facts SET subject_id = %(merged)s WHERE id = ANY(%(ids)s::uuid[])",
        params | {"ids": moved["subject_facts"]},
    )
    conn.execute(
        "UPDATE entity_facts SET object_id = %(merged)s WHERE id = ANY(%(ids)s::uuid[])",
        params | {"ids": moved["object_facts"]},
    )
    conn.execute("UPDATE entities SET merged_into = NULL WHERE id = %(merged)s", params)
    conn.execute("UPDATE entity_merges SET undone_at = now() WHERE id = %s", (merge_id,))
    return str(merge_id)


def _ids(conn: psycopg.Connection, sql: str, params: dict[str, Any]) -> list[Any]:
    return [row[0] for row in conn.execute(sql, params).fetchall()]
