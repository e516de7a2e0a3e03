"""Writing an imported memory (with its revisions and feedback) or episode, in the
caller's transaction, which holds the user's lock (`shared.db.user_lock`).

A row whose id is there already is left as it is (a memory keeps its revisions):
importing twice writes nothing the second time. An episode whose session and turn
are archived already is the same turn under another id, and is left too. The
lexeme counts the full-text search weighs words with (`lexeme_counts`, migrations
0009 and 0010) follow the inserted rows by the tables' own triggers, as for any
write: a closed memory does not count, an episode does. An export that carries
its entities (`shared.db.entity_import`) brings them as they were, merges too;
from an older one they are derived, as the writes that made them derive them.
"""

from __future__ import annotations

from enum import Enum
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from shared.db import entity_facts
from shared.db.entities import Entities, Owner
from shared.db.episodes import EPISODE_TSV
from shared.db.pool import as_vector
from shared.db.profiles import insert_revision
from shared.portability.records import EpisodeRecord, MemoryRecord, ProfileRecord


class Written(Enum):
    NEW = "new"
    THERE = "there"  # this user's row with this id (or turn) is there already
    OTHERS = "others"  # the id is another user's row


def owner_of(conn: psycopg.Connection, table: str, row_id: UUID, app: str, user_id: str) -> Written:
    """Whose row of `table` with this id is there: the user's (or gone) or another's."""
    row = conn.execute(
        f"SELECT app = %s AND user_id = %s FROM {table} WHERE id = %s", (app, user_id, row_id)
    ).fetchone()
    return Written.THERE if row is None or row[0] else Written.OTHERS


def write_memory(
    conn: psycopg.Connection,
    app: str,
    user_id: str,
    memory_id: UUID,
    m: MemoryRecord,
    derive: bool,
) -> Written:
    """Insert the memory and its revisions unless a memory of this id exists.
    A live memory of the same entity in the same scope under another id raises
    UniqueViolation (memories_live_entity)."""
    inserted = conn.execute(
        """
        INSERT INTO memories (id, app, user_id, project_id, session_id, scope, kind,
                              entity_name, text, topic, expire_at, embedding, observed_at,
                              created_at, updated_at, valid_from, valid_to, source_event_id,
                              metadata, agent_id)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (id) DO NOTHING
        RETURNING 1
        """,
        (
            memory_id,
            app,
            user_id,
            m.project_id,
            m.session_id,
            m.scope,
            m.kind,
            m.entity_name,
            m.text,
            m.topic,
            m.expire_at,
            as_vector(m.embedding),
            m.observed_at,
            m.created_at,
            m.updated_at,
            m.valid_from,
            m.valid_to,
            m.source_event_id,
            Jsonb(m.metadata),
            m.agent_id or "",
        ),
    ).fetchone()
    if inserted is None:
        return owner_of(conn, "memories", memory_id, app, user_id)
    if m.revisions:
        with conn.cursor() as cur:
            # In the file's order, which is their order of ids (history order).
            cur.executemany(
                "INSERT INTO memory_revisions (memory_id, app, user_id, action, old_text, "
                "new_text, event_id, observed_at, applied, created_at, expire_at, source, state) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    (
                        memory_id,
                        app,
                        user_id,
                        r.action,
                        r.old_text,
                        r.new_text,
                        r.event_id,
                        r.observed_at,
                        r.applied,
                        r.created_at,
                        r.expire_at,
                        r.source,
                        None if r.state is None else Jsonb(r.state),
                    )
                    for r in m.revisions
                ],
            )
    if m.feedback:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memory_feedback (memory_id, app, user_id, rating, reason, source, "
                "source_events, restored_at, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, "
                "%s, %s)",
                [
                    (
                        memory_id,
                        app,
                        user_id,
                        f.rating,
                        f.reason,
                        f.source,
                        f.source_events,
                        f.restored_at,
                        f.created_at,
                    )
                    for f in m.feedback
                ],
            )
    if derive:
        _link_memory(conn, Owner(app, user_id, m.project_id or ""), str(memory_id), m)
    return Written.NEW


def _link_memory(conn: psycopg.Connection, owner: Owner, memory_id: str, m: MemoryRecord) -> None:
    """The memory's entities and facts, as its history made them: each revision in
    order, at its own time, as the writes that made them derived them."""
    entities = Entities(conn)
    if not m.revisions:
        entities.link_memory(owner, memory_id, m.text, m.observed_at, None)
        return
    for r in m.revisions:
        event_id = str(r.event_id) if r.event_id else None
        if r.action == "DELETED" and r.applied:
            entity_facts.close_of_memory(conn, memory_id, r.observed_at)
        elif r.new_text:
            late = not r.applied
            entities.link_memory(owner, memory_id, r.new_text, r.observed_at, event_id, late=late)


def write_episode(
    conn: psycopg.Connection,
    app: str,
    user_id: str,
    episode_id: UUID,
    e: EpisodeRecord,
    derive: bool,
) -> Written:
    """Insert the episode unless its id, or its session's turn, is there; its
    full-text vector is computed as the archive computes it."""
    tsv = EPISODE_TSV.format(text="%(text)s", context="%(context)s")
    params = {
        "id": episode_id,
        "app": app,
        "user_id": user_id,
        "project_id": e.project_id,
        "session_id": e.session_id,
        "turn_id": e.turn_id,
        "event_id": e.event_id,
        "user_text": e.user_text,
        "assistant_text": e.assistant_text,
        "tool_events": Jsonb(e.tool_events),
        "text": e.text,
        "context": e.context,
        "embedding": as_vector(e.embedding),
        "created_at": e.created_at,
        "archived_at": e.archived_at,
        "agent_id": e.agent_id or "",
    }
    inserted = conn.execute(
        f"""
        INSERT INTO episodes (id, app, user_id, project_id, session_id, turn_id, event_id,
                              user_text, assistant_text, tool_events, text, context, tsv,
                              embedding, created_at, archived_at, agent_id)
        VALUES (%(id)s, %(app)s, %(user_id)s, %(project_id)s, %(session_id)s, %(turn_id)s,
                %(event_id)s, %(user_text)s, %(assistant_text)s, %(tool_events)s, %(text)s,
                %(context)s, {tsv}, %(embedding)s, %(created_at)s, %(archived_at)s,
                %(agent_id)s)
        ON CONFLICT DO NOTHING
        RETURNING 1
        """,
        params,
    ).fetchone()
    if inserted is not None and not derive:
        return Written.NEW
    if inserted is not None:
        said = f"{e.user_text}\n{e.assistant_text}"
        Entities(conn).link_episode(
            Owner(app, user_id, e.project_id or ""), str(episode_id), said, e.created_at
        )
        return Written.NEW
    same_turn = conn.execute(
        "SELECT 1 FROM episodes WHERE app = %s AND user_id = %s AND session_id = %s "
        "AND turn_id = %s",
        (app, user_id, e.session_id, e.turn_id),
    ).fetchone()
    return Written.THERE if same_turn else owner_of(conn, "episodes", episode_id, app, user_id)


def write_profile_field(
    conn: psycopg.Connection, app: str, user_id: str, p: ProfileRecord
) -> Written:
    """Insert the field's history and value unless the user has a history of this
    field already (importing twice writes nothing the second time). No change
    event: nothing changed for a consumer that saw the original."""
    there = conn.execute(
        "SELECT 1 FROM profile_revisions WHERE app = %s AND user_id = %s AND field = %s LIMIT 1",
        (app, user_id, p.field),
    ).fetchone()
    if there is not None:
        return Written.THERE
    for r in p.revisions:
        insert_revision(conn, app, user_id, p.field, r, r.created_at)
    if p.value is not None:
        conn.execute(
            "INSERT INTO profile_values (app, user_id, field, value, observed_at, updated_at, "
            "source, source_event_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (app, user_id, field) DO NOTHING",
            (
                app,
                user_id,
                p.field,
                Jsonb(p.value),
                p.observed_at,
                p.updated_at,
                p.source,
                p.source_event_id,
            ),
        )
    return Written.NEW
