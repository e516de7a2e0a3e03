"""Reading one user's memories, episodes, profile and entities as export lines
(`shared.portability.records`).

Postgres writes each line itself (`json_build_object`): the embedding goes out as
pgvector prints it, which is already a JSON array of the shortest numbers that
read back as the same 32-bit floats, and no row becomes Python objects on the way.
The rows are read through a server-side (named) cursor, `BATCH_ROWS` at a time,
so the exporting process holds one batch whatever the user's size. Every cursor
runs in one REPEATABLE READ, READ ONLY transaction: memories, their revisions and
feedback, episodes and entities come from one snapshot, and a change committed
during the export is in none of it. The transaction stays open while the lines
are written out (to a file or a client): it holds no lock a writer waits for, only its snapshot.

The same statements run on a sync connection (the CLI) and an async one (the API).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import datetime

import psycopg

from shared.db import entity_export
from shared.portability.records import end_line, header_line

# Rows per FETCH: a memory line with a 768-dimension embedding is about 10 kB.
BATCH_ROWS = 200

_SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
# Times as RFC 3339 in UTC, whatever the server's time zone.
_UTC = "SET LOCAL TimeZone = 'UTC'"

_REVISIONS = """
    (SELECT coalesce(json_agg(json_build_object(
                'action', r.action, 'old_text', r.old_text, 'new_text', r.new_text,
                'event_id', r.event_id, 'observed_at', r.observed_at, 'applied', r.applied,
                'created_at', r.created_at, 'expire_at', r.expire_at, 'source', r.source,
                'state', r.state) ORDER BY r.id), '[]')
     FROM memory_revisions r WHERE r.memory_id = m.id)
"""

_FEEDBACK = """
    (SELECT coalesce(json_agg(json_build_object(
                'rating', f.rating, 'reason', f.reason, 'source', f.source,
                'source_events', f.source_events, 'restored_at', f.restored_at,
                'created_at', f.created_at) ORDER BY f.id), '[]')
     FROM memory_feedback f WHERE f.memory_id = m.id)
"""

# In the order of memories_user_entity (no sort of the user's rows before the
# first line goes out).
MEMORY_LINES = f"""
SELECT json_build_object(
    'type', 'memory', 'id', m.id, 'scope', m.scope, 'kind', m.kind,
    'project_id', nullif(m.project_id, ''), 'session_id', nullif(m.session_id, ''),
    'entity_name', m.entity_name, 'text', m.text, 'topic', m.topic, 'expire_at', m.expire_at,
    'observed_at', m.observed_at, 'created_at', m.created_at, 'updated_at', m.updated_at,
    'valid_from', m.valid_from, 'valid_to', m.valid_to, 'source_event_id', m.source_event_id,
    'embedding', m.embedding::text::json, 'revisions', {_REVISIONS},
    'metadata', m.metadata, 'feedback', {_FEEDBACK}, 'agent_id', nullif(m.agent_id, ''))::text
FROM memories m
WHERE m.app = %(app)s AND m.user_id = %(user_id)s
ORDER BY m.scope, m.project_id, m.session_id, lower(m.entity_name), m.observed_at, m.id
"""

# Every column but `tsv`, which is computed from `text` and `context`; in the
# order of episodes_session_order.
EPISODE_LINES = """
SELECT json_build_object(
    'type', 'episode', 'id', e.id, 'project_id', nullif(e.project_id, ''),
    'session_id', e.session_id, 'turn_id', e.turn_id, 'event_id', e.event_id,
    'user_text', e.user_text, 'assistant_text', e.assistant_text,
    'tool_events', e.tool_events, 'text', e.text, 'context', e.context,
    'created_at', e.created_at, 'archived_at', e.archived_at,
    'embedding', e.embedding::text::json, 'agent_id', nullif(e.agent_id, ''))::text
FROM episodes e
WHERE e.app = %(app)s AND e.user_id = %(user_id)s
ORDER BY e.session_id, e.created_at, e.turn_id
"""

# Each field with a value or a history; the value's times are null when it has none.
PROFILE_LINES = """
SELECT json_build_object(
    'type', 'profile', 'field', f.field, 'value', v.value, 'observed_at', v.observed_at,
    'updated_at', v.updated_at, 'source', coalesce(v.source, ''),
    'source_event_id', coalesce(v.source_event_id, ''),
    'revisions', (SELECT coalesce(json_agg(json_build_object(
                'action', r.action, 'value', r.value, 'previous', r.previous,
                'observed_at', r.observed_at, 'applied', r.applied, 'source', r.source,
                'source_event_id', r.source_event_id, 'created_at', r.created_at)
                ORDER BY r.id), '[]')
        FROM profile_revisions r
        WHERE r.app = %(app)s AND r.user_id = %(user_id)s AND r.field = f.field))::text
FROM (SELECT field FROM profile_values WHERE app = %(app)s AND user_id = %(user_id)s
      UNION SELECT field FROM profile_revisions WHERE app = %(app)s AND user_id = %(user_id)s) f
LEFT JOIN profile_values v ON v.app = %(app)s AND v.user_id = %(user_id)s AND v.field = f.field
ORDER BY f.field
"""
# Every kind of line in the file's order (the end line counts each).
_LINES = (
    ("export_memories", MEMORY_LINES),
    ("export_episodes", EPISODE_LINES),
    ("export_profile", PROFILE_LINES),
    *entity_export.LINES,
)

HAS_ROWS = """
SELECT EXISTS (SELECT 1 FROM memories WHERE app = %(app)s AND user_id = %(user_id)s)
    OR EXISTS (SELECT 1 FROM episodes WHERE app = %(app)s AND user_id = %(user_id)s)
    OR EXISTS (SELECT 1 FROM profile_revisions WHERE app = %(app)s AND user_id = %(user_id)s)
"""


def has_rows(conn: psycopg.Connection, app: str, user_id: str) -> bool:
    """Whether the app holds any memory, episode or profile of the user."""
    row = conn.execute(HAS_ROWS, {"app": app, "user_id": user_id}).fetchone()
    return bool(row and row[0])


async def ahas_rows(conn: psycopg.AsyncConnection, app: str, user_id: str) -> bool:
    row = await (await conn.execute(HAS_ROWS, {"app": app, "user_id": user_id})).fetchone()
    return bool(row and row[0])


def _chunk(rows: list[tuple[str]]) -> bytes:
    return "".join(f"{row[0]}\n" for row in rows).encode()


def export_lines(
    conn: psycopg.Connection, app: str, user_id: str, dim: int, now: datetime
) -> Iterator[bytes]:
    """The user's export as chunks of whole lines, read on `conn` (idle, not in a
    transaction: the export's own is opened here)."""
    params = {"app": app, "user_id": user_id}
    counts = []
    with conn.transaction():
        conn.execute(_SNAPSHOT)
        conn.execute(_UTC)
        yield header_line(app, user_id, now, dim)
        for name, sql in _LINES:
            count = 0
            with conn.cursor(name=name) as cur:
                cur.execute(sql, params)
                while rows := cur.fetchmany(BATCH_ROWS):
                    count += len(rows)
                    yield _chunk(rows)
            counts.append(count)
    yield end_line(*counts)


async def aexport_lines(
    conn: psycopg.AsyncConnection, app: str, user_id: str, dim: int, now: datetime
) -> AsyncIterator[bytes]:
    """`export_lines` on an async connection."""
    params = {"app": app, "user_id": user_id}
    counts = []
    async with conn.transaction():
        await conn.execute(_SNAPSHOT)
        await conn.execute(_UTC)
        yield header_line(app, user_id, now, dim)
        for name, sql in _LINES:
            count = 0
            async with conn.cursor(name=name) as cur:
                await cur.execute(sql, params)
                while rows := await cur.fetchmany(BATCH_ROWS):
                    count += len(rows)
                    yield _chunk(rows)
            counts.append(count)
    yield end_line(*counts)
