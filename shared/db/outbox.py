"""The outbox of memory changes: a row per change, written in the change's own
transaction, published as `memory.changed.v1` after the transaction committed
(shared.bus.changes), deleted once Pub/Sub confirmed it.

A change belongs to the deployment whose connection wrote it (its topic prefix,
set on every pooled connection), and only that deployment's publishers take it.
It is written under the user's lock, so one user's rows are numbered in
the order of their commits. A publisher claims every waiting row of the users it
takes (a lease, `claimed_until`), and no user is claimed by two publishers at
once: claims are made one at a time (a transaction-level advisory lock), and a
user with a live lease is skipped. So each user's changes are published in
order, by one publisher at a time; rows whose publisher died are claimed again
when the lease runs out.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from shared.db.clock import database_now
from shared.db.memory_rows import MemoryRow
from shared.db.run import fetch
from shared.events import MemoryChanged, format_time

_CLAIM_LOCK = 0x616D5F6F7574626F  # "am_outbo": one claim at a time
# The topic of a profile field's changes (no extraction topic has this name).
PROFILE_TOPIC = "profile"
# A claim's most changes of one user: published one after another, they take well
# under the lease even at 0.2 s each.
PER_USER = 100


def record(
    conn: psycopg.Connection,
    memory: MemoryRow,
    change: str,
    text: str,
    previous_text: str,
    source_event_id: str | None,
) -> None:
    """Write the change of `memory` to the outbox in the caller's transaction: the
    event it will be, whole."""
    event = MemoryChanged(
        event_id=str(uuid.uuid4()),
        app=memory.app,
        user_id=memory.user_id,
        memory_id=memory.id,
        change=change,
        scope=memory.scope,
        kind=memory.kind,
        project_id=memory.project_id,
        session_id=memory.session_id,
        entity_name=memory.entity_name,
        topic=memory.topic,
        text=text,
        previous_text=previous_text,
        source_event_id=source_event_id or "",
        expire_at=format_time(memory.expire_at) if memory.expire_at else "",
        changed_at=database_now(conn),
        agent_id=memory.agent_id,
    )
    _insert(conn, event)


# A profile field's changes go by one id for the field's whole life, made from
# where it belongs (no row holds it).
_PROFILE_IDS = uuid.UUID("5f0c6d1e-58a4-4c1b-9a51-2a6f3c4e7b90")


def profile_field_id(app: str, user_id: str, field: str) -> str:
    return str(uuid.uuid5(_PROFILE_IDS, f"{app}\x00{user_id}\x00{field}"))


def record_profile(
    conn: psycopg.Connection,
    app: str,
    user_id: str,
    field: str,
    change: str,
    value: Any,
    previous: Any,
    source_event_id: str,
) -> None:
    """A profile field's change as a memory change of topic `profile` (entity: the
    field; text: the value as text), so that a consumer of `memory.changed.v1`
    follows profiles as it follows memories, in the user's one order."""
    event = MemoryChanged(
        event_id=str(uuid.uuid4()),
        app=app,
        user_id=user_id,
        memory_id=profile_field_id(app, user_id, field),
        change=change,
        scope="global",
        kind="fact",
        project_id="",
        session_id="",
        entity_name=field,
        topic=PROFILE_TOPIC,
        text=_text(value),
        previous_text=_text(previous),
        source_event_id=source_event_id,
        expire_at="",
        changed_at=database_now(conn),
    )
    _insert(conn, event)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _insert(conn: psycopg.Connection, event: MemoryChanged) -> None:
    conn.execute(
        "INSERT INTO memory_changes (event_id, app, user_id, memory_id, change, body) "
        "VALUES (%s, %s, %s, %s, %s, %s)",
        (
            event.event_id,
            event.app,
            event.user_id,
            event.memory_id,
            event.change,
            Jsonb(event.to_record()),
        ),
    )


def forget_texts(conn: psycopg.Connection, app: str, user_id: str, memory_ids: list[str]) -> None:
    """An erasure: the waiting changes of these memories keep no text."""
    conn.execute(
        'UPDATE memory_changes SET body = body || \'{"text": "", "previous_text": ""}\' '
        "WHERE app = %s AND user_id = %s AND memory_id = ANY(%s::uuid[])",
        (app, user_id, memory_ids),
    )


@dataclass(frozen=True)
class Claimed:
    id: int
    event: MemoryChanged
    lease: datetime  # the claim's `claimed_until`: what `done` hands back must still hold it


def claim(conn: psycopg.Connection, limit: int, lease_seconds: float) -> list[Claimed]:
    """Lease up to `limit` waiting changes of users no other publisher holds, in
    the order they were made; commit right after, then publish them."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_CLAIM_LOCK,))
    rows = fetch(
        conn,
        """
        WITH mine AS (
            SELECT * FROM memory_changes
            WHERE topic_prefix = coalesce(current_setting('agent_memory.topic_prefix', true), '')
        ), held AS (
            SELECT DISTINCT app, user_id FROM mine WHERE claimed_until > now()
        ), ranked AS (
            SELECT c.id, row_number() OVER (PARTITION BY c.app, c.user_id ORDER BY c.id) AS rank
            FROM mine c
            WHERE (c.claimed_until IS NULL OR c.claimed_until <= now())
              AND NOT EXISTS (SELECT 1 FROM held h WHERE h.app = c.app AND h.user_id = c.user_id)
        ), picked AS (
            SELECT id FROM ranked WHERE rank <= %s ORDER BY id LIMIT %s
        )
        UPDATE memory_changes c SET claimed_until = now() + make_interval(secs => %s)
        FROM picked WHERE c.id = picked.id
        RETURNING c.id, c.event_id::text AS event_id, c.app, c.user_id,
                  c.memory_id::text AS memory_id, c.change, c.body, c.created_at,
                  c.claimed_until
        """,
        (PER_USER, limit, lease_seconds),
    )
    claimed = (
        Claimed(row["id"], MemoryChanged.from_record(row["body"]), row["claimed_until"])
        for row in rows
    )
    return sorted(claimed, key=lambda c: c.id)


def done(
    conn: psycopg.Connection, published: list[int], failed: list[int], lease: datetime
) -> None:
    """Forget what Pub/Sub confirmed; hand back the rest at once, unless another
    publisher claimed it since (the lease ran out meanwhile)."""
    if published:
        conn.execute("DELETE FROM memory_changes WHERE id = ANY(%s)", (published,))
    if failed:
        conn.execute(
            "UPDATE memory_changes SET claimed_until = NULL "
            "WHERE id = ANY(%s) AND claimed_until = %s",
            (failed, lease),
        )


def waiting(conn: psycopg.Connection) -> bool:
    """Whether any change of this deployment waits unclaimed (cheap)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM memory_changes WHERE topic_prefix = "
        "coalesce(current_setting('agent_memory.topic_prefix', true), '') "
        "AND (claimed_until IS NULL OR claimed_until <= now()))"
    ).fetchone()
    return bool(row and row[0])
