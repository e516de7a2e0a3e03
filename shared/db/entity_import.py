"""Writing an imported entity (with its aliases and mentions), fact or merge, in
the caller's transaction, which holds the user's lock. As for memories, a row
whose id is there already is left as it is.

Ids in a record are the export's; `target` maps each to this import's (the same
for the export's own user, a copy's otherwise). Everything a record points at
must be the target user's: a fact, a merge or a mention never links to another
user's row, whatever the file says.
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from shared.db.user_import import Written, owner_of
from shared.portability.entity_records import EntityRecord, FactRecord, MergeRecord

Target = Callable[[UUID], UUID]


class Unlinked(Exception):
    """A record points at a row the user does not have: its line is not imported."""


_OWNED = "SELECT 1 FROM {table} WHERE id = %s AND app = %s AND user_id = %s"
_ROW = {"entities": "entity", "memories": "memory"}

# A mention of a row the import did not write (its line was bad) is not linked.
_MENTION = """
INSERT INTO entity_mentions (entity_id, app, user_id, memory_id, episode_id, surface,
                             observed_at, kind)
SELECT %(entity)s, %(app)s, %(user_id)s, %(memory)s, %(episode)s, %(surface)s, %(observed_at)s,
       %(kind)s
WHERE EXISTS (SELECT 1 FROM memories WHERE id = %(memory)s AND app = %(app)s
              AND user_id = %(user_id)s)
   OR EXISTS (SELECT 1 FROM episodes WHERE id = %(episode)s AND app = %(app)s
              AND user_id = %(user_id)s)
ON CONFLICT DO NOTHING
"""


def _optional(target: Target, value: UUID | None) -> UUID | None:
    return None if value is None else target(value)


def _exists(conn: psycopg.Connection, table: str, row_id: UUID) -> bool:
    return conn.execute(f"SELECT 1 FROM {table} WHERE id = %s", (row_id,)).fetchone() is not None


def _require(
    conn: psycopg.Connection,
    table: str,
    field: str,
    original: UUID | None,
    target: Target,
    app: str,
    user_id: str,
) -> UUID | None:
    """The import's id for the file's `original`, which must name a row of the user."""
    if original is None:
        return None
    row_id = target(original)
    if conn.execute(_OWNED.format(table=table), (row_id, app, user_id)).fetchone() is None:
        raise Unlinked(f"{field}: no {_ROW[table]} {original} of this user; not imported")
    return row_id


def write_entity(
    conn: psycopg.Connection, app: str, user_id: str, e: EntityRecord, target: Target
) -> Written:
    entity_id = target(e.id)
    inserted = conn.execute(
        "INSERT INTO entities (id, app, user_id, project_id, name, kind, first_seen, "
        "last_seen, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (id) DO NOTHING RETURNING 1",
        (entity_id, app, user_id, e.project_id or "", e.name, e.kind, e.first_seen, e.last_seen)
        + (e.created_at,),
    ).fetchone()
    if inserted is None:
        return owner_of(conn, "entities", entity_id, app, user_id)
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO entity_aliases (entity_id, app, user_id, alias, normalised, how) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            [(entity_id, app, user_id, a.alias, a.normalised, a.how) for a in e.aliases],
        )
        cur.executemany(
            _MENTION,
            [
                {
                    "entity": entity_id,
                    "app": app,
                    "user_id": user_id,
                    "memory": _optional(target, m.memory_id),
                    "episode": _optional(target, m.episode_id),
                    "surface": m.surface,
                    "observed_at": m.observed_at,
                    "kind": m.kind,
                }
                for m in e.mentions
            ],
        )
    return Written.NEW


def write_fact(
    conn: psycopg.Connection, app: str, user_id: str, f: FactRecord, target: Target
) -> Written:
    fact_id = target(f.id)
    if _exists(conn, "entity_facts", fact_id):
        return owner_of(conn, "entity_facts", fact_id, app, user_id)
    subject = _require(conn, "entities", "subject_id", f.subject_id, target, app, user_id)
    obj = _require(conn, "entities", "object_id", f.object_id, target, app, user_id)
    memory = _require(conn, "memories", "memory_id", f.memory_id, target, app, user_id)
    conn.execute(
        "INSERT INTO entity_facts (id, app, user_id, subject_id, predicate, object_id, value, "
        "single, valid_from, valid_to, memory_id, event_id, recorded_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (fact_id, app, user_id, subject, f.predicate, obj, f.value, f.single, f.valid_from)
        + (f.valid_to, memory, f.event_id, f.recorded_at),
    )
    return Written.NEW


def write_merge(
    conn: psycopg.Connection, app: str, user_id: str, g: MergeRecord, target: Target
) -> Written:
    """The merge as it was recorded; one not undone marks its entity merged again."""
    merge_id = target(g.id)
    if _exists(conn, "entity_merges", merge_id):
        return owner_of(conn, "entity_merges", merge_id, app, user_id)
    merged = _require(conn, "entities", "merged_id", g.merged_id, target, app, user_id)
    into = _require(conn, "entities", "into_id", g.into_id, target, app, user_id)
    mentions = []
    for m in g.moved.mentions:
        row = conn.execute(
            "SELECT id FROM entity_mentions WHERE entity_id = %s AND app = %s AND user_id = %s "
            "AND (memory_id = %s OR episode_id = %s)",
            (target(m.entity_id), app, user_id)
            + (_optional(target, m.memory_id), _optional(target, m.episode_id)),
        ).fetchone()
        if row is not None:
            mentions.append(row[0])
    moved = {
        "mentions": mentions,
        "aliases": list(g.moved.aliases),
        "subject_facts": [str(target(f)) for f in g.moved.subject_facts],
        "object_facts": [str(target(f)) for f in g.moved.object_facts],
    }
    conn.execute(
        "INSERT INTO entity_merges (id, app, user_id, merged_id, into_id, moved, merged_at, "
        "undone_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (merge_id, app, user_id, merged, into, Jsonb(moved), g.merged_at, g.undone_at),
    )
    if g.undone_at is None:
        conn.execute(
            "UPDATE entities SET merged_into = %s WHERE id = %s AND app = %s AND user_id = %s",
            (into, merged, app, user_id),
        )
    return Written.NEW
